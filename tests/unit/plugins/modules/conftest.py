"""Run a module's main() in-process and return what it printed as JSON."""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest
from ansible.module_utils.testing import patch_module_args


class ModuleRun:
    def __init__(self, result, exit_code):
        self.result = result
        self.exit_code = exit_code

    @property
    def failed(self):
        return bool(self.result.get("failed"))


@pytest.fixture
def run_module(capsys):
    def run(main, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
            main()
        return ModuleRun(json.loads(capsys.readouterr().out), exit_info.value.code)

    return run


FAKE_CRICTL = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "cri" / "fake_crictl.py"
LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max processes             {nproc}              {nproc}              processes
Max open files            1048576              1048576              files
Max locked memory         {memlock}            {memlock_hard}            bytes
"""
SOCKET_INODE = "4242"
PAUSE_IMAGE = "localhost/site/pause:3.10"


class FakeCrioNode:
    """A CRI-O node on files: /proc (the daemon listening on its socket, the probe containers),
    CRI-O's configuration, and crictl (tests/unit/fixtures/cri/fake_crictl.py on a scenario)."""

    def __init__(self, root, daemon_pid=812, daemon_memlock=("65536", "8388608")):
        self.root = root
        self.proc = root / "proc"
        self.bin = root / "bin"
        self.config_file = root / "crio" / "crio.conf"
        self.config_dir = root / "crio" / "crio.conf.d"
        self.socket = root / "run" / "crio.sock"
        self.log = root / "crictl-calls.log"
        self.scenario_file = root / "scenario.json"
        for directory in (self.proc / "net", self.bin, self.config_dir, self.socket.parent):
            directory.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            '[crio.image]\npause_image = "%s"\npause_command = "/pause"\n' % PAUSE_IMAGE
        )
        self.daemon_pid = daemon_pid
        self.add_process(daemon_pid, "crio", *daemon_memlock)
        fd_dir = self.proc / str(daemon_pid) / "fd"
        fd_dir.mkdir()
        os.symlink("socket:[%s]" % SOCKET_INODE, fd_dir / "7")
        (self.proc / "net" / "unix").write_text(
            "Num       RefCount Protocol Flags    Type St Inode Path\n"
            "0000000000000000: 00000002 00000000 00010000 0001 01 %s %s\n"
            % (SOCKET_INODE, self.socket)
            + "0000000000000000: 00000003 00000000 00000000 0001 03 5151 %s\n" % self.socket
        )
        crictl = self.bin / "crictl"
        crictl.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, FAKE_CRICTL))
        crictl.chmod(0o755)
        self.scenario(pids={"0": 2000, "65534": 2001})

    @property
    def endpoint(self):
        return "unix://%s" % self.socket

    def add_process(self, pid, comm, memlock, memlock_hard=None, nproc="96365"):
        directory = self.proc / str(pid)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "comm").write_text(comm + "\n")
        (directory / "limits").write_text(
            LIMITS.format(memlock=memlock, memlock_hard=memlock_hard or memlock, nproc=nproc)
        )
        (directory / "status").write_text("Name:\t%s\nCapEff:\t000001fffeffffff\n" % comm)

    def containers_get(self, memlock, memlock_hard=None):
        """What the probe containers (uid 0 and 65534) get."""
        for pid in (2000, 2001):
            self.add_process(pid, "pause", memlock, memlock_hard)

    def scenario(self, **settings):
        scenario = {"answering": True, "images": [PAUSE_IMAGE], "pids": {}, "log": str(self.log)}
        if self.scenario_file.exists():
            scenario.update(json.loads(self.scenario_file.read_text()))
        scenario.update(settings)
        self.scenario_file.write_text(json.dumps(scenario))

    def created_containers(self):
        """The container configurations crictl create was given."""
        path = pathlib.Path(str(self.log) + ".containers")
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def calls(self):
        """The crictl subcommands run, in order, without the endpoint and timeout flags."""
        if not self.log.exists():
            return []
        return [list(json.loads(line)[6:]) for line in self.log.read_text().splitlines()]


@pytest.fixture
def fake_crio(tmp_path, monkeypatch):
    node = FakeCrioNode(tmp_path)
    monkeypatch.setenv("FAKE_CRICTL_SCENARIO", str(node.scenario_file))
    monkeypatch.setenv("PATH", str(node.bin))
    return node
