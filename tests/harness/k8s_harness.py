"""A real Kubernetes control plane on 127.0.0.1 for the gpuops.training tests.

Components, all built from source through the Go module proxy (see go/):
etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
kwok (simulated GPU nodes and pod lifecycles, pod logs served from files) and
the Kubeflow Training Operator v1 controllers, run outside the cluster.
The upstream CRDs are read at run time from their Go modules.

Usage: python tests/harness/k8s_harness.py build|up|down|status|kubeconfig|crds

Python 3.11 standard library only; it shells out to go, openssl and the
built binaries. Importable: the pytest plugin uses Harness directly.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime as dt
import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Run as a script, this module is __main__; real_node.py imports it as k8s_harness, which
# must be this same module (one HarnessError class, one set of constants).
if __name__ == "__main__":
    sys.modules.setdefault("k8s_harness", sys.modules[__name__])

HARNESS_SOURCE_DIR = Path(__file__).resolve().parent
REPO_ROOT = HARNESS_SOURCE_DIR.parents[1]
GO_MODULE_DIR = HARNESS_SOURCE_DIR / "go"
OPERATOR_MODULE_DIR = GO_MODULE_DIR / "cmd" / "training-operator"
KWOK_STAGES_DIR = HARNESS_SOURCE_DIR / "kwok-stages"  # one Stage document per file

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.8"
KWOK_VERSION = "v0.8.0"
TRAINING_OPERATOR_VERSION = "v1.9.2"
KUEUE_VERSION = "v0.17.0"

# Annotation that tells kwok a node is simulated (its --manage-nodes-with-annotation-selector).
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
# The image of the Training Operator's PyTorch init container, built locally by the real
# node (crio_runtime.py) so that it runs without a registry: Debian's busybox with these
# applets. Its tag is made from them, so a node's store gets a new image when they change.
BUSYBOX_APPLETS = (
    "sh",
    "nslookup",
    "grep",
    "sleep",
    "seq",
    "echo",
    "cat",
    "ls",
    "nc",
    "true",
    "false",
    "env",
    "id",
)
_BUSYBOX_TAG = hashlib.sha256(" ".join(BUSYBOX_APPLETS).encode()).hexdigest()[:12]
BUSYBOX_IMAGE = "localhost/gpuops-harness/busybox:" + _BUSYBOX_TAG

# Binaries of the control-plane module (built with one `go build`) and of the
# separate training-operator module.
CONTROL_PLANE_PACKAGES = {
    "etcd": "./cmd/etcd",
    "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
    "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
    "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
    "kubectl": "k8s.io/kubernetes/cmd/kubectl",
    # The real node's kubelet (real_node.py); built here to share the Kubernetes version.
    "kubelet": "k8s.io/kubernetes/cmd/kubelet",
    "kwok": "sigs.k8s.io/kwok/cmd/kwok",
}
OPERATOR_BINARY = "training-operator"
# The training_operator role's default init container resources (requests equal to limits).
OPERATOR_INIT_CONTAINER_RESOURCES = ("100m", "20Mi")
ALL_BINARIES = (*CONTROL_PLANE_PACKAGES, OPERATOR_BINARY)


@dataclass(frozen=True)
class CrdSource:
    """CRD manifests shipped inside a Go module (read with `go mod download`)."""

    module: str
    version: str
    paths: tuple[str, ...]
    kinds: tuple[str, ...]


# The upstream CRDs the collection's roles and tests need. Not committed: they
# are read from the module cache at run time.
CRD_SOURCES: tuple[CrdSource, ...] = (
    CrdSource(
        "github.com/openshift/api",
        "v0.0.0-20251020135558-286504b695bc",
        (
            "machineconfiguration/v1/zz_generated.crd-manifests/"
            "0000_80_machine-config_01_machineconfigs.crd.yaml",
            "machineconfiguration/v1/zz_generated.crd-manifests/"
            "0000_80_machine-config_01_machineconfigpools.crd.yaml",
            # OpenShift serves SecurityContextConstraints as a CRD too (training_namespace's SCC).
            "security/v1/zz_generated.crd-manifests/"
            "0000_03_config-operator_01_securitycontextconstraints.crd.yaml",
        ),
        (
            "machineconfigs.machineconfiguration.openshift.io",
            "machineconfigpools.machineconfiguration.openshift.io",
            "securitycontextconstraints.security.openshift.io",
        ),
    ),
    CrdSource(
        "github.com/k8snetworkplumbingwg/network-attachment-definition-client",
        "v1.7.7",
        ("artifacts/networks-crd.yaml",),
        ("network-attachment-definitions.k8s.cni.cncf.io",),
    ),
    CrdSource(
        "github.com/k8snetworkplumbingwg/sriov-network-operator",
        "v1.6.0",
        (
            "config/crd/bases/sriovnetwork.openshift.io_sriovnetworknodepolicies.yaml",
            "config/crd/bases/sriovnetwork.openshift.io_sriovnetworks.yaml",
            "config/crd/bases/sriovnetwork.openshift.io_sriovibnetworks.yaml",
        ),
        (
            "sriovnetworknodepolicies.sriovnetwork.openshift.io",
            "sriovnetworks.sriovnetwork.openshift.io",
            "sriovibnetworks.sriovnetwork.openshift.io",
        ),
    ),
    CrdSource(
        # April 2024: the newest GPU Operator the module proxy serves.
        "github.com/NVIDIA/gpu-operator",
        "v1.8.3-0.20240429200431-0fe1e8db32b0",
        ("config/crd/bases/nvidia.com_clusterpolicies.yaml",),
        ("clusterpolicies.nvidia.com",),
    ),
    CrdSource(
        "github.com/Mellanox/network-operator",
        "v1.4.0",
        ("config/crd/bases/mellanox.com_nicclusterpolicies.yaml",),
        ("nicclusterpolicies.mellanox.com",),
    ),
    CrdSource(
        "github.com/kubeflow/training-operator",
        TRAINING_OPERATOR_VERSION,
        (
            "manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
            "manifests/base/crds/kubeflow.org_mpijobs.yaml",
        ),
        ("pytorchjobs.kubeflow.org", "mpijobs.kubeflow.org"),
    ),
    CrdSource(
        "github.com/kubeflow/trainer/v2",
        "v2.1.0",
        (
            "manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml",
            "manifests/base/crds/trainer.kubeflow.org_trainingruntimes.yaml",
            "manifests/base/crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
        ),
        (
            "trainjobs.trainer.kubeflow.org",
            "trainingruntimes.trainer.kubeflow.org",
            "clustertrainingruntimes.trainer.kubeflow.org",
        ),
    ),
    CrdSource(
        "sigs.k8s.io/kwok",
        KWOK_VERSION,
        (
            "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml",
            "kustomize/crd/bases/kwok.x-k8s.io_clusterlogs.yaml",
        ),
        ("logs.kwok.x-k8s.io", "clusterlogs.kwok.x-k8s.io"),
    ),
    CrdSource(
        # Kueue's queues and the Workload it makes of each queued job (gang admission); the API
        # server validates them, no Kueue controller runs.
        "sigs.k8s.io/kueue",
        KUEUE_VERSION,
        (
            "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
            "config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml",
            "config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml",
            "config/components/crd/bases/kueue.x-k8s.io_workloads.yaml",
        ),
        (
            "resourceflavors.kueue.x-k8s.io",
            "clusterqueues.kueue.x-k8s.io",
            "localqueues.kueue.x-k8s.io",
            "workloads.kueue.x-k8s.io",
        ),
    ),
)
ALL_CRD_NAMES = tuple(name for source in CRD_SOURCES for name in source.kinds)

# Default loopback ports: below Linux's ephemeral range (32768+) and away from
# the well-known Kubernetes ports, so a real cluster on the machine is unharmed.
DEFAULT_PORTS = {
    "etcd": 12379,
    "etcd-peer": 12380,
    "kube-apiserver": 16443,
    "kube-controller-manager": 20257,
    "kube-scheduler": 20259,
    "kwok": 20250,
    "training-operator-metrics": 18080,
    "training-operator-health": 18081,
    # The real node (real_node.py), used only when it is up: kubelet listens on the
    # node's bridge address, the rest on 127.0.0.1.
    "real-node-kubelet": 20270,
    "real-node-kubelet-healthz": 20271,
    "real-node-coredns-health": 20272,
    "real-node-coredns-ready": 20273,
}
LOOPBACK = "127.0.0.1"
START_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "training-operator",
    "node-leases",
)
# Ports each component listens on; `down` waits until they are closed.
COMPONENT_PORTS = {
    "etcd": ("etcd", "etcd-peer"),
    "kube-apiserver": ("kube-apiserver",),
    "kube-controller-manager": ("kube-controller-manager",),
    "kube-scheduler": ("kube-scheduler",),
    "kwok": ("kwok",),
    "training-operator": ("training-operator-metrics", "training-operator-health"),
    "node-leases": (),
}


class HarnessError(RuntimeError):
    """A failure with a message meant for the person running the tests."""


def log(message: str) -> None:
    print(f"[k8s-harness] {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def exclusive_lock(path: Path, what: str):
    """Serialise builds (and up/down) between processes, e.g. pytest and molecule."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another {what} to finish ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield  # closing the file releases the lock


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise HarnessError(f"{name}={raw!r} is not an integer") from exc


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@dataclass
class NodeSpec:
    """A simulated node: kwok keeps it Ready and runs the pods bound to it."""

    name: str
    capacity: dict[str, str]
    labels: dict[str, str] = field(default_factory=dict)
    # Node taints ({key, value, effect}), as a GPU node pool sets them.
    taints: list[dict[str, str]] = field(default_factory=list)

    def manifest(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **self.labels,
                },
            },
            "spec": {"taints": [dict(taint) for taint in self.taints]} if self.taints else {},
            # kwok's node-initialize stage keeps capacity/allocatable as given.
            "status": {"capacity": self.capacity, "allocatable": self.capacity},
        }


def gpu_node(name: str, gpus: int = 8, rdma_devices: int = 63) -> NodeSpec:
    return NodeSpec(
        name=name,
        capacity={
            "cpu": "96",
            "memory": "1056Gi",
            "pods": "110",
            "ephemeral-storage": "3500Gi",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "nvidia.com/gpu": str(gpus),
            "rdma/rdma_shared_device_a": str(rdma_devices),
        },
        labels={
            "node-role.kubernetes.io/worker": "",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "feature.node.kubernetes.io/rdma.available": "true",
        },
    )


def fenced_gpu_nodes(names: list[str], key: str, value: str) -> list[NodeSpec]:
    """GPU nodes labelled ``key=value`` and tainted ``key=value:NoSchedule``: a test's own
    nodes, which only the pods that tolerate and select that label land on."""
    specs = [gpu_node(name) for name in names]
    for spec in specs:
        spec.labels[key] = value
        spec.taints = [{"key": key, "value": value, "effect": "NoSchedule"}]
    return specs


@dataclass
class HarnessConfig:
    state_dir: Path
    cache_dir: Path
    ports: dict[str, int]
    nodes: list[NodeSpec]

    @classmethod
    def from_environment(cls) -> HarnessConfig:
        """Settings from GPUOPS_* variables; defaults suit a developer machine and CI."""
        cache_root = Path(os.environ.get("GPUOPS_CACHE_DIR") or Path.home() / ".cache" / "gpuops-training")
        state_dir = Path(os.environ.get("GPUOPS_HARNESS_DIR") or REPO_ROOT / ".harness")
        # An offset moves every default at once, so a second harness (Molecule's, beside the
        # integration tests' one) needs one variable; a port named on its own still wins.
        offset = env_int("GPUOPS_HARNESS_PORT_OFFSET", 0)
        ports = {
            name: env_int("GPUOPS_HARNESS_PORT_" + name.upper().replace("-", "_"), default + offset)
            for name, default in DEFAULT_PORTS.items()
        }
        node_count = env_int("GPUOPS_HARNESS_GPU_NODES", 2)
        gpus = env_int("GPUOPS_HARNESS_GPUS_PER_NODE", 8)
        rdma = env_int("GPUOPS_HARNESS_RDMA_PER_NODE", 63)
        nodes = [gpu_node(f"gpu-node-{index}", gpus, rdma) for index in range(node_count)]
        return cls(
            state_dir=state_dir.resolve(),
            cache_dir=(cache_root / "harness").resolve(),
            ports=ports,
            nodes=nodes,
        )


# --------------------------------------------------------------------------
# Build: Go binaries cached outside the repository
# --------------------------------------------------------------------------


def go_executable() -> str:
    found = shutil.which("go") or ("/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None)
    if not found:
        raise HarnessError("the Go toolchain (go >= 1.26) is not on PATH")
    return found


def kubernetes_ldflags() -> str:
    """Version stamps: without them kubectl cannot parse the server version."""
    major, minor = KUBERNETES_VERSION.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        for variable, value in (
            ("gitVersion", KUBERNETES_VERSION),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("gitCommit", "0" * 40),
            ("buildDate", "1970-01-01T00:00:00Z"),
        ):
            flags.append(f"-X {package}.{variable}={value}")
    return " ".join(flags)


class Builder:
    """Compiles the binaries into <cache>/<key>/bin.

    The key hashes everything that decides the binaries (Go version, go.mod,
    go.sum, the harness's Go sources, the ldflags), so a changed pin builds a
    new set beside the old one. The module and build caches are shared between
    keys (<cache>/gomod, <cache>/gocache): both are content-addressed, so a
    small change recompiles only what it touches.
    """

    def __init__(self, cache_dir: Path):
        self.cache_dir = cache_dir
        self.gomodcache = cache_dir / "gomod"
        self.gocache = cache_dir / "gocache"
        self._go: str | None = None

    @property
    def go(self) -> str:
        if self._go is None:
            self._go = go_executable()
        return self._go

    def go_environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            GOMODCACHE=str(self.gomodcache),
            GOCACHE=str(self.gocache),
            # Writable module cache so `rm -rf` of the cache works.
            GOFLAGS="-modcacherw -mod=readonly",
            # Static binaries, the same with or without a C compiler.
            CGO_ENABLED="0",
            GOTOOLCHAIN="local",
            GOWORK="off",
        )
        return env

    def go_version(self) -> str:
        result = subprocess.run([self.go, "env", "GOVERSION"], capture_output=True, text=True, check=True)
        return result.stdout.strip()

    def build_key(self) -> str:
        digest = hashlib.sha256()
        digest.update(self.go_version().encode())
        digest.update(kubernetes_ldflags().encode())
        sources = sorted(GO_MODULE_DIR.rglob("*.go")) + sorted(
            path for path in GO_MODULE_DIR.rglob("go.*") if path.name in ("go.mod", "go.sum")
        )
        for path in sources:
            digest.update(str(path.relative_to(GO_MODULE_DIR)).encode())
            digest.update(path.read_bytes())
        return digest.hexdigest()[:16]

    def bin_dir(self, key: str | None = None) -> Path:
        return self.cache_dir / (key or self.build_key()) / "bin"

    def is_built(self, key: str | None = None) -> bool:
        bin_dir = self.bin_dir(key)
        return (bin_dir.parent / "build.json").exists() and all(
            (bin_dir / name).exists() for name in ALL_BINARIES
        )

    def build(self, force: bool = False) -> Path:
        """Build if needed (idempotent); returns the bin directory."""
        with exclusive_lock(self.cache_dir / "build.lock", "build"):
            return self._build(force)

    def _build(self, force: bool) -> Path:
        started = time.monotonic()
        key = self.build_key()
        bin_dir = self.bin_dir(key)
        if self.is_built(key) and not force:
            log(f"binaries up to date in {bin_dir} ({time.monotonic() - started:.1f}s)")
            return bin_dir
        cold = not self.gocache.exists()
        log(
            f"building Kubernetes {KUBERNETES_VERSION}, etcd {ETCD_VERSION}, kwok {KWOK_VERSION}, "
            f"training-operator {TRAINING_OPERATOR_VERSION} into {bin_dir}"
            + (" (empty cache: 8-15 minutes on 2 cores)" if cold else "")
        )
        staging = Path(tempfile.mkdtemp(prefix="bin-", dir=self.cache_dir_ready()))
        try:
            self._run_go(
                [
                    "build",
                    "-trimpath",
                    "-ldflags",
                    kubernetes_ldflags(),
                    "-o",
                    f"{staging}/",
                    *CONTROL_PLANE_PACKAGES.values(),
                ],
                GO_MODULE_DIR,
            )
            self._run_go(
                ["build", "-trimpath", "-ldflags", "-s -w", "-o", str(staging / OPERATOR_BINARY), "."],
                OPERATOR_MODULE_DIR,
            )
            missing = [name for name in ALL_BINARIES if not (staging / name).exists()]
            if missing:
                raise HarnessError(f"go build did not produce: {', '.join(missing)}")
            if bin_dir.exists():
                shutil.rmtree(bin_dir)
            bin_dir.parent.mkdir(parents=True, exist_ok=True)
            staging.rename(bin_dir)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        seconds = time.monotonic() - started
        (bin_dir.parent / "build.json").write_text(
            json.dumps(
                {
                    "key": key,
                    "go": self.go_version(),
                    "kubernetes": KUBERNETES_VERSION,
                    "etcd": ETCD_VERSION,
                    "kwok": KWOK_VERSION,
                    "training_operator": TRAINING_OPERATOR_VERSION,
                    "seconds": round(seconds, 1),
                    "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                },
                indent=2,
            )
            + "\n"
        )
        log(f"built in {seconds:.1f}s")
        return bin_dir

    def cache_dir_ready(self) -> Path:
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        return self.cache_dir

    def _run_go(self, args: list[str], cwd: Path) -> None:
        command = [self.go, *args]
        result = subprocess.run(command, cwd=cwd, env=self.go_environment(), check=False)
        if result.returncode != 0:
            raise HarnessError(
                f"`go {args[0]}` failed in {cwd} (exit {result.returncode}); "
                "the module proxy only serves exact versions, so check go.mod pins"
            )

    def module_dir(self, module: str, version: str) -> Path:
        """Download one module (or find it in the cache) and return its directory."""
        result = subprocess.run(
            [self.go, "mod", "download", "-json", f"{module}@{version}"],
            # Outside any module so the harness's go.mod does not constrain it.
            cwd=self.cache_dir_ready(),
            env=self.go_environment() | {"GOFLAGS": "-modcacherw"},
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            info = json.loads(result.stdout)
        except json.JSONDecodeError:
            info = {}
        if result.returncode != 0 or "Dir" not in info:
            detail = info.get("Error") or result.stderr.strip() or result.stdout.strip()
            raise HarnessError(f"go mod download {module}@{version} failed: {detail}")
        return Path(info["Dir"])

    def crd_files(self) -> list[Path]:
        files = []
        for source in CRD_SOURCES:
            directory = self.module_dir(source.module, source.version)
            for relative in source.paths:
                path = directory / relative
                if not path.is_file():
                    raise HarnessError(f"{source.module}@{source.version} has no {relative}")
                files.append(path)
        return files


# --------------------------------------------------------------------------
# PKI, kubeconfig
# --------------------------------------------------------------------------


def run_openssl(args: Sequence[str], cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise HarnessError(f"openssl {args[0]} failed: {result.stderr.strip()}")


class Pki:
    """A throw-away CA and the certificates the components need (openssl only)."""

    def __init__(self, directory: Path):
        self.dir = directory

    def path(self, name: str) -> Path:
        return self.dir / name

    def ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        if not self.path("ca.crt").exists():
            run_openssl(
                [
                    "req",
                    "-x509",
                    "-new",
                    "-nodes",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                    "-keyout",
                    "ca.key",
                    "-out",
                    "ca.crt",
                    "-days",
                    "3650",
                    "-subj",
                    "/CN=gpuops-harness-ca",
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
                ],
                self.dir,
            )
        server_names = (
            "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
            "DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.0.0.1"
        )
        self._leaf("apiserver", "/CN=kube-apiserver", "serverAuth", server_names)
        self._leaf("admin", "/O=system:masters/CN=gpuops-harness-admin", "clientAuth")
        # The apiserver's client identity towards "kubelets" (kwok) for logs.
        self._leaf(
            "apiserver-kubelet-client",
            "/O=system:masters/CN=kube-apiserver-kubelet-client",
            "clientAuth",
        )
        self._leaf("kwok", "/CN=kwok", "serverAuth", "DNS:localhost,IP:127.0.0.1")
        if not self.path("sa.key").exists():
            # RSA: the service-account token signer's most common key type.
            run_openssl(["genrsa", "-out", "sa.key", "2048"], self.dir)
            run_openssl(["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"], self.dir)

    def _leaf(self, name: str, subject: str, usage: str, alt_names: str | None = None) -> None:
        if self.path(f"{name}.crt").exists():
            return
        extensions = [
            "basicConstraints=critical,CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            f"extendedKeyUsage={usage}",
        ]
        if alt_names:
            extensions.append(f"subjectAltName={alt_names}")
        self.path(f"{name}.ext").write_text("\n".join(extensions) + "\n")
        run_openssl(
            [
                "req",
                "-new",
                "-nodes",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-keyout",
                f"{name}.key",
                "-out",
                f"{name}.csr",
                "-subj",
                subject,
            ],
            self.dir,
        )
        run_openssl(
            [
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                f"{name}.crt",
                "-days",
                "3650",
                "-extfile",
                f"{name}.ext",
            ],
            self.dir,
        )


def write_kubeconfig(path: Path, server: str, pki: Pki, user: str = "admin") -> None:
    """A self-contained kubeconfig (embedded data) so it works from any directory."""

    def b64(name: str) -> str:
        return base64.b64encode(pki.path(name).read_bytes()).decode()

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpuops-harness",
                "cluster": {"server": server, "certificate-authority-data": b64("ca.crt")},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(f"{user}.crt"),
                    "client-key-data": b64(f"{user}.key"),
                },
            }
        ],
        "contexts": [
            {
                "name": "gpuops-harness",
                "context": {"cluster": "gpuops-harness", "user": user},
            }
        ],
        "current-context": "gpuops-harness",
    }
    # JSON is valid YAML, and every kubeconfig reader accepts it.
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


# --------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat: guards against a recycled pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may contain spaces; fields after it are fixed.
    fields = stat[stat.rfind(")") + 2 :].split()
    if fields and fields[0] == "Z":  # a zombie has exited already
        return None
    return fields[19] if len(fields) > 19 else None


def reap(pid: int) -> None:
    """Collect an exited child of this process (pytest starts the components)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # Same option the Go servers use, so TIME_WAIT leftovers do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def tail(path: Path, lines: int = 25) -> str:
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(content[-lines:])


class Supervisor:
    """Processes started in their own sessions, recorded by pid and start time, with logs.

    Used for the harness's components and for any daemon a test starts on its own (the
    real node's CRI-O can run without the rest): <state>/pids/<name>.pid, <state>/logs/<name>.log.
    """

    def __init__(self, state_dir: Path):
        self.state_dir = state_dir
        self.logs_dir = state_dir / "logs"
        self.pids_dir = state_dir / "pids"

    def pid_file(self, name: str) -> Path:
        return self.pids_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def recorded_pid(self, name: str) -> int | None:
        """The pid of a component that is still the process we started."""
        try:
            pid_text, start_time = self.pid_file(name).read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        reap(pid)
        return pid if process_start_time(pid) == start_time else None

    def spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_file(name)
        with log_file.open("ab") as sink:
            sink.write(f"\n==== {dt.datetime.now().isoformat()} {' '.join(args)}\n".encode())
            sink.flush()
            process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.state_dir,
                env={**os.environ, **(env or {})},
                # Own session = own process group: `down` signals the group,
                # and a Ctrl-C in the terminal does not reach the cluster.
                start_new_session=True,
            )
        start_time = process_start_time(process.pid) or "0"
        self.pid_file(name).write_text(f"{process.pid} {start_time}\n")

    def stop(
        self, name: str, timeout: float = 20.0, ports: dict[str, int] | None = None, whole_group: bool = True
    ) -> None:
        """SIGTERM the process (its whole group by default), SIGKILL it if it lingers,
        then wait until its ports are closed so the next start can bind them."""
        pid = self.recorded_pid(name)
        if pid is None:
            self.pid_file(name).unlink(missing_ok=True)
            return
        send = os.killpg if whole_group else os.kill
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            try:
                send(pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and self.recorded_pid(name) == pid:
                time.sleep(0.1)
            if self.recorded_pid(name) != pid:
                break
            if sig == signal.SIGTERM:
                log(f"{name} (pid {pid}) ignored SIGTERM for {timeout:.0f}s; killing it")
        else:
            log(f"warning: {name} (pid {pid}) survived SIGKILL")
        self.pid_file(name).unlink(missing_ok=True)
        for port_name, port in (ports or {}).items():
            deadline = time.monotonic() + 30
            while not port_is_free(port) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not port_is_free(port):
                log(f"warning: port {port} ({port_name}) is still in use after stopping {name}")

    def wait_ready(self, name: str, probe, timeout: float) -> None:
        """Poll `probe()` until true; fail early when the process has died."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if self.recorded_pid(name) is None:
                raise HarnessError(
                    f"{name} exited during start-up; last lines of {self.log_file(name)}:\n"
                    f"{tail(self.log_file(name))}"
                )
            try:
                if probe():
                    return
            except (OSError, urllib.error.URLError, subprocess.SubprocessError) as exc:
                last_error = str(exc)
            time.sleep(0.2)
        raise HarnessError(
            f"{name} was not ready within {timeout:.0f}s ({last_error or 'probe failed'}); "
            f"last lines of {self.log_file(name)}:\n{tail(self.log_file(name))}"
        )


@dataclass
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    endpoint: str
    log_file: Path


# --------------------------------------------------------------------------
# CRI log format (what kwok serves for `kubectl logs`)
# --------------------------------------------------------------------------

CRI_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d) (stdout|stderr) [FP] ")


def to_cri_log(
    text: str,
    stream: str = "stdout",
    start: dt.datetime | None = None,
    step: dt.timedelta = dt.timedelta(milliseconds=1),
) -> str:
    """Turn plain text into CRI log lines (`<RFC3339Nano> stdout F <line>`).

    kwok serves container logs from files in CRI or Docker JSON format only;
    plain text answers "unsupported log format". Text already in CRI or
    Docker JSON form is returned unchanged. Timestamps start at `start`
    (default: now) and advance by `step` per line, so `--timestamps` and
    `--since` behave plausibly.
    """
    if stream not in ("stdout", "stderr"):
        raise ValueError("stream must be stdout or stderr")
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    if CRI_LINE.match(first) or first.startswith('{"log":'):
        return text if text.endswith("\n") or not text else text + "\n"
    moment = start or dt.datetime.now(dt.UTC)
    out = []
    for line in lines:
        stamp = moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
        out.append(f"{stamp} {stream} F {line}\n")
        moment += step
    return "".join(out)


# --------------------------------------------------------------------------
# The harness
# --------------------------------------------------------------------------


class Harness:
    """Start, inspect and stop the control plane described in the module docstring."""

    def __init__(self, config: HarnessConfig | None = None):
        self.config = config or HarnessConfig.from_environment()
        self.state_dir = self.config.state_dir
        self.builder = Builder(self.config.cache_dir)
        self.pki = Pki(self.state_dir / "pki")
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.processes = Supervisor(self.state_dir)
        self.logs_dir = self.processes.logs_dir
        self.pids_dir = self.processes.pids_dir
        self.state_file = self.state_dir / "state.json"
        self._bin_dir: Path | None = None
        self._real_node = None

    @property
    def real_node(self):
        """The real kubelet + CRI-O node (real_node.py), up only when asked for."""
        if self._real_node is None:
            from real_node import RealNode

            self._real_node = RealNode(self)
        return self._real_node

    def real_node_present(self) -> bool:
        """Whether a real node was started from this state directory (up or partly)."""
        return (self.state_dir / "real-node" / "state.json").exists()

    # ---- state ----------------------------------------------------------

    def _load_state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    @property
    def ports(self) -> dict[str, int]:
        """Ports of the running cluster if there is one, else the configured ones."""
        return self._load_state().get("ports") or self.config.ports

    @property
    def bin_dir(self) -> Path:
        if self._bin_dir is None:
            recorded = self._load_state().get("bin_dir")
            if recorded and self.is_up():
                self._bin_dir = Path(recorded)
            else:
                self._bin_dir = self.builder.bin_dir()
        return self._bin_dir

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def server_url(self) -> str:
        return f"https://{LOOPBACK}:{self.ports['kube-apiserver']}"

    # ---- processes (see Supervisor) ---------------------------------------

    def _log_file(self, name: str) -> Path:
        return self.processes.log_file(name)

    def _recorded_pid(self, name: str) -> int | None:
        return self.processes.recorded_pid(name)

    def _spawn(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        self.processes.spawn(name, args, env)

    def _stop(self, name: str, timeout: float = 20.0) -> None:
        self.processes.stop(
            name, timeout, ports={port: self.ports[port] for port in COMPONENT_PORTS.get(name, ())}
        )

    def _wait_ready(self, name: str, probe, timeout: float) -> None:
        self.processes.wait_ready(name, probe, timeout)

    def _https_ok(self, url: str, client_cert: bool = True, verify: bool = True) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki.path("ca.crt")))
        if not verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if client_cert:
            context.load_cert_chain(self.pki.path("admin.crt"), self.pki.path("admin.key"))
        with urllib.request.urlopen(url, context=context, timeout=3) as response:
            return response.status == 200 and response.read().strip() == b"ok"

    @staticmethod
    def _http_ok(url: str, expect: bytes = b"ok") -> bool:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.status == 200 and expect in response.read()

    # ---- kubectl --------------------------------------------------------

    def kubectl_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            # kubectl's discovery cache would otherwise land in ~/.kube/cache.
            "KUBECACHEDIR": str(self.state_dir / "kube-cache"),
        }

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        command = [str(self.binary("kubectl")), *args]
        result = subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            env=self.kubectl_env(),
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise HarnessError(
                f"kubectl {' '.join(args)} failed (exit {result.returncode}): "
                f"{result.stderr.strip() or result.stdout.strip()}"
            )
        return result

    def apply(self, documents: Iterable[dict], field_manager: str = "gpuops-harness") -> None:
        """Server-side apply (client-side apply rejects the large Kubeflow CRDs)."""
        payload = {"apiVersion": "v1", "kind": "List", "items": list(documents)}
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            f"--field-manager={field_manager}",
            "-f",
            "-",
            input=json.dumps(payload),
        )

    # ---- lifecycle ------------------------------------------------------

    def build(self, force: bool = False) -> Path:
        self._bin_dir = self.builder.build(force=force)
        return self._bin_dir

    def status(self) -> list[ComponentStatus]:
        ports = self.ports
        endpoints = {
            "etcd": f"http://{LOOPBACK}:{ports['etcd']}",
            "kube-apiserver": self.server_url,
            "kube-controller-manager": f"https://{LOOPBACK}:{ports['kube-controller-manager']}",
            "kube-scheduler": f"https://{LOOPBACK}:{ports['kube-scheduler']}",
            "kwok": f"https://{LOOPBACK}:{ports['kwok']}",
            "training-operator": f"http://{LOOPBACK}:{ports['training-operator-health']}",
            "node-leases": "kube-node-lease (renewed every 10s)",
            "real-node-coredns": f"{LOOPBACK}:{ports['real-node-coredns-ready']}/ready",
            "real-node-crio": "crictl (real node)",
            "real-node-kubelet": f"{LOOPBACK}:{ports['real-node-kubelet-healthz']}/healthz",
        }
        statuses = []
        names = START_ORDER + (self.real_node.COMPONENTS if self.real_node_present() else ())
        for name in names:
            pid = self._recorded_pid(name)
            statuses.append(
                ComponentStatus(name, pid, pid is not None, endpoints[name], self._log_file(name))
            )
        return statuses

    def is_up(self) -> bool:
        if not self._load_state().get("ready"):
            return False
        if not all(component.running for component in self.status() if component.name in START_ORDER):
            return False
        try:
            return self._https_ok(f"{self.server_url}/readyz")
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return False

    def up(self) -> bool:
        """Start everything; returns False when it was already up (a no-op)."""
        with exclusive_lock(self.state_dir / "lifecycle.lock", "harness up/down"):
            return self._up()

    def down(self, quiet: bool = False) -> None:
        """Stop in reverse order, waiting for each exit (an apiserver that
        outlives etcd keeps its port for a minute)."""
        with exclusive_lock(self.state_dir / "lifecycle.lock", "harness up/down"):
            self._down(quiet)

    def _up(self) -> bool:
        started = time.monotonic()
        if self.is_up():
            log(f"already up: {self.kubeconfig}")
            return False
        if any(component.running for component in self.status()):
            log("a previous harness is partly running; stopping it first")
            self._down()
        self.build()
        self._check_ports_free()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(
            json.dumps({"ready": False, "ports": self.config.ports, "bin_dir": str(self.bin_dir)})
        )
        try:
            with self._step("certificates, kubeconfig, CRD modules"):
                self.pki.ensure()
                write_kubeconfig(self.kubeconfig, self.server_url, self.pki)
                crd_files = self.builder.crd_files()
            with self._step("etcd"):
                self._start_etcd()
            with self._step("kube-apiserver"):
                self._start_apiserver()
            # The controllers start while the CRDs are installed; kwok (Logs)
            # and the operator (PyTorchJob, MPIJob) need the CRDs first.
            self._start_controller_manager()
            self._start_scheduler()
            with self._step("CRDs Established"):
                self._install_crds(crd_files)
            with self._step("kube-controller-manager, kube-scheduler"):
                self._wait_controller_manager()
                self._wait_scheduler()
            with self._step("kwok"):
                self._start_kwok()
            with self._step("training-operator"):
                self._start_training_operator()
            with self._step(f"{len(self.config.nodes)} simulated nodes Ready"):
                self.create_nodes(self.config.nodes)
            with self._step("node Lease renewer"):
                self._start_node_leases()
        except BaseException:
            log("start-up failed; stopping what was started")
            self._down(quiet=True)
            raise
        self.state_file.write_text(
            json.dumps(
                {
                    "ready": True,
                    "ports": self.config.ports,
                    "bin_dir": str(self.bin_dir),
                    "started_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "nodes": [node.name for node in self.config.nodes],
                },
                indent=2,
            )
        )
        log(f"up in {time.monotonic() - started:.1f}s")
        return True

    @staticmethod
    @contextlib.contextmanager
    def _step(what: str):
        started = time.monotonic()
        yield
        log(f"{what}: ready in {time.monotonic() - started:.1f}s")

    def _down(self, quiet: bool = False) -> None:
        # The real node first: its kubelet and CoreDNS talk to the API server.
        if self.real_node_present() or any(self._recorded_pid(name) for name in self.real_node.COMPONENTS):
            self.real_node._down(quiet=quiet, delete_node=False)
        for name in reversed(START_ORDER):
            if self._recorded_pid(name) is not None and not quiet:
                log(f"stopping {name}")
            self._stop(name)
        if self.state_file.exists():
            self.state_file.unlink()
        # etcd data is per session: a fresh cluster every `up`.
        shutil.rmtree(self.state_dir / "etcd-data", ignore_errors=True)

    def _check_ports_free(self) -> None:
        by_port: dict[int, list[str]] = {}
        for name, port in self.config.ports.items():
            by_port.setdefault(port, []).append(name)
        shared = [f"{port} ({' and '.join(names)})" for port, names in by_port.items() if len(names) > 1]
        if shared:
            raise HarnessError(f"the same port is configured twice: {', '.join(shared)}")
        busy = [f"{name} port {port}" for name, port in self.config.ports.items() if not port_is_free(port)]
        if busy:
            variables = ", ".join(
                "GPUOPS_HARNESS_PORT_" + name.upper().replace("-", "_") for name in self.config.ports
            )
            raise HarnessError(
                f"127.0.0.1 ports already in use: {', '.join(busy)}. Stop whatever holds "
                f"them (`ss -ltnp`), or choose other ports with {variables}"
            )

    # ---- components -----------------------------------------------------

    def _start_etcd(self) -> None:
        ports = self.ports
        data_dir = self.state_dir / "etcd-data"
        shutil.rmtree(data_dir, ignore_errors=True)
        client = f"http://{LOOPBACK}:{ports['etcd']}"
        peer = f"http://{LOOPBACK}:{ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(self.binary("etcd")),
                "--name=harness",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=harness={peer}",
                # Test data: durability is not worth the fsync latency.
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_ready("etcd", lambda: self._http_ok(f"{client}/health", b'"health":"true"'), 60)

    def _start_apiserver(self) -> None:
        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                str(self.binary("kube-apiserver")),
                f"--etcd-servers=http://{LOOPBACK}:{self.ports['etcd']}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={self.ports['kube-apiserver']}",
                f"--tls-cert-file={pki.path('apiserver.crt')}",
                f"--tls-private-key-file={pki.path('apiserver.key')}",
                f"--client-ca-file={pki.path('ca.crt')}",
                f"--service-account-key-file={pki.path('sa.pub')}",
                f"--service-account-signing-key-file={pki.path('sa.key')}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--service-cluster-ip-range=10.0.0.0/24",
                # No kube-proxy or real endpoints: do not publish 127.0.0.1 as the
                # `kubernetes` service endpoint.
                "--endpoint-reconciler-type=none",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                # kwok plays the kubelets; the apiserver fetches logs from it.
                f"--kubelet-client-certificate={pki.path('apiserver-kubelet-client.crt')}",
                f"--kubelet-client-key={pki.path('apiserver-kubelet-client.key')}",
                f"--kubelet-certificate-authority={pki.path('ca.crt')}",
                "--kubelet-preferred-address-types=InternalIP",
            ],
        )
        self._wait_ready("kube-apiserver", lambda: self._https_ok(f"{self.server_url}/readyz"), 120)

    def _install_crds(self, files: list[Path]) -> None:
        args = ["apply", "--server-side", "--force-conflicts", "--field-manager=gpuops-harness"]
        for path in files:
            args += ["-f", str(path)]
        self.kubectl(*args)
        self.wait_crds_established(ALL_CRD_NAMES)

    def wait_crds_established(self, names, timeout: float = 60) -> None:
        """Wait for CRDs to be Established. kubectl wait fails at once ("accessor error: <nil>")
        on a CRD whose status has no conditions yet, just after it was created: ask again."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.kubectl("wait", "--for=condition=Established", "--timeout=%ds" % max(1, timeout),
                             *[f"crd/{name}" for name in names])  # fmt: skip
                return
            except HarnessError as error:
                if "accessor error" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def _component_security_args(self, name: str) -> list[str]:
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.ports[name]}",
            f"--cert-dir={self.state_dir / 'certs' / name}",
            "--leader-elect=false",
            "--profiling=false",
        ]

    def _start_controller_manager(self) -> None:
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binary("kube-controller-manager")),
                *self._component_security_args("kube-controller-manager"),
                f"--service-account-private-key-file={self.pki.path('sa.key')}",
                f"--root-ca-file={self.pki.path('ca.crt')}",
                f"--cluster-signing-cert-file={self.pki.path('ca.crt')}",
                f"--cluster-signing-key-file={self.pki.path('ca.key')}",
                "--use-service-account-credentials=false",
            ],
        )

    def _wait_controller_manager(self) -> None:
        url = f"https://{LOOPBACK}:{self.ports['kube-controller-manager']}/healthz"
        self._wait_ready(
            "kube-controller-manager", lambda: self._https_ok(url, client_cert=False, verify=False), 60
        )
        # Pods are rejected until the serviceaccount controller made `default`.
        self._wait_ready(
            "kube-controller-manager",
            lambda: self.kubectl("get", "serviceaccount", "default", check=False).returncode == 0,
            60,
        )

    def _start_scheduler(self) -> None:
        self._spawn(
            "kube-scheduler",
            [
                str(self.binary("kube-scheduler")),
                *self._component_security_args("kube-scheduler"),
            ],
        )

    def _wait_scheduler(self) -> None:
        url = f"https://{LOOPBACK}:{self.ports['kube-scheduler']}/healthz"
        self._wait_ready("kube-scheduler", lambda: self._https_ok(url, client_cert=False, verify=False), 60)

    def _start_kwok(self) -> None:
        port = self.ports["kwok"]
        self._spawn(
            "kwok",
            [
                str(self.binary("kwok")),
                f"--kubeconfig={self.kubeconfig}",
                # Only Stage documents: a KwokConfiguration here would switch off
                # every option default, log serving included.
                *(f"--config={stage}" for stage in sorted(KWOK_STAGES_DIR.glob("*.yaml"))),
                f"--manage-nodes-with-annotation-selector={'='.join(KWOK_NODE_ANNOTATION)}",
                f"--node-ip={LOOPBACK}",
                f"--node-port={port}",
                f"--server-address={LOOPBACK}:{port}",
                f"--tls-cert-file={self.pki.path('kwok.crt')}",
                f"--tls-private-key-file={self.pki.path('kwok.key')}",
                "--enable-crds=Logs,ClusterLogs",
                "--cidr=10.244.0.1/16",
            ],
            env={"HOME": str(self.state_dir / "kwok-home")},
        )
        url = f"https://{LOOPBACK}:{port}/healthz"
        self._wait_ready("kwok", lambda: self._https_ok(url, client_cert=False), 60)

    def _init_container_template(self) -> Path:
        """The init container template the collection's training_operator role gives a cluster's
        operator (requests equal to limits), from the same module, so that a PyTorchJob with a
        Master fits a Guaranteed namespace here as it does there."""
        spec = importlib.util.spec_from_file_location(
            "operator_init_container", REPO_ROOT / "plugins" / "module_utils" / "operator_init_container.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        path = self.state_dir / "training-operator" / module.TEMPLATE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(module.init_container_template(*OPERATOR_INIT_CONTAINER_RESOURCES))
        return path

    def _start_training_operator(self) -> None:
        ports = self.ports
        template = self._init_container_template()
        self._spawn(
            "training-operator",
            [
                str(self.binary(OPERATOR_BINARY)),
                f"--metrics-bind-address={LOOPBACK}:{ports['training-operator-metrics']}",
                f"--health-probe-bind-address={LOOPBACK}:{ports['training-operator-health']}",
                # Its PyTorch init container (nslookup of the master) on a local image: the
                # real node cannot pull the upstream default. kwok's pods never run it.
                f"--pytorch-init-container-image={BUSYBOX_IMAGE}",
                f"--pytorch-init-container-template-file={template}",
            ],
            env={"KUBECONFIG": str(self.kubeconfig)},
        )
        url = f"http://{LOOPBACK}:{ports['training-operator-health']}/readyz"
        self._wait_ready("training-operator", lambda: self._http_ok(url), 60)

    def stop_apiserver(self) -> None:
        """Stop only kube-apiserver, as an outage would (fault tests); etcd keeps the state."""
        self._stop("kube-apiserver")

    def start_apiserver(self) -> None:
        """Start kube-apiserver again after stop_apiserver() and wait until it is ready."""
        self._start_apiserver()

    def _start_node_leases(self) -> None:
        """Renew the simulated nodes' Leases, as kubelets would (see node_leases.py)."""
        self._spawn(
            "node-leases",
            [sys.executable, str(HARNESS_SOURCE_DIR / "node_leases.py"), f"--kubeconfig={self.kubeconfig}"],
        )
        first_node = self.config.nodes[0].name if self.config.nodes else None

        def renewed() -> bool:
            if first_node is None:
                return True
            lease = self.kubectl("get", "lease", first_node, "-n", "kube-node-lease", "-o=json", check=False)
            return lease.returncode == 0 and "renewTime" in lease.stdout

        self._wait_ready("node-leases", renewed, 60)

    def create_nodes(self, nodes: Sequence[NodeSpec], timeout: float = 60) -> None:
        """Create simulated nodes and wait until kwok reports them Ready."""
        if not nodes:
            return
        # A Node may carry its status on create (as a kubelet registers);
        # for a node that already exists status is a subresource: patch it.
        self.apply(node.manifest() for node in nodes)
        for node in nodes:
            self.kubectl(
                "patch",
                "node",
                node.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                json.dumps({"status": node.manifest()["status"]}),
            )
        self.kubectl(
            "wait",
            "--for=condition=Ready",
            f"--timeout={int(timeout)}s",
            *[f"node/{node.name}" for node in nodes],
        )

    # ---- logs -----------------------------------------------------------

    def serve_pod_log(
        self,
        namespace: str,
        pod_name: str,
        text_or_path: str | os.PathLike,
        container: str | None = None,
    ) -> Path:
        """Make `kubectl logs` return this text (or file's content) for the pod.

        Plain text is converted to CRI format; the file is written under the
        state directory and a kwok `Logs` object named like the pod points at
        it. container=None serves it for every container without its own entry.
        """
        is_path = isinstance(text_or_path, os.PathLike)
        text = Path(text_or_path).read_text() if is_path else str(text_or_path)
        target = self.state_dir / "pod-logs" / namespace / pod_name / f"{container or '_all'}.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(to_cri_log(text))

        existing = self.kubectl(
            "get", "logs.kwok.x-k8s.io", pod_name, "-n", namespace, "-o", "json", check=False
        )
        entries = []
        if existing.returncode == 0:
            entries = json.loads(existing.stdout).get("spec", {}).get("logs", [])
        wanted = [container] if container else []
        entries = [entry for entry in entries if entry.get("containers", []) != wanted]
        entry: dict = {"logsFile": str(target)}
        if container:
            entry["containers"] = [container]
        # Container-specific entries first: kwok takes the first match.
        entries.append(entry)
        entries.sort(key=lambda item: not item.get("containers"))
        self.apply(
            [
                {
                    "apiVersion": "kwok.x-k8s.io/v1alpha1",
                    "kind": "Logs",
                    "metadata": {"name": pod_name, "namespace": namespace},
                    "spec": {"logs": entries},
                }
            ]
        )
        return target


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def print_status(harness: Harness) -> bool:
    statuses = harness.status()
    rows = [("COMPONENT", "PID", "STATE", "ENDPOINT", "LOG")]
    for item in statuses:
        rows.append(
            (
                item.name,
                str(item.pid or "-"),
                "running" if item.running else "stopped",
                item.endpoint,
                str(item.log_file),
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    for row in rows:
        print("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip())
    up = harness.is_up()
    if up:
        nodes = harness.kubectl("get", "nodes", "--no-headers", check=False).stdout
        ready = sum(1 for line in nodes.splitlines() if " Ready " in f" {line} ")
        print(f"\ncluster: UP  kubeconfig: {harness.kubeconfig}  nodes ready: {ready}")
    else:
        print(f"\ncluster: DOWN  (state dir {harness.state_dir})")
    return up


def real_node_command(harness: Harness, args: argparse.Namespace) -> int:
    node = harness.real_node
    if args.real_node_command == "build":
        print(node.builder.build())
        harness.build()
    elif args.real_node_command == "up":
        node.up()
        print(harness.kubeconfig)
    elif args.real_node_command == "down":
        node.down()
    elif args.real_node_command == "restart-crio":
        node.restart_crio(args.memlock)
    elif args.real_node_command == "env":
        for name, value in node.environment().items():
            print(f"export {name}={shlex.quote(value)}")
    elif args.real_node_command == "status":
        up = node.is_up()
        state = node.state()
        print(f"real node: {'UP' if up else 'DOWN'}  name: {node.config.name}  ip: {node.config.node_ip}")
        for quirk in state.get("quirks", []):
            print(f"  workaround for {quirk['condition']}: {quirk['workaround']}")
        return 0 if up else 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Real Kubernetes control plane on 127.0.0.1 for the gpuops.training tests.",
        epilog="Environment: GPUOPS_CACHE_DIR, GPUOPS_HARNESS_DIR, GPUOPS_HARNESS_PORT_<NAME>, "
        "GPUOPS_HARNESS_GPU_NODES, GPUOPS_HARNESS_GPUS_PER_NODE, GPUOPS_HARNESS_RDMA_PER_NODE.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="compile the binaries into the cache (idempotent)")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    up = commands.add_parser("up", help="build if needed, start everything, print the kubeconfig path")
    up.add_argument(
        "--real-node",
        action="store_true",
        default=os.environ.get("GPUOPS_HARNESS_REAL_NODE", "") not in ("", "0"),
        help="also start a real node (kubelet + CRI-O) beside the simulated ones "
        "(default from GPUOPS_HARNESS_REAL_NODE=1)",
    )
    commands.add_parser("down", help="stop everything in reverse order")
    commands.add_parser("status", help="show components; exit 1 when not up")
    commands.add_parser("kubeconfig", help="print the kubeconfig path")
    commands.add_parser("crds", help="download the upstream CRD modules; print the CRD files")
    real_node = commands.add_parser("real-node", help="the real kubelet + CRI-O node (see README)")
    real_node_commands = real_node.add_subparsers(dest="real_node_command", required=True)
    real_node_commands.add_parser("build", help="compile CRI-O, pinns, crictl and CoreDNS into the cache")
    real_node_commands.add_parser("up", help="start the real node beside a running control plane")
    real_node_commands.add_parser("down", help="stop it and remove its mounts, bridge, cgroups and node")
    real_node_commands.add_parser(
        "status", help="the node's components and host workarounds; exit 1 when down"
    )
    restart = real_node_commands.add_parser(
        "restart-crio", help="restart CRI-O, as its service would be (containers keep running)"
    )
    restart.add_argument(
        "--memlock", help="the daemon's memlock from now on, soft:hard in bytes or unlimited"
    )
    real_node_commands.add_parser("env", help="print the node's paths as shell variables")
    args = parser.parse_args(argv)

    try:
        harness = Harness()
        if args.command == "build":
            started = time.monotonic()
            bin_dir = harness.build(force=args.force)
            print(bin_dir)
            log(f"build step took {time.monotonic() - started:.1f}s")
        elif args.command == "up":
            harness.up()
            if args.real_node:
                harness.real_node.up()
            print(harness.kubeconfig)
        elif args.command == "real-node":
            return real_node_command(harness, args)
        elif args.command == "down":
            harness.down()
        elif args.command == "status":
            return 0 if print_status(harness) else 1
        elif args.command == "kubeconfig":
            print(harness.kubeconfig)
            if not harness.kubeconfig.exists():
                log("no kubeconfig yet: run `up` first")
                return 1
        elif args.command == "crds":
            for path in harness.builder.crd_files():
                print(path)
    except HarnessError as exc:
        print(f"k8s-harness: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
