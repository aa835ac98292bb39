"""A real CRI-O for the node-role tests: one per session, started here and stopped here.

No kubelet and no CNI: the roles and these tests talk to it with crictl, and probe pods use
the host network. It has its own configuration, drop-in directory, socket and image store
(tests/harness/crio_runtime.py, CrioRuntime.standalone); its pause and busybox images are
built locally, so no registry is involved. The tests never skip: a machine that cannot run
it fails them.

Its daemon starts as a distribution's unit leaves CRI-O: memlock 64 KiB soft, and as hard
limit the host's own (resource.getrlimit), or 64 MiB where the host has none, so that a
limit above the daemon's exists on every host. It runs without CAP_SYS_RESOURCE
(crio_service.py), so runc cannot exceed that hard limit anywhere, as on the project's
machines.

runc runs as it is, without the harness's oom_score_adj clamp: nothing here asks for a
negative oom_score_adj (no kubelet), and the clamp's jq rewrite of config.json turns an
unlimited rlimit (2**64-1) into a float runc refuses ("cannot unmarshal number
18446744073709552000"), which would hide the error this suite is about.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))
sys.path.insert(0, str(REPO_ROOT / "tests" / "integration"))

from crio_runtime import PAUSE_IMAGE, CrioRuntime, mountpoints_under  # noqa: E402
from k8s_harness import Harness  # noqa: E402

SERVICE = Path(__file__).resolve().parent / "crio_service.py"
# The daemon's hard memlock where the host sets none: any finite value makes the point.
CEILING_WITHOUT_HOST_LIMIT = 64 * 1024 * 1024
# Soft memlock of the daemon, as CRI-O's packages leave it.
DAEMON_SOFT_MEMLOCK = 65536


def parse_proc_limits(text: str) -> dict:
    """{"memlock": (soft, hard), ...} of a /proc/PID/limits text; values as the kernel shows them."""
    names = {"Max locked memory": "memlock", "Max open files": "nofile", "Max processes": "nproc"}
    limits = {}
    for line in text.splitlines():
        for title, name in names.items():
            if line.startswith(title + " "):
                soft, hard = line[len(title) :].split()[:2]
                limits[name] = (soft, hard)
    return limits


def memlock_ceiling() -> int:
    """The hard memlock of the tests' CRI-O: the host's, or a finite one where it has none."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return CEILING_WITHOUT_HOST_LIMIT if hard == resource.RLIM_INFINITY else hard


def checkout_dir() -> Path:
    """This checkout's own directory for its test CRI-O, kept between sessions: its image store
    (the images take seconds to make) and its state. The store records the run directory, which
    is named after the state directory, so both stay where they are."""
    cache = Path(os.environ.get("GPUOPS_CACHE_DIR") or Path.home() / ".cache" / "gpuops-training")
    key = hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:8]
    return cache / "real-node" / f"roles-{key}"


@dataclass
class TestCrio:
    """The session's CRI-O and what the tests need to drive it."""

    runtime: CrioRuntime
    ceiling: int

    @property
    def control(self) -> list[str]:
        runtime = self.runtime
        return [
            sys.executable,
            str(SERVICE),
            "--state-dir",
            str(runtime.processes.state_dir),
            "--bin-dir",
            str(runtime.bin_dir),
            "--storage-root",
            str(runtime.storage_root),
            "--name",
            runtime.process_name,
        ]

    @property
    def endpoint(self) -> str:
        return f"unix://{self.runtime.socket}"

    @property
    def daemon_memlock(self) -> str:
        return f"{DAEMON_SOFT_MEMLOCK}:{self.ceiling}"

    def service(self, action: str, memlock: str | None = None) -> None:
        args = [*self.control, action] + ([f"--memlock={memlock}"] if memlock else [])
        result = subprocess.run(args, capture_output=True, text=True, timeout=180, check=False)
        assert result.returncode == 0, f"crio_service {action} failed: {result.stderr}{result.stdout}"

    def daemon_pid(self) -> int:
        pid = self.runtime.processes.recorded_pid(self.runtime.process_name)
        assert pid is not None, "the tests' CRI-O is not running"
        return pid

    def daemon_limits(self) -> dict:
        return parse_proc_limits(Path(f"/proc/{self.daemon_pid()}/limits").read_text())

    def reset(self) -> None:
        """No drop-in, the daemon at 64 KiB soft: CRI-O as a fresh node has it."""
        for path in sorted(self.runtime.config_dir.rglob("*"), reverse=True):
            path.rmdir() if path.is_dir() else path.unlink()
        shutil.rmtree(self.runtime.originals_dir, ignore_errors=True)
        self.service("restart", self.daemon_memlock)

    def role_variables(self, **variables) -> dict:
        """crio_limits's variables for this CRI-O: its files, its restart command, its crictl."""
        return {
            "crio_limits_dropin_dir": str(self.runtime.config_dir),
            "crio_limits_config_file": str(self.runtime.config_file),
            "crio_limits_restart_command": [*self.control, "restart"],
            "crio_limits_crictl": str(self.runtime.crictl_path),
            "crio_limits_runtime_endpoint": self.endpoint,
            **variables,
        }

    def preflight_variables(self, **variables) -> dict:
        return {
            "preflight_runtimes": ["crio"],
            "preflight_crio_runtime_endpoint": self.endpoint,
            "preflight_crio_config_file": str(self.runtime.config_file),
            "preflight_crio_config_dir": str(self.runtime.config_dir),
            "preflight_crictl": str(self.runtime.crictl_path),
            **variables,
        }

    def fresh_container_limits(self, uid: int) -> dict:
        """The limits a new container as uid gets, read by the test itself (not the collection's
        probe): crictl runp/create/start of the pause image, then /proc/PID/limits."""
        crictl = self.runtime.crictl
        workdir = self.runtime.dir / "test-probe"
        workdir.mkdir(exist_ok=True)
        host_network = {"namespace_options": {"network": 2, "pid": 1}}
        pod = workdir / "pod.json"
        pod.write_text(
            json.dumps(
                {
                    "metadata": {
                        "name": f"test-{uuid.uuid4().hex[:8]}",
                        "namespace": "tests",
                        "uid": uuid.uuid4().hex,
                    },
                    "linux": {"security_context": host_network},
                }
            )
        )
        container = workdir / "container.json"
        container.write_text(
            json.dumps(
                {
                    "metadata": {"name": "limits"},
                    "image": {"image": PAUSE_IMAGE},
                    "linux": {"security_context": {**host_network, "run_as_user": {"value": uid}}},
                }
            )
        )
        pod_id = crictl("runp", str(pod)).stdout.strip()
        try:
            container_id = crictl("create", pod_id, str(container), str(pod)).stdout.strip()
            crictl("start", container_id)
            pid = json.loads(crictl("inspect", "-o", "json", container_id).stdout)["info"]["pid"]
            return parse_proc_limits(Path(f"/proc/{pid}/limits").read_text())
        finally:
            crictl("rmp", "--force", pod_id, check=False)

    def creates_containers(self) -> bool:
        try:
            self.fresh_container_limits(0)
        except Exception:  # the harness's error carries crictl's reason; the caller only asks yes or no
            return False
        return True


@pytest.fixture(scope="session")
def crio() -> TestCrio:
    bin_dir = Harness().real_node.builder.build()
    state_dir = checkout_dir() / "state"
    runtime = CrioRuntime.standalone(state_dir, bin_dir, checkout_dir() / "storage", "crio-roles")
    # A session that was killed may have left its CRI-O running: stop it and its mounts first.
    runtime.stop()
    runtime.write_configuration(clamp_oom_score_adj=False)
    runtime.ensure_base_images()
    test_crio = TestCrio(runtime, memlock_ceiling())
    try:
        test_crio.service("start", test_crio.daemon_memlock)
        yield test_crio
    finally:
        runtime.stop()
        # Its sockets and runtime state: nothing is mounted there any more.
        if not mountpoints_under([runtime.run_dir]):
            shutil.rmtree(runtime.run_dir, ignore_errors=True)


@pytest.fixture
def fresh_crio(crio) -> TestCrio:
    """The session's CRI-O with no drop-in and its daemon at 64 KiB, before each test."""
    crio.reset()
    return crio
