"""A real node beside kwok's simulated ones: kubelet and CRI-O (runc, conmon, a CNI bridge).

kwok plays kubelets that run nothing. The real node runs the collection's pods for real:
kubelet (built from the harness's wrapper module) registers a node labelled
gpuops.training/real-node=true, CRI-O (crio_runtime.py) runs its pods with runc and conmon
on a Linux bridge, and CoreDNS, built with only the plugins it needs, answers the pods'
cluster DNS from the harness's API server. podman and CRI-O share one containers/storage,
so an image podman builds is at once an image the node can run: no registry is involved.

Built through the Go module proxy into the harness cache: CRI-O and pinns (C, in the same
module), crictl and CoreDNS. From Debian: conmon, runc, the CNI plugins, busybox.

Hosts like the project's machines need workarounds a normal node does not; each is switched
on only when its condition is detected, and `up` says which (detect_quirks).

Python 3.11 standard library only, like k8s_harness.py, which drives this module
(`k8s_harness.py up --real-node`, `k8s_harness.py real-node up|down|status|restart-crio`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from crio_runtime import (
    CNI_PLUGIN_DIR,
    CONMON,
    RUN_ROOT,
    RUNC,
    CrioRuntime,
    can_lower_oom_score_adj,
    default_daemon_memlock,
    mountpoints_under,
    unmount_under,
)

# k8s_harness imports this module only inside its methods, so this import finds it loaded.
from k8s_harness import LOOPBACK, Builder, HarnessError, Supervisor, exclusive_lock, log, write_kubeconfig

if TYPE_CHECKING:
    from k8s_harness import Harness

CRIO_VERSION = "v1.36.3"
CRICTL_VERSION = "v1.36.0"
COREDNS_VERSION = "v1.15.0"  # also pinned in real-node/coredns/go.mod
CRIO_MODULE = "github.com/cri-o/cri-o"
CRICTL_PACKAGE = "sigs.k8s.io/cri-tools/cmd/crictl"
# CRI-O's own build tags minus what the harness does not use (ostree, btrfs, gpgme
# signatures); seccomp stays: the pods ask for the RuntimeDefault profile. libsqlite3 links
# Debian's SQLite instead of compiling its 250,000-line amalgamation with cgo.
CRIO_BUILD_TAGS = (
    "containers_image_ostree_stub containers_image_openpgp exclude_graphdriver_btrfs seccomp libsqlite3"
)

COREDNS_MODULE_DIR = Path(__file__).resolve().parent / "real-node" / "coredns"
BINARIES = ("crio", "pinns", "crictl", "coredns")

REAL_NODE_LABEL = ("gpuops.training/real-node", "true")
# Only pods meant for the real node run there (they tolerate this taint and select the
# label): anything else the tests create, DaemonSets and operators included, stays on kwok's
# nodes, where no image is pulled.
REAL_NODE_TAINT = {"key": "gpuops.training/real-node", "value": "true", "effect": "NoSchedule"}
CGROUP_ROOT = "gpuops-real-node"

# Debian packages the node needs besides the Go builds, by a file each one installs.
SYSTEM_PACKAGES = {
    CONMON: "conmon",
    RUNC: "runc",
    str(CNI_PLUGIN_DIR / "bridge"): "containernetworking-plugins",
    "/bin/busybox": "busybox-static",
    "/usr/include/seccomp.h": "libseccomp-dev",
    "/usr/include/sqlite3.h": "libsqlite3-dev",
    "/usr/bin/pkg-config": "pkg-config",
    "/usr/bin/gcc": "gcc",
    "/usr/bin/podman": "podman",
    "/usr/bin/prlimit": "util-linux",
}

# The host sysctls kubelet rewrites at start (protectKernelDefaults false) and what it
# writes. A test harness must not change the machine's kernel settings.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}


def _log(message: str) -> None:
    log(f"real node: {message}")


def _run(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(
            f"{what} failed (exit {result.returncode}): {(result.stderr or result.stdout).strip()}"
        )
    return result


def check_system_packages() -> None:
    missing = sorted({package for path, package in SYSTEM_PACKAGES.items() if not Path(path).exists()})
    if missing:
        raise HarnessError(
            f"the real node needs Debian packages that are missing: {' '.join(missing)} "
            f"(apt-get install -y {' '.join(missing)}; `make system-packages` installs them as root)"
        )


# --------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------


class RealNodeBuilder:
    """CRI-O, pinns, crictl and CoreDNS, compiled into <harness cache>/real-node-<key>/bin.

    Shares the harness's module and build caches. The key covers every version, the build
    tags and the CoreDNS wrapper module, so a changed pin builds a new set beside the old;
    each binary is built only when it is missing.
    """

    def __init__(self, builder: Builder):
        self.builder = builder

    def build_key(self) -> str:
        digest = hashlib.sha256()
        for part in (
            self.builder.go_version(),
            CRIO_VERSION,
            CRICTL_VERSION,
            COREDNS_VERSION,
            CRIO_BUILD_TAGS,
        ):
            digest.update(part.encode())
        return digest.hexdigest()[:16]

    @staticmethod
    def coredns_key() -> str:
        """CoreDNS is also rebuilt when its wrapper module (the plugin list) changes."""
        digest = hashlib.sha256()
        for path in sorted(COREDNS_MODULE_DIR.iterdir()):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def bin_dir(self) -> Path:
        return self.builder.cache_dir / f"real-node-{self.build_key()}" / "bin"

    def _missing(self, bin_dir: Path) -> list[str]:
        stamp = bin_dir / ".coredns-key"
        coredns_current = stamp.exists() and stamp.read_text().strip() == self.coredns_key()
        wanted = {
            "crio": (bin_dir / "crio").exists() and (bin_dir / "pinns").exists(),
            "crictl": (bin_dir / "crictl").exists(),
            "coredns": (bin_dir / "coredns").exists() and coredns_current,
        }
        return [name for name, present in wanted.items() if not present]

    def is_built(self) -> bool:
        return not self._missing(self.bin_dir())

    def build(self) -> Path:
        """Build what is missing (idempotent); returns the bin directory."""
        with exclusive_lock(self.builder.cache_dir / "build.lock", "build"):
            check_system_packages()
            bin_dir = self.bin_dir()
            bin_dir.mkdir(parents=True, exist_ok=True)
            steps = {"crio": self._build_crio, "crictl": self._build_crictl, "coredns": self._build_coredns}
            missing = self._missing(bin_dir)
            if not missing:
                _log(f"binaries up to date in {bin_dir}")
            for name in missing:
                started = time.monotonic()
                with tempfile.TemporaryDirectory(dir=bin_dir.parent) as staging:
                    built = steps[name](Path(staging))
                    for path in built:
                        path.rename(bin_dir / path.name)
                if name == "coredns":
                    (bin_dir / ".coredns-key").write_text(self.coredns_key() + "\n")
                _log(
                    f"built {' and '.join(path.name for path in built)} in {time.monotonic() - started:.0f}s"
                )
            return bin_dir

    def _go(self, args: list[str], cwd: Path, **env: str) -> None:
        result = subprocess.run(
            [self.builder.go, *args], cwd=cwd, env=self.builder.go_environment() | env, check=False
        )
        if result.returncode != 0:
            raise HarnessError(f"`go {' '.join(args[:2])}` failed in {cwd} (exit {result.returncode})")

    def _build_crio(self, out: Path) -> list[Path]:
        # CRI-O's go.mod has replace directives, which apply only to the main module: build in
        # a writable copy of the module and let go resolve what the copy needs.
        source = self.builder.cache_dir / "real-node-src" / f"cri-o-{CRIO_VERSION}"
        if not (source / "go.mod").exists():
            shutil.rmtree(source, ignore_errors=True)
            shutil.copytree(self.builder.module_dir(CRIO_MODULE, CRIO_VERSION), source)
            for path in [source, *source.rglob("*")]:
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | 0o200)
        self._go(
            [
                "build",
                "-trimpath",
                "-tags",
                CRIO_BUILD_TAGS,
                "-ldflags",
                "-s -w",
                "-o",
                str(out / "crio"),
                "./cmd/crio",
            ],
            source,
            CGO_ENABLED="1",
            GOFLAGS="-modcacherw -mod=mod",
        )
        # pinns, which creates the pods' namespaces, is C in the same module.
        sources = [str(path) for path in sorted((source / "pinns" / "src").glob("*.c"))]
        _run(["gcc", "-std=c99", "-O2", "-static", *sources, "-o", str(out / "pinns")], "building pinns")
        return [out / "crio", out / "pinns"]

    def _build_crictl(self, out: Path) -> list[Path]:
        version = f"-X sigs.k8s.io/cri-tools/pkg/version.Version={CRICTL_VERSION.lstrip('v')}"
        self._go(
            ["install", "-trimpath", "-ldflags", f"-s -w {version}", f"{CRICTL_PACKAGE}@{CRICTL_VERSION}"],
            self.builder.cache_dir_ready(),
            GOBIN=str(out),
            GOFLAGS="-modcacherw",
        )
        return [out / "crictl"]

    def _build_coredns(self, out: Path) -> list[Path]:
        self._go(
            ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "coredns"), "."], COREDNS_MODULE_DIR
        )
        return [out / "coredns"]


# --------------------------------------------------------------------------
# What this host needs: each workaround only where its condition holds
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Quirk:
    name: str
    condition: str
    workaround: str


def cgroup_v1_mounts() -> list[Path]:
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _separator, right = line.partition(" - ")
        if right.split()[0] == "cgroup":
            mounts.append(Path(left.split()[4]))
    return mounts


def cgroup_v2() -> bool:
    return Path("/sys/fs/cgroup/cgroup.controllers").exists()


def hugetlb_unmounted() -> bool:
    """v1 only: runc sets hugetlb limits when kubelet reports huge page sizes."""
    enabled = any(
        fields[0] == "hugetlb" and fields[-1] == "1"
        for fields in (line.split() for line in Path("/proc/cgroups").read_text().splitlines()[1:])
    )
    mounted = any(
        "hugetlb" in line.partition(" - ")[2]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    )
    return enabled and not mounted and not cgroup_v2()


def detect_quirks() -> list[Quirk]:
    """The conditions of this host that a real node needs a workaround for."""
    quirks = []
    if not cgroup_v2():
        systemd = Path("/proc/1/comm").read_text().strip() == "systemd"
        quirks.append(
            Quirk(
                "cgroup-v1",
                "cgroup v1" + ("" if systemd else " without systemd as PID 1"),
                f"kubelet uses the cgroupfs driver with failCgroupV1=false; its cgroup root /{CGROUP_ROOT} "
                "is created in every v1 hierarchy first",
            )
        )
    if not can_lower_oom_score_adj():
        quirks.append(
            Quirk(
                "oom-score-adj",
                "root cannot lower oom_score_adj (no CAP_SYS_RESOURCE)",
                "CRI-O runs runc through a wrapper that raises a negative process.oomScoreAdj to 0 "
                "(kubelet asks -997 for Guaranteed pods)",
            )
        )
    if hugetlb_unmounted():
        quirks.append(
            Quirk(
                "hugetlb-unmounted",
                "the hugetlb cgroup controller is enabled but not mounted",
                "kubelet sees no huge page sizes (a tmpfs over /sys/kernel/mm/hugepages in its own mount "
                "namespace), so runc is asked for no hugetlb limit",
            )
        )
    differing = [
        name
        for name, wanted in KUBELET_SYSCTLS.items()
        if Path("/proc/sys", name).read_text().strip() != wanted
    ]
    if differing:
        quirks.append(
            Quirk(
                "kubelet-sysctls",
                "kubelet would rewrite the host sysctls "
                + ", ".join(name.replace("/", ".") for name in differing),
                "kubelet runs in its own mount namespace with plain files over those /proc/sys entries",
            )
        )
    return quirks


# --------------------------------------------------------------------------
# The node
# --------------------------------------------------------------------------


@dataclass
class RealNodeConfig:
    name: str = "real-node-0"
    bridge: str = "gpuops0"
    subnet: str = "10.245.0.0/24"
    # The CRI-O daemon's memlock (soft:hard bytes). Containers without a default_ulimits
    # drop-in inherit it, as on a node whose CRI-O unit sets no LimitMEMLOCK.
    crio_memlock: str = field(default_factory=default_daemon_memlock)
    labels: dict[str, str] = field(default_factory=lambda: dict([REAL_NODE_LABEL]))

    @classmethod
    def from_environment(cls) -> RealNodeConfig:
        config = cls()
        config.name = os.environ.get("GPUOPS_REAL_NODE_NAME") or config.name
        config.bridge = os.environ.get("GPUOPS_REAL_NODE_BRIDGE") or config.bridge
        config.subnet = os.environ.get("GPUOPS_REAL_NODE_SUBNET") or config.subnet
        config.crio_memlock = os.environ.get("GPUOPS_REAL_NODE_CRIO_MEMLOCK") or config.crio_memlock
        try:
            network = ipaddress.IPv4Network(config.subnet)
        except ValueError as exc:
            raise HarnessError(f"GPUOPS_REAL_NODE_SUBNET={config.subnet!r} is not an IPv4 network") from exc
        if network.num_addresses < 16:
            raise HarnessError(
                f"GPUOPS_REAL_NODE_SUBNET={config.subnet!r} has too few addresses for the pods"
            )
        return config

    @property
    def node_ip(self) -> str:
        return str(next(ipaddress.IPv4Network(self.subnet).hosts()))


class RealNode:
    """Bring the real node up beside the harness's control plane, and down again cleanly."""

    COMPONENTS = ("real-node-coredns", "real-node-crio", "real-node-kubelet")

    def __init__(self, harness: Harness, config: RealNodeConfig | None = None):
        self.harness = harness
        self.config = config or RealNodeConfig.from_environment()
        self.dir = harness.state_dir / "real-node"
        self.state_file = self.dir / "state.json"
        self.builder = RealNodeBuilder(harness.builder)
        self.runtime = CrioRuntime(
            harness.processes,
            self.dir / "crio",
            RUN_ROOT / "real-node",
            storage_root=harness.config.cache_dir.parent / "real-node" / "storage",
            bin_dir=lambda: self.bin_dir,
            process_name="real-node-crio",
            network_dir=self.dir / "cni" / "net.d",
        )

    @property
    def bin_dir(self) -> Path:
        return Path(self.state().get("bin_dir") or self.builder.bin_dir())

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def is_up(self) -> bool:
        return bool(self.state().get("ready")) and all(
            self.harness._recorded_pid(name) is not None for name in self.COMPONENTS
        )

    def environment(self) -> dict[str, str]:
        """The node's paths, service control and hard limits, for the inventory that configures
        it with the collection (inventories/harness-real-node) and for tests."""
        import resource
        import sys

        def hard(limit: int) -> str:
            value = resource.getrlimit(limit)[1]
            return "-1" if value == resource.RLIM_INFINITY else str(value)

        restart = [
            sys.executable,
            str(Path(__file__).resolve().parent / "k8s_harness.py"),
            "real-node",
            "restart-crio",
        ]
        return {
            "GPUOPS_REAL_NODE_NAME": self.config.name,
            "GPUOPS_REAL_NODE_IP": self.config.node_ip,
            "GPUOPS_REAL_NODE_CRIO_CONFIG": str(self.runtime.config_file),
            "GPUOPS_REAL_NODE_CRIO_CONFIG_DIR": str(self.runtime.config_dir),
            "GPUOPS_REAL_NODE_CRIO_SOCKET": str(self.runtime.socket),
            "GPUOPS_REAL_NODE_CRICTL": str(self.runtime.crictl_path),
            "GPUOPS_REAL_NODE_RESTART_CRIO": json.dumps(restart),
            "GPUOPS_REAL_NODE_STORAGE_OPTIONS": " ".join(self.runtime.storage_options()),
            # What runc can give a container without CAP_SYS_RESOURCE: the daemon's hard limits.
            "GPUOPS_REAL_NODE_HARD_MEMLOCK": hard(resource.RLIMIT_MEMLOCK),
            "GPUOPS_REAL_NODE_HARD_NOFILE": hard(resource.RLIMIT_NOFILE),
            "GPUOPS_REAL_NODE_HARD_NPROC": hard(resource.RLIMIT_NPROC),
        }

    # ---- lifecycle ------------------------------------------------------

    def up(self) -> bool:
        """Start the node (the control plane must be up); False when it already was."""
        with exclusive_lock(self.harness.state_dir / "lifecycle.lock", "harness up/down"):
            return self._up()

    def down(self) -> None:
        with exclusive_lock(self.harness.state_dir / "lifecycle.lock", "harness up/down"):
            self._down(quiet=False, delete_node=True)

    def restart_crio(self, memlock: str | None = None) -> None:
        """Restart CRI-O as its service would be (containers keep running under conmon).

        memlock (soft:hard bytes) is the daemon's own limit from now on. This is the node's
        service control for gpuops.training.crio_limits (crio_limits_restart_command)."""
        if not self.is_up():
            raise HarnessError("the real node is not up")
        self.runtime.restart(memlock)

    def _up(self) -> bool:
        started = time.monotonic()
        if self.is_up():
            _log(f"already up: node {self.config.name}")
            return False
        if os.geteuid() != 0:
            raise HarnessError("the real node needs root (mounts, a bridge, cgroups, CRI-O)")
        if not self.harness.is_up():
            raise HarnessError("the control plane is not up: run `k8s_harness.py up --real-node`")
        if self.state() or any(self.harness._recorded_pid(name) for name in self.COMPONENTS):
            _log("a previous real node is partly running; stopping it first")
            self._down(quiet=True, delete_node=False)
        self._claim_machine()
        quirks = detect_quirks()
        for quirk in quirks:
            _log(f"{quirk.condition}: {quirk.workaround}")
        if not quirks:
            _log("this host needs no workaround")
        names = {quirk.name for quirk in quirks}
        step = self.harness._step
        try:
            with step("real node: binaries"):
                bin_dir = self.builder.build()
                self.harness.build()  # kubelet comes from the control plane's module
            self.dir.mkdir(parents=True, exist_ok=True)
            self.state_file.write_text(json.dumps({"ready": False, "bin_dir": str(bin_dir)}))
            with step("real node: configuration, certificates, bridge, images"):
                self.runtime.write_configuration(clamp_oom_score_adj="oom-score-adj" in names)
                self._write_configuration()
                self._create_bridge()
                self.runtime.ensure_base_images()
                self._authorize_kubelet()
            with step("real node: CoreDNS"):
                self._start_coredns()
            with step("real node: CRI-O"):
                self.runtime.start(self.config.crio_memlock)
            with step(f"real node: kubelet, node {self.config.name} Ready"):
                if "cgroup-v1" in names:
                    self._prepare_cgroup_v1()
                self._start_kubelet(names)
                self._wait_node_ready()
        except BaseException:
            _log("start-up failed; stopping what was started")
            self._down(quiet=True, delete_node=True)
            raise
        self.state_file.write_text(
            json.dumps(
                {
                    "ready": True,
                    "bin_dir": str(bin_dir),
                    "node": self.config.name,
                    "node_ip": self.config.node_ip,
                    "bridge": self.config.bridge,
                    "quirks": [asdict(quirk) for quirk in quirks],
                    "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
                indent=2,
            )
        )
        _log(f"up in {time.monotonic() - started:.1f}s: node {self.config.name} ({self.config.node_ip})")
        return True

    def _claim_machine(self) -> None:
        """One real node per machine: its bridge, port 53 on it and its cgroup root are global."""
        RUN_ROOT.mkdir(parents=True, exist_ok=True)
        owner_file = RUN_ROOT / "real-node.owner"
        owner = owner_file.read_text().strip() if owner_file.exists() else ""
        if owner and owner != str(self.harness.state_dir) and self._owner_is_alive(Path(owner)):
            raise HarnessError(
                f"the harness in {owner} runs this machine's real node: bring it down first "
                f"(GPUOPS_HARNESS_DIR={owner} python tests/harness/k8s_harness.py real-node down)"
            )
        owner_file.write_text(f"{self.harness.state_dir}\n")

    def _owner_is_alive(self, owner: Path) -> bool:
        """A claim holds while one of its node's processes runs: a claim left by a machine that
        rebooted, or a copy of this machine's files, must not block a new node."""
        owner_processes = Supervisor(owner)
        return any(owner_processes.recorded_pid(name) is not None for name in self.COMPONENTS)

    def _down(self, quiet: bool, delete_node: bool) -> None:
        harness = self.harness
        say = (lambda _message: None) if quiet else _log
        if harness._recorded_pid("real-node-kubelet") is not None:
            say("stopping kubelet")
        harness._stop("real-node-kubelet")
        if self.runtime.is_running():
            say("removing every pod and stopping CRI-O")
        self.runtime.stop()
        harness._stop("real-node-coredns")
        unmounted = unmount_under([self.dir, self.runtime.run_dir, self.runtime.storage_root])
        if unmounted:
            say(f"unmounted {unmounted} mounts")
        if (
            subprocess.run(
                ["ip", "link", "show", self.config.bridge], capture_output=True, check=False
            ).returncode
            == 0
        ):
            subprocess.run(["ip", "link", "delete", self.config.bridge], capture_output=True, check=False)
        self._remove_cgroups()
        if delete_node and harness.is_up():
            harness.kubectl(
                "delete", "node", self.config.name, "--ignore-not-found", "--wait=false", check=False
            )
        self.state_file.unlink(missing_ok=True)
        owner_file = RUN_ROOT / "real-node.owner"
        if owner_file.exists() and owner_file.read_text().strip() == str(harness.state_dir):
            owner_file.unlink()

    def leftovers(self) -> list[str]:
        """What a clean `down` must not leave: processes, mounts, the bridge, cgroups."""
        found = [
            f"process {name}" for name in self.COMPONENTS if self.harness._recorded_pid(name) is not None
        ]
        found += [f"conmon pid {pid}" for pid in self.runtime.monitor_pids()]
        found += [
            f"mount {point}"
            for point in mountpoints_under([self.dir, self.runtime.run_dir, self.runtime.storage_root])
        ]
        if (
            subprocess.run(
                ["ip", "link", "show", self.config.bridge], capture_output=True, check=False
            ).returncode
            == 0
        ):
            found.append(f"bridge {self.config.bridge}")
        found += [f"cgroup {path}" for path in self._cgroup_roots() if path.exists()]
        return found

    # ---- configuration ----------------------------------------------------

    def _write_configuration(self) -> None:
        node_dir = self.dir
        for directory in (
            "cni/net.d",
            "cni/ipam",
            "kubelet-conf/certs",
            "kubelet",
            "pod-logs",
            "coredns",
            "sysctl",
        ):
            (node_dir / directory).mkdir(parents=True, exist_ok=True)
        (node_dir / "cni" / "net.d" / "10-gpuops-bridge.conflist").write_text(
            json.dumps(self._cni_conflist(), indent=1) + "\n"
        )
        (node_dir / "coredns" / "Corefile").write_text(self._corefile())
        # Pods get the cluster DNS from kubelet's clusterDNS; there is no upstream resolver.
        (node_dir / "kubelet-conf" / "resolv.conf").write_text("options ndots:5\n")
        self._write_kubelet_credentials()
        (node_dir / "kubelet-conf" / "kubelet-config.json").write_text(
            json.dumps(self._kubelet_config(), indent=2)
        )
        for name in KUBELET_SYSCTLS:
            (node_dir / "sysctl" / name.replace("/", "_")).write_text(Path("/proc/sys", name).read_text())

    def _cni_conflist(self) -> dict:
        return {
            "cniVersion": "1.0.0",
            "name": "gpuops-real-node",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.config.bridge,
                    "isGateway": True,
                    # Pods talk to each other, the host and CoreDNS; nothing leaves the machine.
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": str(self.dir / "cni" / "ipam"),
                        "ranges": [[{"subnet": self.config.subnet, "gateway": self.config.node_ip}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                }
            ],
        }

    def _corefile(self) -> str:
        ports = self.harness.ports
        return (
            ".:53 {\n"
            f"    bind {self.config.node_ip}\n"
            "    errors\n"
            f"    health {LOOPBACK}:{ports['real-node-coredns-health']}\n"
            f"    ready {LOOPBACK}:{ports['real-node-coredns-ready']}\n"
            "    kubernetes cluster.local in-addr.arpa ip6.arpa {\n"
            f"        kubeconfig {self.harness.kubeconfig} gpuops-harness\n"
            "        pods insecure\n"
            "        fallthrough in-addr.arpa ip6.arpa\n"
            "        ttl 5\n"
            "    }\n"
            "    cache 5\n"
            "}\n"
        )

    def _write_kubelet_credentials(self) -> None:
        pki = self.harness.pki
        name = self.config.name
        client, serving = f"kubelet-{name}", f"kubelet-{name}-serving"
        # The serving certificate names the node's address: a new subnet gets a new one.
        identity = pki.path(f"{serving}.identity")
        if identity.exists() and identity.read_text() != self.config.node_ip:
            for suffix in ("crt", "key", "csr", "ext"):
                pki.path(f"{serving}.{suffix}").unlink(missing_ok=True)
        pki._leaf(client, f"/O=system:nodes/CN=system:node:{name}", "clientAuth")
        pki._leaf(
            serving,
            f"/CN={name}",
            "serverAuth",
            f"DNS:{name},DNS:localhost,IP:127.0.0.1,IP:{self.config.node_ip}",
        )
        identity.write_text(self.config.node_ip)
        write_kubeconfig(
            self.dir / "kubelet-conf" / "kubelet.kubeconfig", self.harness.server_url, pki, user=client
        )

    def _kubelet_config(self) -> dict:
        ports = self.harness.ports
        pki = self.harness.pki
        serving = f"kubelet-{self.config.name}-serving"
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": self.config.node_ip,
            "port": ports["real-node-kubelet"],
            "readOnlyPort": 0,
            "healthzBindAddress": LOOPBACK,
            "healthzPort": ports["real-node-kubelet-healthz"],
            "tlsCertFile": str(pki.path(f"{serving}.crt")),
            "tlsPrivateKeyFile": str(pki.path(f"{serving}.key")),
            # The API server's kubelet client certificate is signed by the harness CA.
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(pki.path("ca.crt"))},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{CGROUP_ROOT}",
            "cgroupsPerQOS": True,
            "failCgroupV1": cgroup_v2(),
            "failSwapOn": False,
            "containerRuntimeEndpoint": f"unix://{self.runtime.socket}",
            "imageServiceEndpoint": f"unix://{self.runtime.socket}",
            "clusterDNS": [self.config.node_ip],
            "clusterDomain": "cluster.local",
            "resolvConf": str(self.dir / "kubelet-conf" / "resolv.conf"),
            "podLogsDir": str(self.dir / "pod-logs"),
            "volumePluginDir": str(self.dir / "kubelet" / "volume-plugins"),
            # A test machine's disk may be nearly full: evict only when it really is.
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
                "nodefs.inodesFree": "1%",
            },
            # The images were built here and cannot be pulled again: never collect them.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "maxPods": 30,
            "registerNode": True,
            "syncFrequency": "10s",
            "nodeStatusUpdateFrequency": "10s",
            "protectKernelDefaults": False,
            "localStorageCapacityIsolation": True,
            "serializeImagePulls": False,
        }

    def _create_bridge(self) -> None:
        bridge = self.config.bridge
        prefix = ipaddress.IPv4Network(self.config.subnet).prefixlen
        if subprocess.run(["ip", "link", "show", bridge], capture_output=True, check=False).returncode != 0:
            _run(["ip", "link", "add", bridge, "type", "bridge"], f"creating bridge {bridge}")
        _run(
            ["ip", "addr", "replace", f"{self.config.node_ip}/{prefix}", "dev", bridge],
            f"addressing {bridge}",
        )
        _run(["ip", "link", "set", bridge, "up"], f"bringing {bridge} up")

    def _authorize_kubelet(self) -> None:
        # The harness authorizes with RBAC only (no Node authorizer): bind the node's user.
        self.harness.apply(
            [
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": f"gpuops-harness:{self.config.name}"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "system:node",
                    },
                    "subjects": [
                        {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "User",
                            "name": f"system:node:{self.config.name}",
                        }
                    ],
                }
            ]
        )

    # ---- processes ----------------------------------------------------------

    def _start_coredns(self) -> None:
        self.harness._spawn(
            "real-node-coredns",
            [str(self.bin_dir / "coredns"), "-conf", str(self.dir / "coredns" / "Corefile")],
        )
        url = f"http://{LOOPBACK}:{self.harness.ports['real-node-coredns-ready']}/ready"
        self.harness._wait_ready("real-node-coredns", lambda: self.harness._http_ok(url, b"OK"), 60)

    def _cgroup_roots(self) -> list[Path]:
        mounts = cgroup_v1_mounts() + ([Path("/sys/fs/cgroup")] if cgroup_v2() else [])
        return [mount / CGROUP_ROOT for mount in mounts]

    def _prepare_cgroup_v1(self) -> None:
        """kubelet wants its cgroup root in every v1 hierarchy, cpuset populated."""
        for root in self._cgroup_roots():
            root.mkdir(exist_ok=True)
            for name in ("cpuset.cpus", "cpuset.mems"):
                if (root / name).exists() and not (root / name).read_text().strip():
                    (root / name).write_text((root.parent / name).read_text())

    def _remove_cgroups(self) -> None:
        for root in self._cgroup_roots():
            if not root.is_dir():
                continue
            for directory in sorted(
                (path for path in root.rglob("*") if path.is_dir()), key=lambda p: -len(p.parts)
            ):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            with contextlib.suppress(OSError):
                root.rmdir()

    def _start_kubelet(self, quirk_names: set[str]) -> None:
        kubelet = [
            str(self.harness.binary("kubelet")),
            f"--config={self.dir / 'kubelet-conf' / 'kubelet-config.json'}",
            f"--kubeconfig={self.dir / 'kubelet-conf' / 'kubelet.kubeconfig'}",
            f"--root-dir={self.dir / 'kubelet'}",
            f"--cert-dir={self.dir / 'kubelet-conf' / 'certs'}",
            f"--hostname-override={self.config.name}",
            f"--node-ip={self.config.node_ip}",
            "--node-labels="
            + ",".join(f"{key}={value}" for key, value in sorted(self.config.labels.items())),
            "--register-with-taints={key}={value}:{effect}".format(**REAL_NODE_TAINT),
            "--v=2",
        ]
        mounts = []
        if "hugetlb-unmounted" in quirk_names:
            mounts.append("mount -t tmpfs -o size=4k,mode=755 gpuops-no-hugepages /sys/kernel/mm/hugepages")
        if "kubelet-sysctls" in quirk_names:
            for name in KUBELET_SYSCTLS:
                mounts.append(f"mount --bind {self.dir / 'sysctl' / name.replace('/', '_')} /proc/sys/{name}")
        if not mounts:
            self.harness._spawn("real-node-kubelet", kubelet)
        else:
            # kubelet's volume mounts (service-account tokens) must reach CRI-O's namespace: its
            # root dir is a shared mount, which the new namespace keeps as a peer.
            root_dir = self.dir / "kubelet"
            if not mountpoints_under([root_dir]):
                _run(["mount", "--bind", str(root_dir), str(root_dir)], "bind-mounting kubelet's root dir")
            _run(["mount", "--make-shared", str(root_dir)], "sharing kubelet's root dir")
            script = " && ".join([*mounts, "exec " + " ".join(kubelet)])
            self.harness._spawn(
                "real-node-kubelet",
                ["unshare", "--mount", "--propagation", "unchanged", "--", "sh", "-c", script],
            )
        url = f"http://{LOOPBACK}:{self.harness.ports['real-node-kubelet-healthz']}/healthz"
        self.harness._wait_ready("real-node-kubelet", lambda: self.harness._http_ok(url), 90)

    def _wait_node_ready(self) -> None:
        jsonpath = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"

        def ready() -> bool:
            result = self.harness.kubectl("get", "node", self.config.name, "-o", jsonpath, check=False)
            return result.returncode == 0 and result.stdout.strip() == "True"

        self.harness._wait_ready("real-node-kubelet", ready, 120)
