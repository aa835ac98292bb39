# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The report of an isolate run: ``isolate.json`` (schema ``gpuops.nccl-isolate/v1``) and
``isolate.md``, the findings first, each with the tests (and their large-message rows) that
show it, then every round."""

from __future__ import annotations

SCHEMA = "gpuops.nccl-isolate/v1"


def build_summary(state, findings, profile=None, lines=()):
    """What isolate.json holds."""
    tests = sorted(state["singles"] + state["network"], key=lambda test: (test["round"], test["id"]))
    return {
        "schema": SCHEMA,
        "verdict": findings["verdict"],
        "nodes": state["nodes"],
        "findings": list(lines),
        "suspects": findings["suspects"],
        "slow_links": findings["slow_links"],
        "undetermined": findings["undetermined"],
        "fleet": findings["fleet"],
        "not_measured": findings["not_measured"],
        "good": state["good"],
        "tolerance": state["tolerance"],
        "single_median_gbyte_s": state["single_median"],
        "pair_median_gbyte_s": state["pair_median"],
        "expected_single_gbyte_s": state["expected_single"],
        "expected_pair_gbyte_s": state["expected_pair"],
        "fabric_profile": profile,
        "rounds": 1 + state["network_rounds"] if state["singles"] else 0,
        "network_rounds": state["network_rounds"],
        "round_budget": state["round_budget"],
        "tests": tests,
    }


def _gbs(value):
    return "-" if value is None else "%.2f" % value


def _row_lines(test):
    return [
        "    %14d B  busbw %s GB/s out-of-place, %s in-place; algbw %s GB/s"
        % (
            row["size"],
            _gbs(row["busbw_out_of_place"]),
            _gbs(row["busbw_in_place"]),
            _gbs(row["algbw_out_of_place"]),
        )
        for row in test.get("rows") or []
    ]


def _evidence_lines(evidence):
    lines = []
    for test in evidence:
        lines.append(
            "- %s (round %s, %s): %s - %s"
            % (
                test["id"],
                test["round"],
                " + ".join(test["nodes"]),
                "SLOW" if test["slow"] else "ok",
                test["why"],
            )
        )
        rows = _row_lines(test)
        if rows:
            lines += ["", "  ```"] + rows + ["  ```", ""]
    return lines


def render_markdown(summary):
    """isolate.md."""
    out = ["# Isolate run: %s" % summary["verdict"].upper(), ""]
    profile = summary.get("fabric_profile")
    out.append(
        "%d nodes, %d rounds (%d network rounds, budget %d); tolerance %.0f %%."
        % (
            len(summary["nodes"]),
            summary["rounds"],
            summary["network_rounds"],
            summary["round_budget"],
            summary["tolerance"] * 100,
        )
    )
    out.append(
        "Medians: alone %s GB/s, in pairs %s GB/s; expected alone %s, in pairs %s GB/s%s."
        % (
            _gbs(summary["single_median_gbyte_s"]),
            _gbs(summary["pair_median_gbyte_s"]),
            _gbs(summary["expected_single_gbyte_s"]),
            _gbs(summary["expected_pair_gbyte_s"]),
            " (fabric profile %s: %s)" % (profile["name"], profile["description"]) if profile else "",
        )
    )
    out.append("")
    if summary["findings"]:
        out += ["## Findings", ""] + ["- %s" % line for line in summary["findings"]] + [""]
    for suspect in summary["suspects"]:
        out += ["### Suspect node %s (%s)" % (suspect["node"], suspect["where"]), "", suspect["reason"], ""]
        out += _evidence_lines(suspect["evidence"]) + [""]
    for link in summary["slow_links"]:
        out += ["### Slow link %s" % " <-> ".join(link["nodes"]), "", link["reason"], ""]
        out += _evidence_lines(link["evidence"]) + [""]
    for entry in summary["undetermined"]:
        out += ["### Undetermined: %s" % entry["node"], "", entry["reason"], ""]
        out += _evidence_lines(entry["evidence"]) + [""]
    out += [
        "## Every test",
        "",
        "| test | round | nodes | bus bandwidth (GB/s) | slow | why |",
        "|---|---|---|---|---|---|",
    ]
    for test in summary["tests"]:
        out.append(
            "| %s | %s | %s | %s | %s | %s |"
            % (
                test["id"],
                test["round"],
                ", ".join(test["nodes"]),
                _gbs(test.get("busbw")),
                "yes" if test["slow"] else "no",
                test["why"].replace("|", "/"),
            )
        )
    return "\n".join(out).rstrip() + "\n"
