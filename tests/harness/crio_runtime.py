"""A CRI-O daemon (runc, conmon) the tests drive: the real node's runtime, or one on its own.

The real node (real_node.py) runs kubelet against it. Tests of the node roles start one
without kubelet (`CrioRuntime.standalone`) and talk to it with crictl: what a restart with a
new drop-in does, what limits a fresh container gets. Each instance has its own
configuration, drop-in directory, socket and image store; podman builds straight into that
store (`podman()`), so its images need no registry.

Python 3.11 standard library only, like k8s_harness.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from k8s_harness import BUSYBOX_APPLETS, BUSYBOX_IMAGE, REPO_ROOT, HarnessError, Supervisor, log

PAUSE_IMAGE = "localhost/gpuops-harness/pause:3.10"
RUNC = "/usr/sbin/runc"
CONMON = "/usr/bin/conmon"
CNI_PLUGIN_DIR = Path("/usr/lib/cni")
SOURCE_DIR = Path(__file__).resolve().parent / "real-node"
# Unix socket paths are limited to 108 bytes and conmon's attach sockets sit two levels
# below the attach directory: sockets and run state live under this short root.
RUN_ROOT = Path("/run/gpuops-harness")


def default_daemon_memlock() -> str:
    """CRI-O's memlock as a distribution's unit leaves it: 64 KiB soft; hard as this host allows.

    Containers without a default_ulimits drop-in inherit it."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return "65536:" + ("unlimited" if hard == resource.RLIM_INFINITY else str(hard))


def can_lower_oom_score_adj() -> bool:
    """False on hosts whose root lacks CAP_SYS_RESOURCE: runc then fails every container
    that kubelet (or a probe) gives a negative oom_score_adj."""
    probe = subprocess.run(
        ["sh", "-c", "echo -998 > /proc/self/oom_score_adj"], capture_output=True, check=False
    )
    return probe.returncode == 0


class CrioRuntime:
    """One CRI-O daemon: configuration, drop-ins, start/stop/restart, crictl, its image store."""

    def __init__(
        self,
        processes: Supervisor,
        directory: Path,
        run_dir: Path,
        storage_root: Path,
        bin_dir: Callable[[], Path],
        process_name: str = "crio",
        network_dir: Path | None = None,
    ):
        self.processes = processes
        self.dir = directory
        self.run_dir = run_dir
        self.storage_root = storage_root
        self.storage_runroot = run_dir / "storage"
        self._bin_dir = bin_dir
        self.process_name = process_name
        self.network_dir = network_dir or directory / "net.d"
        self.memlock_file = directory / "daemon-memlock"

    @classmethod
    def standalone(cls, state_dir: Path, bin_dir: Path, storage_root: Path, name: str) -> CrioRuntime:
        """A CRI-O of its own (no kubelet, no CNI: probe pods use the host network)."""
        tag = hashlib.sha256(str(state_dir).encode()).hexdigest()[:8]
        return cls(
            Supervisor(state_dir),
            state_dir / "crio",
            RUN_ROOT / f"{name}-{tag}",
            storage_root,
            lambda: bin_dir,
            process_name=name,
        )

    # ---- paths ------------------------------------------------------------

    @property
    def bin_dir(self) -> Path:
        return self._bin_dir()

    @property
    def config_file(self) -> Path:
        return self.dir / "crio.conf"

    @property
    def config_dir(self) -> Path:
        """The drop-in directory (gpuops.training.crio_limits writes 99-ulimits.conf here)."""
        return self.dir / "crio.conf.d"

    @property
    def socket(self) -> Path:
        return self.run_dir / "crio.sock"

    @property
    def crictl_config(self) -> Path:
        return self.dir / "crictl.yaml"

    @property
    def crictl_path(self) -> Path:
        return self.bin_dir / "crictl"

    @property
    def log_file(self) -> Path:
        return self.processes.log_file(self.process_name)

    def storage_options(self) -> list[str]:
        """podman's options for this store: what podman builds with them, CRI-O can run."""
        return [
            f"--root={self.storage_root}",
            f"--runroot={self.storage_runroot}",
            "--storage-driver=overlay",
        ]

    # ---- configuration ----------------------------------------------------

    @property
    def originals_dir(self) -> Path:
        """Where crio_limits keeps the node's own files it replaced (the role's default
        crio_limits_original_dir, beside the drop-in directory)."""
        return self.config_dir.with_name(self.config_dir.name + ".gpuops-originals")

    def write_configuration(self, clamp_oom_score_adj: bool) -> None:
        """A fresh runtime: its main configuration, and no drop-in (nor any copy a role kept of
        one) from an earlier start, so every test begins where a new node does."""
        for leftover in (self.config_dir, self.originals_dir):
            shutil.rmtree(leftover, ignore_errors=True)
        for directory in (
            self.config_dir,
            self.dir / "lib",
            self.network_dir,
            self.run_dir,
            self.storage_runroot,
        ):
            directory.mkdir(parents=True, exist_ok=True)
        self.storage_root.mkdir(parents=True, exist_ok=True)
        runtime = RUNC
        if clamp_oom_score_adj:
            runtime = str(self.dir / "runc-oom-clamp")
            text = (SOURCE_DIR / "runc-oom-clamp").read_text().replace("exec RUNC", f"exec {RUNC}")
            Path(runtime).write_text(text)
            Path(runtime).chmod(0o755)
        self.config_file.write_text(self.config_text(runtime))
        # Local images only (no registry is reachable): no signatures to verify.
        (self.dir / "policy.json").write_text(
            json.dumps({"default": [{"type": "insecureAcceptAnything"}]}) + "\n"
        )
        self.crictl_config.write_text(
            f"runtime-endpoint: unix://{self.socket}\nimage-endpoint: unix://{self.socket}\ntimeout: 30\n"
        )

    def config_text(self, runtime: str) -> str:
        """CRI-O's main configuration; the limits come from drop-ins only."""
        return f"""\
# CRI-O of the gpuops.training test harness (tests/harness/crio_runtime.py).
# Drop-ins, such as gpuops.training.crio_limits's 99-ulimits.conf, go in {self.config_dir}.
[crio]
root = "{self.storage_root}"
runroot = "{self.storage_runroot}"
storage_driver = "overlay"
log_dir = "{self.dir}/container-logs"
version_file = "{self.run_dir}/version"
version_file_persist = ""
clean_shutdown_file = "{self.dir}/lib/clean.shutdown"

[crio.api]
listen = "{self.socket}"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "cgroupfs"
pinns_path = "{self.bin_dir / "pinns"}"
namespaces_dir = "{self.run_dir}/ns"
container_exits_dir = "{self.run_dir}/exits"
container_attach_socket_dir = "{self.run_dir}/attach"
irqbalance_config_file = ""
irqbalance_config_restore_file = ""
hooks_dir = []
cdi_spec_dirs = ["{self.dir}/cdi"]
selinux = false
apparmor_profile = "unconfined"

[crio.runtime.runtimes.runc]
runtime_path = "{runtime}"
runtime_type = "oci"
runtime_root = "{self.run_dir}/runc"
monitor_path = "{CONMON}"
monitor_cgroup = "pod"

[crio.image]
pause_image = "{PAUSE_IMAGE}"
pause_command = "/pause"
signature_policy = "{self.dir}/policy.json"

[crio.network]
network_dir = "{self.network_dir}"
plugin_dirs = ["{CNI_PLUGIN_DIR}"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = false
"""

    # ---- the daemon ---------------------------------------------------------

    def daemon_memlock(self) -> str:
        try:
            return self.memlock_file.read_text().strip()
        except OSError:
            return default_daemon_memlock()

    def start(self, memlock: str | None = None) -> None:
        """Start CRI-O with the daemon memlock given (soft:hard bytes), the last one, or the
        default, and wait until it answers."""
        if self.is_running():
            pid = self.processes.recorded_pid(self.process_name)
            raise HarnessError(f"{self.process_name} is running already (pid {pid})")
        if memlock is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.memlock_file.write_text(memlock + "\n")
        self.processes.spawn(
            self.process_name,
            [
                "prlimit",
                f"--memlock={self.daemon_memlock()}",
                "--",
                str(self.bin_dir / "crio"),
                f"--config={self.config_file}",
                f"--config-dir={self.config_dir}",
                "--log-level=info",
            ],
        )
        self.processes.wait_ready(
            self.process_name, lambda: self.crictl("version", check=False, timeout=10).returncode == 0, 60
        )

    def is_running(self) -> bool:
        return self.processes.recorded_pid(self.process_name) is not None

    def restart(self, memlock: str | None = None) -> None:
        """Restart as a service manager would: only the daemon stops, and its conmon
        processes keep the containers running."""
        self.processes.stop(self.process_name, timeout=30, whole_group=False)
        self.start(memlock)

    def stop(self) -> None:
        """Remove every pod this CRI-O runs, stop it, and leave no mount or monitor behind."""
        if self.is_running() and self.crictl_config.exists():
            self.crictl("rmp", "--all", "--force", check=False, timeout=120)
        self.processes.stop(self.process_name)
        self.kill_leftover_monitors()
        unmount_under([self.run_dir, self.dir, self.storage_root])
        # Sockets, exit files and namespaces of a stopped CRI-O: nothing there outlives it.
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def crictl(self, *args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        command = [str(self.crictl_path), f"--config={self.crictl_config}", *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise HarnessError(f"crictl {' '.join(args)} failed: {(result.stderr or result.stdout).strip()}")
        return result

    def kill_leftover_monitors(self) -> None:
        """conmon processes whose CRI-O is gone (a crash, a kill -9) and that would keep
        their containers and mounts alive."""
        for pid in self.monitor_pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def monitor_pids(self) -> list[int]:
        marker = str(self.run_dir).encode()
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                command = (proc / "cmdline").read_bytes()
                if command.split(b"\0")[0].endswith(b"conmon") and marker in command:
                    pids.append(int(proc.name))
        return pids

    # ---- images -------------------------------------------------------------

    def podman(self, *args: str, input_bytes: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """podman on this store, with the project's containers.conf (runc, cgroupfs)."""
        env = dict(os.environ, CONTAINERS_CONF=str(REPO_ROOT / "tests" / "podman" / "containers.conf"))
        return subprocess.run(
            ["podman", *self.storage_options(), *args],
            input=input_bytes,
            capture_output=True,
            env=env,
            check=False,
        )

    def image_exists(self, image: str) -> bool:
        return self.podman("image", "exists", image).returncode == 0

    def ensure_base_images(self) -> None:
        """The pause image every pod needs, and busybox for the Training Operator's init
        container: both made here, from a C file and Debian's static busybox."""
        if not self.image_exists(PAUSE_IMAGE):
            pause = self.dir / "pause"
            self.dir.mkdir(parents=True, exist_ok=True)
            build = subprocess.run(
                ["gcc", "-O2", "-static", "-o", str(pause), str(SOURCE_DIR / "pause.c")],
                capture_output=True,
                text=True,
                check=False,
            )
            if build.returncode != 0:
                raise HarnessError(f"building the pause binary failed: {build.stderr.strip()}")
            self.import_image(PAUSE_IMAGE, {"pause": pause.read_bytes()}, entrypoint=["/pause"])
        if not self.image_exists(BUSYBOX_IMAGE):
            self.import_image(
                BUSYBOX_IMAGE,
                {"bin/busybox": Path("/bin/busybox").read_bytes()},
                links={f"bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS},
                command=["/bin/sh"],
            )

    def import_image(
        self,
        image: str,
        files: dict[str, bytes],
        links: dict[str, str] | None = None,
        entrypoint: list[str] | None = None,
        command: list[str] | None = None,
    ) -> None:
        """`podman import` of a tar made here: an image with no base and no registry."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as archive:
            for name, content in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(content)
                info.mode = 0o755
                archive.addfile(info, io.BytesIO(content))
            for name, target in (links or {}).items():
                info = tarfile.TarInfo(name)
                info.type = tarfile.SYMTYPE
                info.linkname = target
                archive.addfile(info)
        changes = []
        if entrypoint:
            changes += ["--change", f"ENTRYPOINT {json.dumps(entrypoint)}"]
        if command:
            changes += ["--change", f"CMD {json.dumps(command)}"]
        result = self.podman("import", *changes, "-", image, input_bytes=buffer.getvalue())
        if result.returncode != 0:
            raise HarnessError(
                f"podman import {image} failed: {result.stderr.decode(errors='replace').strip()}"
            )
        log(f"built image {image}")


def mountpoints_under(roots: list[Path]) -> list[str]:
    prefixes = [str(root) for root in roots]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == prefix or point.startswith(prefix + "/") for prefix in prefixes):
            points.append(point)
    return points


def unmount_under(roots: list[Path]) -> int:
    """Unmount everything mounted under these directories, deepest first; a busy mount is
    detached lazily. Returns how many mounts there were."""
    count = 0
    for _attempt in range(3):
        points = mountpoints_under(roots)
        if not points:
            break
        for point in sorted(set(points), key=lambda item: item.count("/"), reverse=True):
            if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
                subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
            count += 1
        time.sleep(0.1)
    return count
