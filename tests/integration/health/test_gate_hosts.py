"""playbooks/train.yml with the health gate over SSH and on the local host, on this machine.

The hosts are inventory hosts judged by node_health_info from the published outputs in
tests/unit/fixtures/health (node_health_paths per host), as in test_node_health_ssh.py. Each case
is one playbook run that stops before any rank starts, so no trainer runs:

- over SSH, of three hosts one has ECC errors and one cannot be reached: with every host needed
  (training_job_gate_min_nodes 0), the play stops naming both and why;
- on the local host with the full gate, node_health passes but nccl-tests is not built there: the
  nccl-test did not run, which is no pass, so the play stops saying so;
- an unknown gate fails before anything is created, naming training_job_gate.
"""

from __future__ import annotations

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from playbook_runner import DEV_COLLECTIONS, ansible_playbook  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parents[2] / "unit" / "fixtures" / "health"
BAD = [
    FIXTURES / "nvidia-smi-a100-sxm4-r535-derived-ecc-powerbrake.xml",
    FIXTURES / "journal-xid79-fallen-off-bus.log",
]


def local(**host_vars):
    return dict({"ansible_connection": "local", "ansible_python_interpreter": sys.executable}, **host_vars)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("gate-hosts")
    clean = tmp_path / "kernel-no-xid.log"
    iso = (FIXTURES / "dmesg-iso-xid13-xid43-oom.log").read_text().splitlines(True)
    clean.write_text("".join(line for line in iso if "NVRM: Xid" not in line))
    healthy = [str(FIXTURES / "nvidia-smi-tesla-p100-r510.xml"), str(clean)]
    inventory = {
        "training_launchers": {"hosts": {"localhost": local(node_health_paths=healthy)}},
        "training_nodes": {
            "hosts": {
                "gpu-bad": local(node_health_paths=[str(path) for path in BAD]),
                "gpu-ok": local(node_health_paths=healthy),
                # Nothing listens on port 1: ssh is refused at once.
                "gpu-gone": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
            }
        },
    }
    path = tmp_path / "inventory.json"
    path.write_text(json.dumps(inventory))
    return {"inventory": path, "runs": tmp_path / "runs"}


def train(hosts, run_id, **variables):
    settings = {
        "training_job_run_id": run_id,
        "training_job_runs_dir": str(hosts["runs"]),
        "training_job_gate": "quick",
        "node_health_become": False,
        "node_health_checks": ["nvidia_smi", "kernel_log"],
        **variables,
    }
    return ansible_playbook(
        "-i", str(hosts["inventory"]), "-e", json.dumps(settings), "playbooks/train.yml",
        collections_path=DEV_COLLECTIONS, timeout=300,
    )  # fmt: skip


def said(run):
    return " ".join(run.output.split())


def test_over_ssh_with_every_host_needed_the_failed_and_unreachable_hosts_stop_the_launch(hosts):
    run = train(hosts, "ssh-gate", training_job_launcher="ssh")
    assert run.rc == 2, run
    output = said(run)
    assert "Health gate: STOPPED - 1 of 3 node(s) passed, the run needs 3; nothing was launched" in output
    assert "gpu-bad: FAILED - isolate ecc_uncorrectable_volatile on GPU 0 (0000:01:00.0)" in output
    assert "gpu-gone: UNVERIFIED - not checked: the host was unreachable: " in output
    assert "Start torchrun on every node" not in output
    assert not (hosts["runs"] / "ssh-gate").exists()
    summary = json.loads((hosts["runs"] / "ssh-gate-gate" / "summary.json").read_text())
    assert [(node["node"], node["verdict"]) for node in summary["nodes"]] == [
        ("gpu-bad", "isolate"),
        ("gpu-gone", "unchecked"),
        ("gpu-ok", "healthy"),
    ]


def test_the_full_gate_counts_an_nccl_test_that_could_not_run_as_no_pass(hosts, tmp_path):
    run = train(
        hosts, "local-full", training_job_launcher="local", training_job_gate="full",
        nccl_tests_binaries_dir=str(tmp_path / "no-nccl-tests"), nccl_tests_runs_dir=str(hosts["runs"]),
    )  # fmt: skip
    assert run.rc == 2, run
    output = said(run)
    assert "Health gate: STOPPED - 0 of 1 node(s) passed, the run needs 1; nothing was launched" in output
    missing = "nccl-tests binaries missing or not executable in %s" % (tmp_path / "no-nccl-tests")
    assert "localhost: UNVERIFIED - not verified, nccl_tests: %s" % missing in output
    assert "did not run (never a pass)" in output
    assert "Run torchrun" not in output
    assert not (hosts["runs"] / "local-full").exists()


def test_an_unknown_gate_fails_before_anything_is_created_naming_the_variable(hosts):
    run = train(hosts, "bad-gate", training_job_launcher="ssh", training_job_gate="sometimes")
    assert run.rc == 2, run
    assert "training_job_gate" in run.output and "sometimes" in run.output
    assert "Judge each host" not in run.output
    assert not (hosts["runs"] / "bad-gate").exists() and not (hosts["runs"] / "bad-gate-gate").exists()
