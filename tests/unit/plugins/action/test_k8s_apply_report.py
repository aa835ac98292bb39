"""k8s_apply_report as Ansible runs it: the diff of each changed object headed with its name,
the task's diff keyword honoured, one failure naming every rejected object."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent
OBJECTS = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}},
    {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "quota", "namespace": "team"}},
]
QUOTA_DIFF = {
    "before": {"spec": {"hard": {"limits.cpu": "64"}}},
    "after": {"spec": {"hard": {"limits.cpu": "32"}}},
}
STATUS = {"kind": "Status", "message": 'namespaces "team" is forbidden: no'}


def run_report(tmp_path, results, *options, **task):
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Report",
                    "gpuops.training.k8s_apply_report": {
                        "objects": OBJECTS,
                        "results": results,
                        "what": "namespace team",
                    },
                    **task,
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps(play))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "dev-collections"),
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", *options, str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


CHANGED = {
    "changed": True,
    "result": {"results": [{"changed": False, "diff": {}}, {"changed": True, "diff": QUOTA_DIFF}]},
}


def test_diff_mode_shows_each_changed_object_headed_with_its_name(tmp_path):
    run = run_report(tmp_path, CHANGED, "--diff")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "--- before: ResourceQuota team/quota\n+++ after: ResourceQuota team/quota" in run.stdout
    assert "-            limits.cpu: '64'\n+            limits.cpu: '32'" in run.stdout
    assert "changed_objects:\n    - ResourceQuota team/quota\n" in run.stdout
    assert "changed=1" in run.stdout


def test_the_diff_keyword_hides_the_diff(tmp_path):
    run = run_report(tmp_path, CHANGED, "--diff", diff=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "before: ResourceQuota" not in run.stdout and "limits.cpu" not in run.stdout


def test_a_skipped_call_reports_nothing(tmp_path):
    run = run_report(tmp_path, {"changed": False, "skipped": True})
    assert run.returncode == 0, run.stdout + run.stderr
    assert "changed=0" in run.stdout


def test_every_rejected_object_is_named_with_the_servers_message(tmp_path):
    error = {"msg": "Failed to apply object: %s" % json.dumps(STATUS).encode()}
    results = {
        "changed": False,
        "result": {
            "results": [
                {"changed": False, "error": error},
                {"changed": False, "error": {"msg": 'Failed: {"kind": "Status", "message": "boom"}'}},
            ]
        },
    }
    run = run_report(tmp_path, results)
    assert run.returncode == 2, run.stdout + run.stderr
    output = " ".join((run.stdout + run.stderr).split())
    assert (
        "The API server rejected 2 of the 2 objects of namespace team:"
        ' - Namespace team: namespaces "team" is forbidden: no - ResourceQuota team/quota: boom'
    ) in output
