# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What verifying a fleet-sized run costs the controller: a simulated job of N pods x 8 ranks
through playbooks/train.yml, unchanged, on the test harness.

For each case (pods, MB per pod) the harness's kwok nodes (8 GPUs each) take a real PyTorchJob
of N pods made by the real Training Operator; kwok serves each pod's log (tests/harness/fleet.py:
NCCL's init of an N x 8 rank job over IB, the trainer's JSON lines of a real run, padded to the
size); train.yml launches, waits, collects and verifies. Printed per case, as one JSON line:

    pods, ranks, mb_per_pod, verdict, completion_to_verdict_s (from the moment the job's
    Succeeded condition is seen to the end of the play, which prints the verdict last),
    collect_s (the tasks between the end of the wait and launcher.log), verify_s (the
    training_verify role), playbook_s, controller_peak_rss_mib (ansible-playbook and every
    process under it, summed, sampled every 0.2 s), load_average

``--baseline`` also runs the same at 16 pods with the collection as it was at BASELINE_COMMIT,
whose training_job read every log with kubernetes.core.k8s_log into variables: the path this
benchmark exists to replace, measured in the same run. The summary line gives the ratios.

    .venv/bin/python benchmarks/scale/run.py                      # every case, with the baseline
    .venv/bin/python benchmarks/scale/run.py --cases 16x1 128x10  # some cases
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
from fleet import FleetJob, FleetLogServer, fleet_job_vars, fleet_node_specs, fleet_nodes, run_trainer_ranks  # noqa: E402
from k8s_harness import Harness  # noqa: E402

# The last commit whose training_job role read every pod's log with kubernetes.core.k8s_log in a
# task loop, joined them with set_fact and wrote them with copy.
BASELINE_COMMIT = "e300ce2"
CASES = ["16x1", "16x10", "64x1", "64x10", "128x1", "128x10"]
BASELINE_CASES = ["16x1", "16x10"]
BIN = pathlib.Path(sys.executable).parent
PAGE = os.sysconf("SC_PAGE_SIZE")


def baseline_collections(workdir: pathlib.Path) -> pathlib.Path:
    """The collection as it was at BASELINE_COMMIT, installed into its own collections path."""
    source = workdir / "baseline-src"
    source.mkdir()
    archive = subprocess.run(
        ["git", "archive", BASELINE_COMMIT], cwd=REPO_ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    built = workdir / "baseline-build"
    subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "build",
            "--force",
            "--output-path",
            str(built),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (tarball,) = built.glob("*.tar.gz")
    target = workdir / "baseline-collections"
    subprocess.run(
        [
            str(BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--force",
            "--no-deps",
            "-p",
            str(target),
            str(tarball),
        ],
        check=True,
        capture_output=True,
    )
    return target


class TreeRss(threading.Thread):
    """The peak of the summed resident set of a process and every process under it."""

    def __init__(self, pid: int, interval: float = 0.2):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peak = pid, interval, 0
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            self.peak = max(self.peak, self.sample())
            self._halt.wait(self.interval)

    def sample(self) -> int:
        parents = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/stat" % entry) as stat:
                        parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):
                    continue
        tree, grew = {self.pid}, True
        while grew:
            more = {pid for pid, parent in parents.items() if parent in tree} - tree
            grew = bool(more)
            tree |= more
        total = 0
        for pid in tree:
            try:
                with open("/proc/%d/statm" % pid) as statm:
                    total += int(statm.read().split()[1]) * PAGE
            except (OSError, IndexError, ValueError):
                continue
        return total

    def stop(self):
        self._halt.set()
        self.join()


class JobWatcher(threading.Thread):
    """When the PyTorchJob's Succeeded or Failed condition was first seen (monotonic)."""

    def __init__(self, api_client, namespace: str, interval: float = 0.2):
        super().__init__(daemon=True)
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api_client)
        self.namespace, self.interval, self.ended = namespace, interval, None
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set() and self.ended is None:
            try:
                jobs = self.custom.list_namespaced_custom_object(
                    "kubeflow.org", "v1", self.namespace, "pytorchjobs"
                )
                for job in jobs.get("items", []):
                    for condition in (job.get("status") or {}).get("conditions") or []:
                        if (
                            condition.get("type") in ("Succeeded", "Failed")
                            and condition.get("status") == "True"
                        ):
                            self.ended = time.monotonic()
            except Exception:  # the next read tries again
                pass
            self._halt.wait(self.interval)

    def stop(self):
        self._halt.set()
        self.join()


TASK_LINE = re.compile(r"^TASK \[(?P<name>.*)\] \*+$")
TIMING_LINE = re.compile(r"^\w+ \d+ \w+ \d+ +[\d:]+ [+-]\d{4} \((?P<h>\d+):(?P<m>\d+):(?P<s>[\d.]+)\)")


def task_seconds(output: str) -> list[tuple[str, float]]:
    """(task, seconds) in order, from the profile_tasks callback's line under each TASK header
    (it gives the previous task's duration)."""
    names, durations = [], []
    for line in output.splitlines():
        task = TASK_LINE.match(line)
        if task:
            names.append(task.group("name"))
            continue
        timing = TIMING_LINE.match(line)
        if timing and names:
            durations.append(
                int(timing.group("h")) * 3600 + int(timing.group("m")) * 60 + float(timing.group("s"))
            )
    # The first timing line follows the first task and times the play's start; each later one
    # the task before it; the last task's own duration is in the closing summary, not needed.
    return list(zip(names[:-1], durations[1:], strict=False))


def phase_seconds(tasks: list[tuple[str, float]]) -> tuple[float, float]:
    """Seconds collecting (after the wait, before launcher.log) and verifying (training_verify)."""
    collect = verify = 0.0
    after_wait = False
    for name, seconds in tasks:
        if "training_verify :" in name:
            verify += seconds
        elif "Watch the workload" in name:
            after_wait, collect = True, 0.0
        elif "launcher's progress and verdict" in name:
            after_wait = False
        elif after_wait and "training_job :" in name:
            collect += seconds
    return round(collect, 2), round(verify, 2)


def run_case(harness, api, template, workdir, pods, mb, collections, label, keep=False):
    namespace = "bench-%s-%d-%d" % (label, pods, mb)
    harness.kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=true", "--timeout=300s")
    harness.kubectl("create", "namespace", namespace)
    harness.kubectl("wait", "--for=create", "--timeout=30s", "-n", namespace, "serviceaccount/default")
    logs_dir = workdir / ("logs-%dx%d" % (pods, mb))
    if not logs_dir.is_dir():
        FleetJob(pods, template).write_logs(logs_dir, mb << 20)
    runs_dir = workdir / ("runs-%s-%dx%d" % (label, pods, mb))
    # Long enough for every pod's log to be served (and read early) before the pods complete.
    run_duration = 20 + pods * mb // 8
    server = FleetLogServer(
        api, harness.state_dir, namespace, {index: logs_dir / ("%d.log" % index) for index in range(pods)}
    )
    watcher = JobWatcher(api, namespace)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
        ANSIBLE_NOCOLOR="1",
        PATH="%s%s%s" % (BIN, os.pathsep, os.environ.get("PATH", "")),
    )
    settings = fleet_job_vars(
        harness.kubeconfig,
        namespace,
        runs_dir,
        "pytorchjob",
        pods,
        run_duration,
        training_job_checkpoint_pvc="",
    )
    command = [str(BIN / "ansible-playbook"), "-i", "inventories/local", "playbooks/train.yml"]
    command += ["--extra-vars", json.dumps(settings)]
    server.start()
    watcher.start()
    began = time.monotonic()
    process = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    rss = TreeRss(process.pid)
    rss.start()
    output = process.communicate()[0]
    ended = time.monotonic()
    rss.stop()
    watcher.stop()
    server.stop()
    collect, verify = phase_seconds(task_seconds(output))
    verdict = re.search(r": (PASSED|FAILED) \(", output)
    result = {
        "path": label,
        "pods": pods,
        "ranks": pods * 8,
        "mb_per_pod": mb,
        "verdict": verdict.group(1).lower() if verdict else "none (rc %d)" % process.returncode,
        "completion_to_verdict_s": round(ended - watcher.ended, 1) if watcher.ended else None,
        "collect_s": collect,
        "verify_s": verify,
        "playbook_s": round(ended - began, 1),
        "controller_peak_rss_mib": rss.peak >> 20,
        "load_average": round(os.getloadavg()[0], 2),
    }
    if keep or verdict is None or server.errors:
        (workdir / ("output-%s.txt" % namespace)).write_text(output)
        result["output"] = str(workdir / ("output-%s.txt" % namespace))
        result["server_errors"] = server.errors[:3]
    harness.kubectl("delete", "namespace", namespace, "--wait=false")
    shutil.rmtree(runs_dir, ignore_errors=True)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--cases", nargs="+", default=CASES, help="PODSxMB, e.g. 16x1 128x10")
    parser.add_argument("--no-baseline", action="store_true", help="skip the baseline at 16 pods")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the work directory and each case's playbook output",
    )
    args = parser.parse_args(argv)
    cases = [tuple(int(part) for part in case.split("x")) for case in args.cases]
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="gpuops-bench-scale-"))
    harness = Harness()
    harness.up()
    api = harness_api(harness)
    subprocess.run(
        ["make", "--no-print-directory", "collection"], cwd=REPO_ROOT, check=True, capture_output=True
    )
    template = run_trainer_ranks(workdir, timeout=1200)
    nodes = fleet_nodes(max(pods for pods, _mb in cases), prefix="bench")
    harness.create_nodes(fleet_node_specs(nodes), timeout=300)
    results = []
    streamed = REPO_ROOT / ".collections"
    try:
        for pods, mb in cases:
            results.append(
                run_case(harness, api, template, workdir, pods, mb, streamed, "streamed", keep=args.keep)
            )
            print(json.dumps(results[-1]), flush=True)
        if not args.no_baseline:
            baseline = baseline_collections(workdir)
            for pods, mb in cases:
                if "%dx%d" % (pods, mb) in BASELINE_CASES:
                    results.append(run_case(harness, api, template, workdir, pods, mb, baseline, "baseline"))
                    print(json.dumps(results[-1]), flush=True)
    finally:
        harness.kubectl("delete", "node", *nodes, "--wait=false", check=False)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"summary": summarise(results)}), flush=True)
    return 0


def summarise(results):
    """Ratios of the streamed path to the baseline at the same size, and growth with pods."""
    by = {(r["path"], r["pods"], r["mb_per_pod"]): r for r in results}
    ratios = {}
    for (path, pods, mb), result in by.items():
        base = by.get(("baseline", pods, mb))
        if path == "streamed" and base:
            ratios["%dx%d" % (pods, mb)] = {
                key + "_ratio_to_baseline": round(result[key] / base[key], 3) if base[key] else None
                for key in ("completion_to_verdict_s", "controller_peak_rss_mib")
                if result.get(key) is not None and base.get(key) is not None
            }
    growth = {}
    for mb in sorted({r["mb_per_pod"] for r in results}):
        points = sorted((r["pods"], r) for r in results if r["path"] == "streamed" and r["mb_per_pod"] == mb)
        if len(points) >= 2 and points[0][1]["completion_to_verdict_s"]:
            (small, first), (large, last) = points[0], points[-1]
            growth["%d MB" % mb] = {
                "pods": [small, large],
                "seconds_growth_per_pod_growth": round(
                    (last["completion_to_verdict_s"] / first["completion_to_verdict_s"]) / (large / small), 3
                ),
                "rss_growth_per_pod_growth": round(
                    (last["controller_peak_rss_mib"] / first["controller_peak_rss_mib"]) / (large / small), 3
                ),
            }
    return {"ratios": ratios, "growth": growth}


def harness_api(harness):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(harness.kubeconfig))


if __name__ == "__main__":
    sys.exit(main())
