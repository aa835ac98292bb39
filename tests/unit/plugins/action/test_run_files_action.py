"""run_files as Ansible runs it: it writes on the controller in the worker process, shows the
before and after with --diff as ansible.builtin.copy does (nothing under no_log), writes nothing
in check mode, refuses bad input naming the field, and a host that is not the controller."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[4]
BIN = pathlib.Path(sys.executable).parent


def play(tmp_path, args, *options, connection="local", **task):
    tasks = [{"name": "Write the run directory", "gpuops.training.run_files": args, **task}]
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(REPO / ".build" / "dev-collections"),
        ANSIBLE_NOCOLOR="1",
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", connection, *options, str(playbook)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_args(run_dir, secret="s3cret"):
    return {
        "dest": str(run_dir),
        "directories": [".", "logs"],
        "files": [
            {"path": "run.json", "content": '{"a": 1}\n', "mode": "0644"},
            {"path": "environment.sh", "content": "export TOKEN=%s\n" % secret, "mode": "0600"},
        ],
    }


def test_it_writes_shows_the_diff_and_changes_nothing_the_second_time(tmp_path):
    run_dir = tmp_path / "run"
    run = play(tmp_path, run_args(run_dir), "--diff")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "+++ after: %s/run.json" % run_dir in run.stdout
    assert '+{"a": 1}' in run.stdout
    assert "changed=1" in run.stdout
    assert (run_dir / "run.json").read_text() == '{"a": 1}\n'
    assert stat.S_IMODE(os.stat(run_dir / "environment.sh").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(run_dir / "logs").st_mode) == 0o755
    again = play(tmp_path, run_args(run_dir), "--diff")
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout + again.stderr


def test_no_log_shows_no_content(tmp_path):
    run = play(tmp_path, run_args(tmp_path / "run"), "--diff", "-vvv", no_log=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "s3cret" not in run.stdout + run.stderr
    assert "changed=1" in run.stdout


def test_check_mode_writes_nothing(tmp_path):
    run = play(tmp_path, run_args(tmp_path / "run"), "--check", "--diff")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "changed=1" in run.stdout and "+++ after: %s/run.json" % (tmp_path / "run") in run.stdout
    assert not (tmp_path / "run").exists()


def test_bad_input_fails_naming_the_field(tmp_path):
    args = run_args(tmp_path / "run")
    args["files"][1]["path"] = "../environment.sh"
    run = play(tmp_path, args)
    assert run.returncode == 2
    assert "run_files: files[1].path must stay under dest" in run.stdout
    assert not (tmp_path / "run").exists()


def test_a_host_that_is_not_the_controller_is_refused(tmp_path):
    run = play(tmp_path, run_args(tmp_path / "run"), connection="ssh")
    assert run.returncode == 2
    assert "run_files: writes on the controller only" in run.stdout
    assert not (tmp_path / "run").exists()
