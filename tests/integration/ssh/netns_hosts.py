"""Two "hosts" on this machine for multi-node tests: network namespaces with their own
addresses on a private bridge, each running its own sshd under its own host name.

They share the machine's file system (so the same venv and trainer are on both), but not
its network: each node reaches the others, and the controller reaches them, only over
the bridge, by address, through SSH. Needs root, iproute2 and OpenSSH's sshd.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import shutil
import socket
import subprocess
import time

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


@dataclasses.dataclass
class Node:
    name: str  # inventory name and host name inside the node
    netns: str
    address: str
    ifname: str = "eth0"


@dataclasses.dataclass
class NetnsHosts:
    nodes: list[Node]
    bridge: str
    gateway: str
    key_file: pathlib.Path
    workdir: pathlib.Path

    def ssh(self, node: Node, command: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", *self.ssh_options(), "root@" + node.address, command],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def ssh_options(self) -> list[str]:
        return [
            "-i", str(self.key_file), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
        ]  # fmt: skip


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError("%s failed: %s" % (" ".join(argv), result.stderr.strip()))


def _wait_for_port(address: str, port: int, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def start(workdir: pathlib.Path, names=("node-a", "node-b")) -> NetnsHosts:
    """Create the bridge, the namespaces and their sshd; ``stop`` undoes all of it."""
    if os.geteuid() != 0:
        raise RuntimeError("the SSH launcher test needs root (network namespaces and sshd)")
    if not os.path.exists(SSHD):
        raise RuntimeError("sshd is missing: install openssh-server (make system-packages does)")
    # A subnet and names of this process's own, so concurrent runs do not collide.
    tag = os.getpid() % 200 + 20
    bridge = "gpob%d" % tag
    workdir.mkdir(parents=True, exist_ok=True)
    key_file = workdir / "client_key"
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key_file))
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(workdir / "host_key"))
    shutil.copy(workdir / "client_key.pub", workdir / "authorized_keys")
    pathlib.Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    hosts = NetnsHosts([], bridge, "10.213.%d.254" % tag, key_file, workdir)
    try:
        _run("ip", "link", "add", bridge, "type", "bridge")
        _run("ip", "addr", "add", hosts.gateway + "/24", "dev", bridge)
        _run("ip", "link", "set", bridge, "up")
        for index, name in enumerate(names, start=1):
            node = Node(name, "gpo%d-%s" % (tag, name), "10.213.%d.%d" % (tag, index))
            veth = "gpo%dh%d" % (tag, index)
            _run("ip", "netns", "add", node.netns)
            hosts.nodes.append(node)
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", node.ifname, "netns", node.netns)
            _run("ip", "link", "set", veth, "master", bridge, "up")
            _run("ip", "-n", node.netns, "addr", "add", node.address + "/24", "dev", node.ifname)
            _run("ip", "-n", node.netns, "link", "set", node.ifname, "up")
            _run("ip", "-n", node.netns, "link", "set", "lo", "up")
            config = workdir / ("sshd-%s.conf" % name)
            config.write_text(
                "\n".join(
                    [
                        "ListenAddress " + node.address,
                        "HostKey %s" % (workdir / "host_key"),
                        "PidFile %s" % (workdir / ("sshd-%s.pid" % name)),
                        "AuthorizedKeysFile %s" % (workdir / "authorized_keys"),
                        "PermitRootLogin prohibit-password",
                        "PasswordAuthentication no",
                        "KbdInteractiveAuthentication no",
                        "UsePAM no",
                        "StrictModes no",
                        "Subsystem sftp internal-sftp",
                        "",
                    ]
                )
            )
            # A UTS namespace of its own gives the node its own host name, as real nodes have.
            _run(
                "ip", "netns", "exec", node.netns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$1" -f "$2" -E "$3"',
                name, SSHD, str(config), str(workdir / ("sshd-%s.log" % name)),
            )  # fmt: skip
            _wait_for_port(node.address, 22)
    except BaseException:
        stop(hosts)
        raise
    return hosts


def stop(hosts: NetnsHosts) -> None:
    for node in hosts.nodes:
        pid_file = hosts.workdir / ("sshd-%s.pid" % node.name)
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text().strip()), 15)
        # Anything a test left running in the namespace (a torchrun that outlived its run).
        pids = subprocess.run(
            ["ip", "netns", "pids", node.netns], capture_output=True, text=True, check=False
        )
        for pid in pids.stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), 9)
        subprocess.run(["ip", "netns", "delete", node.netns], capture_output=True, check=False)
    subprocess.run(["ip", "link", "delete", hosts.bridge], capture_output=True, check=False)
