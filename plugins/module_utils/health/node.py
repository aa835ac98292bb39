# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Judge a GPU node: which checks run, where their input comes from, and the one result.

Two modes:

- saved outputs (``paths``): each file's kind is read from its text (sources.detect_kind) and
  judged by its parser, off the node; sysfs is not read, so the InfiniBand check does not run;
- live: ``nvidia-smi -q -x``, the kernel log of this boot (``journalctl -k``, else
  ``dmesg``) and the ports under ``<sysfs_root>/class/infiniband``.

Commands run through callables (AnsibleModule's ``get_bin_path`` and ``run_command`` in
shape), so the whole of it is tested without a node. A check that could not run is listed
in ``not_run`` with the reason: a missing tool is never a pass.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from ansible_collections.gpuops.training.plugins.module_utils.health import infiniband, nvidia_smi, xid
from ansible_collections.gpuops.training.plugins.module_utils.health.nvidia_smi import (
    ISOLATE,
    MONITOR,
    REBOOT,
    NvidiaSmiError,
)
from ansible_collections.gpuops.training.plugins.module_utils.health.sources import (
    KIND_KERNEL_LOG,
    KIND_NVIDIA_SMI_XML,
    detect_kind,
)
from ansible_collections.gpuops.training.plugins.module_utils.health.xid import KernelLogError

CHECKS = ("nvidia_smi", "kernel_log", "infiniband")
HEALTHY = "healthy"
# Worst first: the verdict is the first class any finding has.
CLASSES = (ISOLATE, REBOOT, MONITOR)

NVIDIA_SMI_ARGV = ("-q", "-x")
# nvidia-smi hangs on a GPU the driver is stuck on; run under timeout(1) when it is there,
# so the module answers, and the hang itself becomes the finding.
NVIDIA_SMI_TIMEOUT_S = 120
JOURNALCTL_ARGV = ("-k", "-b", "--no-pager", "-o", "short-iso")


class HealthInputError(ValueError):
    """An option's value the checks cannot use; the message starts with the option's name."""


def validate(params: dict) -> None:
    """Raise HealthInputError naming the first option whose value cannot be used."""
    expected_gpus = params.get("expected_gpus")
    if expected_gpus is not None and expected_gpus < 0:
        raise HealthInputError("expected_gpus: a GPU count is 0 or more, got %d" % expected_gpus)
    rate = params.get("expected_ib_rate_gbps")
    # NaN compares false with everything, so it is refused by asking for a positive number.
    if rate is not None and not rate > 0:
        raise HealthInputError("expected_ib_rate_gbps: a rate in Gb/s is above 0, got %s" % rate)
    checks = params.get("checks")
    if checks is not None:
        if not checks:
            raise HealthInputError("checks: name at least one of %s" % ", ".join(CHECKS))
        unknown = [name for name in checks if name not in CHECKS]
        if unknown:
            raise HealthInputError(
                "checks: unknown check %s; the checks are %s"
                % (", ".join(map(repr, unknown)), ", ".join(CHECKS))
            )
    for path in params.get("paths") or []:
        if not os.path.exists(path):
            raise HealthInputError("paths: %r does not exist" % path)


def expand_paths(paths: list[str]) -> list[str]:
    """The files to read: each file as given, each directory's regular files by name (not
    below it, so a directory of one node's saved outputs is read and nothing more)."""
    files = []
    for path in paths:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                child = os.path.join(path, name)
                if os.path.isfile(child):
                    files.append(child)
        else:
            files.append(path)
    return files


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise HealthInputError("paths: cannot read %r: %s" % (path, error.strerror or error)) from None
    return data.decode("utf-8", errors="replace")


def _not_run(check: str, reason: str) -> dict:
    return {"check": check, "reason": reason}


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def _has_entries(text: str) -> bool:
    """Whether a kernel log read live holds a line of the log, not only journalctl's own
    notes (``-- No entries --``, ``-- Boot ... --``)."""
    return any(line.strip() and not line.startswith("-- ") for line in (text or "").splitlines())


class _Result:
    def __init__(self) -> None:
        self.findings: list[dict] = []
        self.not_run: list[dict] = []
        self.gpus: list[dict] = []
        self.ib_ports: list[dict] = []
        self.xid_events: list[dict] = []
        self.sources: list[dict] = []

    def nvidia_smi_report(self, text: str, source: str, expected_gpus: int | None) -> None:
        try:
            report = nvidia_smi.parse_nvidia_smi_xml(text)
        except NvidiaSmiError as error:
            self.not_run.append(_not_run("nvidia_smi", "%s: %s" % (source, error)))
            return
        for gpu in report["gpus"]:
            self.gpus.append(dict(gpu, source=source))
        self.findings.extend(nvidia_smi.findings(report, expected_gpus))

    def kernel_log(self, text: str, source: str) -> None:
        try:
            events = xid.parse_kernel_log(text)
        except KernelLogError as error:
            self.not_run.append(_not_run("kernel_log", "%s: %s" % (source, error)))
            return
        self.xid_events.extend(dict(event, source=source) for event in events)
        # Per source, so line numbers in the reasons are those of one file.
        self.findings.extend(xid.findings(events))

    def as_dict(self, checks: list[str]) -> dict:
        present = {finding["class"] for finding in self.findings}
        verdict = next((klass for klass in CLASSES if klass in present), HEALTHY)
        ran = [check for check in checks if check not in {entry["check"] for entry in self.not_run}]
        return {
            "verdict": verdict,
            "summary": summary(verdict, self.findings, self.not_run, ran),
            "complete": not self.not_run,
            "findings": self.findings,
            "not_run": self.not_run,
            "gpus": self.gpus,
            "ib_ports": self.ib_ports,
            "xid_events": self.xid_events,
            "sources": self.sources,
        }


def summary(verdict: str, findings: list[dict], not_run: list[dict], ran: list[str]) -> str:
    """One line: the verdict, the count per class, and what did not run."""
    tally = [(sum(1 for finding in findings if finding["class"] == klass), klass) for klass in CLASSES]
    counts = ["%d %s" % (count, klass) for count, klass in tally if count]
    line = "%s: %s" % (verdict, ", ".join(counts) if counts else "no findings")
    line += "; checked %s" % (", ".join(ran) if ran else "nothing")
    if not_run:
        line += "; not run: %s" % "; ".join(
            "%s (%s)" % (entry["check"], entry["reason"]) for entry in not_run
        )
    return line


def judge_saved(paths: list[str], checks: list[str], expected_gpus: int | None = None) -> dict:
    """Judge saved outputs (files, or directories of them) without touching the node."""
    result = _Result()
    seen = set()
    for path in expand_paths(paths):
        text = _read_file(path)
        kind = detect_kind(text)
        result.sources.append({"path": path, "kind": kind})
        if kind == KIND_NVIDIA_SMI_XML and "nvidia_smi" in checks:
            seen.add("nvidia_smi")
            result.nvidia_smi_report(text, path, expected_gpus)
        elif kind == KIND_KERNEL_LOG and "kernel_log" in checks:
            seen.add("kernel_log")
            result.kernel_log(text, path)
    what = {"nvidia_smi": "an nvidia-smi -q -x report", "kernel_log": "a kernel log"}
    for check in checks:
        if check == "infiniband":
            result.not_run.append(
                _not_run(check, "saved outputs were given (paths); the ports are read live from sysfs only")
            )
        elif check not in seen:
            result.not_run.append(_not_run(check, "no file in paths is %s" % what[check]))
    return result.as_dict(checks)


def _nvidia_smi_live(
    result: _Result,
    get_bin_path: Callable[[str], str | None],
    run_command: Callable[[list], tuple[int, str, str]],
    expected_gpus,
) -> None:
    binary = get_bin_path("nvidia-smi")
    if not binary:
        result.not_run.append(_not_run("nvidia_smi", "nvidia-smi is not on PATH; the GPUs were not checked"))
        return
    timeout = get_bin_path("timeout")
    prefix = [timeout, str(NVIDIA_SMI_TIMEOUT_S)] if timeout else []
    rc, out, err = run_command(prefix + [binary] + list(NVIDIA_SMI_ARGV))
    result.sources.append({"path": "%s -q -x" % binary, "kind": KIND_NVIDIA_SMI_XML})
    if timeout and rc == 124:
        result.findings.append(
            {
                "device": "node",
                "check": "nvidia_smi_hung",
                "class": REBOOT,
                "reason": "nvidia-smi -q -x did not answer within %d s" % NVIDIA_SMI_TIMEOUT_S,
                "remedy": "Look in the kernel log for Xid 79, 119 or 120 and for hung-task traces; a GPU "
                "the driver is stuck on is usually cleared only by a reboot.",
            }
        )
        return
    if rc != 0:
        # nvidia-smi is installed but cannot talk to the driver: no GPU work runs here.
        result.findings.append(
            {
                "device": "node",
                "check": "nvidia_smi_failed",
                "class": ISOLATE,
                "reason": "nvidia-smi -q -x exited with %d: %s"
                % (rc, _first_line(err) or _first_line(out) or "no output"),
                "remedy": "Drain the node; check that the NVIDIA driver is loaded (lsmod, dmesg for NVRM "
                "lines) and matches the installed nvidia-smi, then reboot or reinstall the driver.",
            }
        )
        return
    result.nvidia_smi_report(out, "%s -q -x" % binary, expected_gpus)


def _kernel_log_live(
    result: _Result,
    get_bin_path: Callable[[str], str | None],
    run_command: Callable[[list], tuple[int, str, str]],
) -> None:
    tried = []
    journalctl = get_bin_path("journalctl")
    if journalctl:
        argv = [journalctl] + list(JOURNALCTL_ARGV)
        rc, out, err = run_command(argv)
        if rc == 0 and _has_entries(out):
            result.sources.append({"path": " ".join(argv), "kind": KIND_KERNEL_LOG})
            result.kernel_log(out, "journalctl -k")
            return
        # No journal (a container, a volatile journal not kept): dmesg still has the ring.
        # journalctl that finds no journal file for this boot says "-- No entries --" and exits
        # with 0 (systemd 252): that is no kernel log, not a clean one.
        if rc == 0:
            tried.append(
                "journalctl -k -b found no entries (%s)"
                % (_first_line(err) or _first_line(out) or "no output")
            )
        else:
            tried.append("journalctl -k exited with %d: %s" % (rc, _first_line(err) or "no output"))
    else:
        tried.append("journalctl is not on PATH")
    dmesg = get_bin_path("dmesg")
    if dmesg:
        rc, out, err = run_command([dmesg])
        if rc == 0 and _has_entries(out):
            result.sources.append({"path": dmesg, "kind": KIND_KERNEL_LOG})
            result.kernel_log(out, "dmesg")
            return
        if rc == 0:
            # A running kernel's ring is never empty: nothing was read.
            tried.append("dmesg printed nothing")
        else:
            # kernel.dmesg_restrict=1 lets only root read the ring.
            tried.append("dmesg exited with %d: %s" % (rc, _first_line(err) or "no output"))
    else:
        tried.append("dmesg is not on PATH")
    result.not_run.append(_not_run("kernel_log", "; ".join(tried)))


def _infiniband_live(result: _Result, sysfs_root: str, expected_rate: float | None) -> None:
    ports = infiniband.read_ports(sysfs_root)
    result.sources.append({"path": os.path.join(sysfs_root, "class", "infiniband"), "kind": "sysfs"})
    result.ib_ports.extend(ports)
    result.findings.extend(infiniband.findings(ports, expected_rate))
    if not ports and expected_rate:
        # A rate was expected, so the node should have a port to carry it.
        result.findings.append(
            {
                "device": "node",
                "check": "ib_ports_missing",
                "class": ISOLATE,
                "reason": "no InfiniBand or RoCE port under %s, %g Gb/s expected"
                % (os.path.join(sysfs_root, "class", "infiniband"), expected_rate),
                "remedy": "Drain the node; check that the HCA is seen (lspci) and its driver is loaded "
                "(mlx5_core and mlx5_ib, or the vendor's).",
            }
        )


def judge_live(
    checks: list[str],
    get_bin_path: Callable[[str], str | None],
    run_command: Callable[[list], tuple[int, str, str]],
    expected_gpus: int | None = None,
    expected_ib_rate_gbps: float | None = None,
    sysfs_root: str = infiniband.DEFAULT_SYSFS_ROOT,
) -> dict:
    """Judge this node: run the tools that are present and read sysfs."""
    result = _Result()
    if "nvidia_smi" in checks:
        _nvidia_smi_live(result, get_bin_path, run_command, expected_gpus)
    if "kernel_log" in checks:
        _kernel_log_live(result, get_bin_path, run_command)
    if "infiniband" in checks:
        _infiniband_live(result, sysfs_root, expected_ib_rate_gbps)
    return result.as_dict(checks)


def judge_node(
    params: dict,
    get_bin_path: Callable[[str], str | None],
    run_command: Callable[[list], tuple[int, str, str]],
) -> dict:
    """The module's one call: validate ``params`` and judge saved outputs or the live node.

    Raises HealthInputError for an option's value that cannot be used.
    """
    validate(params)
    checks = [check for check in CHECKS if check in (params.get("checks") or CHECKS)]
    if params.get("paths"):
        return judge_saved(params["paths"], checks, params.get("expected_gpus"))
    sysfs_root = params.get("sysfs_root")
    if sysfs_root is None:
        sysfs_root = infiniband.DEFAULT_SYSFS_ROOT
    if "infiniband" in checks and not os.path.isdir(sysfs_root):
        raise HealthInputError("sysfs_root: %r is not a directory" % sysfs_root)
    return judge_live(
        checks,
        get_bin_path,
        run_command,
        params.get("expected_gpus"),
        params.get("expected_ib_rate_gbps"),
        sysfs_root,
    )
