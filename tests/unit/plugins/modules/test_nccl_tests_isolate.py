"""nccl_tests_isolate as the role runs it, round after round: arguments in, JSON out, on
nccl-tests logs (tests/harness/nccl_tests_output.py) that a fleet with one wrong node prints -
slow NICs, or wrong results alone - and on the shipped fabric profiles."""

from __future__ import annotations

import pathlib
import sys

import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils.fabric import profiles
from ansible_collections.gpuops.training.plugins.modules import nccl_tests_isolate

REPO_ROOT = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))

from nccl_tests_output import all_reduce_output  # noqa: E402

PROFILES = yaml.safe_load((REPO_ROOT / "roles" / "nccl_tests" / "vars" / "fabric_profiles.yml").read_text())[
    "nccl_tests_fabric_profiles"
]
NODES = ["gpu-%d" % index for index in range(6)]


def play(run_module, tmp_path, busbw_of, wrong_of=lambda nodes: 0, **options):
    """Run the module round after round as the role does, writing each test's log."""
    tests, rounds = [], 0
    while True:
        run = run_module(nccl_tests_isolate.main, dict(options, nodes=NODES, tests=tests))
        assert run.exit_code == 0, run.result.get("msg")
        assert run.result["changed"] is False
        if run.result["done"]:
            return run.result, rounds
        rounds += 1
        planned = run.result["round"]
        for test in planned["tests"]:
            log = tmp_path / (test["id"] + ".log")
            log.write_text(
                all_reduce_output(test["nodes"], busbw_of(test["nodes"]), wrong=wrong_of(test["nodes"]))
            )
            tests.append(dict(test, round=planned["index"], kind=planned["kind"], log=str(log), rc=0))


def test_a_node_with_slow_nics_is_named_with_its_rows_against_the_ndr_profile(run_module, tmp_path):
    profile = dict(PROFILES["ib_ndr"], name="ib_ndr")
    result, rounds = play(
        run_module,
        tmp_path,
        lambda nodes: 370.0 if len(nodes) == 1 else (150.0 if "gpu-3" in nodes else 380.0),
        fabric_profile=profile,
    )
    assert rounds == 3 and result["verdict"] == "failed"
    summary = result["summary"]
    assert summary["schema"] == "gpuops.nccl-isolate/v1"
    assert [suspect["node"] for suspect in summary["suspects"]] == ["gpu-3"]
    assert (
        summary["expected_pair_gbyte_s"] == 384.0 and summary["fabric_profile"]["line_rate_gbyte_s"] == 400.0
    )
    assert result["findings"] == [
        "suspect node gpu-3 (network): slow beside 2 partners (gpu-1, gpu-2), gpu-1, gpu-2 proven good by "
        "tests that were not slow"
    ]
    (suspect,) = summary["suspects"]
    assert suspect["evidence"][0]["rows"][-1]["size"] == 8 << 30
    assert suspect["evidence"][0]["rows"][-1]["busbw_out_of_place"] == 150.0
    assert "### Suspect node gpu-3 (network)" in result["report"]
    assert "8589934592 B  busbw 150.00 GB/s out-of-place" in result["report"]


def test_a_node_with_wrong_results_alone_is_named_whatever_its_bandwidth(run_module, tmp_path):
    result, rounds = play(
        run_module,
        tmp_path,
        lambda nodes: 370.0 if len(nodes) == 1 else 380.0,
        wrong_of=lambda nodes: 4 if nodes == ["gpu-1"] else 0,
    )
    (suspect,) = result["summary"]["suspects"]
    assert (suspect["node"], suspect["where"]) == ("gpu-1", "alone (NVLink/PCIe)")
    assert "no usable result: 8 wrong results (#wrong): data was corrupted" in suspect["reason"]
    # The other five: one pairing round and the node that waited, beside a good one.
    assert rounds == 3 and result["summary"]["undetermined"] == []


def test_an_unknown_tolerance_or_profile_fails_naming_the_option(run_module):
    run = run_module(nccl_tests_isolate.main, {"nodes": NODES, "tolerance": 1.5})
    assert run.exit_code == 1 and run.result["msg"].startswith("tolerance must be between 0 and 1")
    run = run_module(nccl_tests_isolate.main, {"nodes": NODES, "fabric_profile": {"gbit_per_nic": 400}})
    assert run.exit_code == 1 and run.result["msg"].startswith(
        "fabric_profile: the profile: description is missing"
    )
    run = run_module(nccl_tests_isolate.main, {"nodes": ["gpu-1"]})
    assert run.exit_code == 1 and "at least two nodes" in run.result["msg"]


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_every_shipped_profile_says_where_each_figure_comes_from(name):
    assert profiles.profile_problems(name, PROFILES[name]) == []
    expected = profiles.expected_pair_busbw(PROFILES[name])
    if PROFILES[name]["expected_share"] is None:
        assert expected is None and "none" in PROFILES[name]["sources"]["expected_share"]
    else:
        assert 0 < expected <= profiles.line_rate_gbyte_s(PROFILES[name])


def test_the_profiles_expectations():
    assert {name: profiles.expected_pair_busbw(profile) for name, profile in PROFILES.items()} == {
        "ib_hdr": 192.0, "ib_ndr": 384.0, "roce_100g": 90.0, "roce_200g": 180.0, "roce_400g": 360.0,
        "efa_p4d": None, "efa_p5": None,
    }  # fmt: skip
    assert profiles.expected_pair_busbw(PROFILES["ib_ndr"], nics_per_node=4) == 192.0
    with pytest.raises(
        profiles.ProfileError, match="^nccl_tests_fabric_profile: there is no fabric profile 'x'"
    ):
        profiles.select_profile("x", PROFILES)
