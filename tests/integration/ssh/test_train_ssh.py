"""playbooks/train.yml with the ssh launcher: a real two-node torchrun over SSH.

Two network namespaces with their own addresses and host names (netns_hosts.py) play the
nodes; the controller reaches them only through sshd. Each node runs torchrun with one gloo
rank, the c10d rendezvous is on the first node, and the playbook fetches every rank's logs
back and verifies them like any other run.
"""

from __future__ import annotations

import json
import pathlib
import sys
import types

import pytest
import yaml

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import netns_hosts  # noqa: E402

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PLAYBOOK = "playbooks/train.yml"
CPU_SETTINGS = REPO_ROOT / "inventories" / "local" / "group_vars" / "training_launchers" / "main.yml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    hosts = netns_hosts.start(tmp_path_factory.mktemp("netns"))
    yield hosts
    netns_hosts.stop(hosts)


def write_inventory(
    directory: pathlib.Path, hosts: netns_hosts.NetnsHosts, runs_dir, remote_runs_dir, **extra
):
    """A controller that launches, and the two nodes, as a user would write it."""
    settings = yaml.safe_load(CPU_SETTINGS.read_text())
    settings.update(
        training_job_launcher="ssh",
        training_job_name="retinanet-ssh",
        training_job_runs_dir=str(runs_dir),
        training_job_ssh_remote_runs_dir=str(remote_runs_dir),
        training_job_nproc_per_node=1,
        training_job_poll_interval_s=2,
        training_job_rdzv_timeout_s=120,
        training_job_timeout_s=420,
        **extra,
    )
    python = str(REPO_ROOT / ".venv" / "bin" / "python")
    inventory = {
        "all": {
            "children": {
                "training_launchers": {
                    "hosts": {"localhost": {"ansible_connection": "local"}},
                    "vars": settings,
                },
                "training_nodes": {
                    "hosts": {
                        node.name: {"ansible_host": node.address, "training_job_socket_ifname": node.ifname}
                        for node in hosts.nodes
                    },
                    "vars": {
                        "ansible_user": "root",
                        "ansible_ssh_private_key_file": str(hosts.key_file),
                        "ansible_ssh_common_args": " ".join(hosts.ssh_options()[2:]),
                        "ansible_python_interpreter": python,
                        "training_job_python": python,
                    },
                },
            },
            "vars": {"ansible_python_interpreter": python},
        }
    }
    path = directory / "hosts.yml"
    path.write_text(yaml.safe_dump(inventory))
    return str(path)


@pytest.fixture(scope="module")
def ssh_run(nodes, run_playbook, tmp_path_factory):
    base = tmp_path_factory.mktemp("ssh-run")
    runs_dir, remote_runs_dir = base / "controller-runs", base / "node-runs"
    inventory = write_inventory(base, nodes, runs_dir, remote_runs_dir)
    run = run_playbook(PLAYBOOK, inventory)
    runs = list(runs_dir.iterdir()) if runs_dir.exists() else []
    run_dirs = [path for path in runs if path.is_dir() and path.name != "history"]
    return types.SimpleNamespace(run=run, run_dirs=run_dirs, remote_runs_dir=remote_runs_dir)


def test_the_nodes_are_separate_hosts_reached_over_ssh(nodes):
    names = [nodes.ssh(node, "hostname; ip -4 -o addr show eth0").stdout for node in nodes.nodes]
    for node, output in zip(nodes.nodes, names, strict=True):
        assert output.startswith(node.name + "\n") and node.address in output


def test_a_two_node_run_over_ssh_passes_verification(ssh_run):
    assert ssh_run.run.rc == 0, ssh_run.run
    assert "PASSED (2/2 ranks reported" in ssh_run.run.output
    (run_dir,) = ssh_run.run_dirs
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["launcher"] == "ssh" and summary["world_size"] == 2
    # Each rank ran on its own node, under that node's host name.
    assert sorted(rank["host"] for rank in summary["ranks"]) == ["node-a", "node-b"]
    assert summary["loss"]["fell"] is True
    assert summary["checkpoints"]["count"] >= 1


def test_every_nodes_logs_were_fetched_back_to_the_controller(ssh_run, nodes):
    (run_dir,) = ssh_run.run_dirs
    for node in ("node-a", "node-b"):
        fetched = sorted((run_dir / "logs" / node).glob("**/stdout.log"))
        assert len(fetched) == 1, fetched
        assert '"event":"run_end"' in fetched[0].read_text()
        assert (run_dir / ("launcher-%s.log" % node)).exists()
    # The logs really came over SSH: the nodes wrote them elsewhere.
    assert list(ssh_run.remote_runs_dir.glob("*/node-a/logs/**/stdout.log"))
    settings = json.loads((run_dir / "run.json").read_text())
    commands = settings["command"]
    assert "--node-rank=0" in commands["node-a"] and "--node-rank=1" in commands["node-b"]
    for command in commands.values():
        assert "--rdzv-endpoint=%s:29400" % nodes.nodes[0].address in command


def test_an_unknown_host_fails_before_anything_starts(nodes, run_playbook, tmp_path):
    inventory = write_inventory(
        tmp_path,
        nodes,
        tmp_path / "runs",
        tmp_path / "node-runs",
        training_job_ssh_hosts=["node-a", "node-z"],
    )
    run = run_playbook(PLAYBOOK, inventory)
    assert run.rc != 0
    assert "training_job_ssh_hosts must list inventory hosts" in run.output and "node-z" in run.output
    assert not (tmp_path / "runs").exists()
