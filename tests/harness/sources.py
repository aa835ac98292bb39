"""Helm and the upstream install sources the cluster-role tests apply to the harness.

Like the CRDs (k8s_harness.CRD_SOURCES), everything comes from Go modules through the
module proxy, at exact versions, into the harness's module cache; nothing is committed:

- helm, built from ``helm.sh/helm/v3`` into ``$GPUOPS_CACHE_DIR/helm/<version>/helm``
  (its own versioned directory: the harness's build key and binaries are untouched);
- the Kubeflow Training Operator v1 and Kubeflow Trainer v2 install manifests, as
  kustomization directories over the modules' ``manifests/`` trees, rendered by the
  role under test (or ``kubectl kustomize``);
- the NVIDIA GPU Operator Helm chart (``deployments/gpu-operator``) of the module the
  ClusterPolicy CRD comes from;
- the OLM CRDs (Subscription, OperatorGroup, ClusterServiceVersion) from
  ``github.com/operator-framework/api``, which the harness does not install.

The harness runs no admission webhook servers (no operator pod really runs: kwok plays
the kubelets). The upstream manifests register webhooks with ``failurePolicy: Fail`` for
PyTorchJobs, TrainJobs, JobSets and JobSet pods; applied as they are, they would make the
API server reject those objects for every other test sharing the cluster. The
kustomizations written here therefore narrow every webhook to objects labelled
``gpuops.test/admission-webhooks=enabled``, which nothing carries.

Usage::

    python tests/harness/sources.py helm                    # build if needed, print the path
    python tests/harness/sources.py chart                   # print the GPU Operator chart dir
    python tests/harness/sources.py olm-crds                # print the OLM CRD files
    python tests/harness/sources.py manifests NAME DIR      # write a kustomization into DIR
    python tests/harness/sources.py render NAME FILE        # the same, rendered into one YAML file

NAME is ``training-operator-v1`` or ``trainer-v2``. Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from k8s_harness import (  # noqa: E402
    CRD_SOURCES,
    TRAINING_OPERATOR_VERSION,
    Builder,
    Harness,
    HarnessConfig,
    HarnessError,
    exclusive_lock,
    log,
)

HELM_MODULE = "helm.sh/helm/v3"
# An exact tag: the module proxy here refuses @latest and version lists.
HELM_VERSION = "v3.20.0"
# The Kubernetes minor version helm's lint and capabilities default to (its go.mod's k8s.io/* v0.35).
HELM_K8S_MINOR = "35"

TRAINER_MODULE = ("github.com/kubeflow/trainer/v2", "v2.1.0")
TRAINING_OPERATOR_MODULE = ("github.com/kubeflow/training-operator", TRAINING_OPERATOR_VERSION)
# Trainer v2's own overlay fetches JobSet's release manifest from GitHub; the same
# manifests come from JobSet's module (config/default), tagged with the release version.
# Image names are read from the upstream manifests (see _image_named): no registry host is
# written here; kwok never pulls them anyway.
JOBSET_MODULE = ("sigs.k8s.io/jobset", "v0.10.1")
OLM_API_MODULE = ("github.com/operator-framework/api", "v0.27.0")
OLM_CRD_FILES = (
    "crds/operators.coreos.com_subscriptions.yaml",
    "crds/operators.coreos.com_operatorgroups.yaml",
    "crds/operators.coreos.com_clusterserviceversions.yaml",
)
OLM_CRD_NAMES = (
    "subscriptions.operators.coreos.com",
    "operatorgroups.operators.coreos.com",
    "clusterserviceversions.operators.coreos.com",
)
GPU_OPERATOR_SOURCE = next(
    source for source in CRD_SOURCES if source.module == "github.com/NVIDIA/gpu-operator"
)

# The label every upstream webhook is narrowed to (see the module docstring).
WEBHOOK_GATE_LABEL = ("gpuops.test/admission-webhooks", "enabled")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
MANIFEST_NAMES = ("training-operator-v1", "trainer-v2")


def cache_root(builder: Builder) -> Path:
    """$GPUOPS_CACHE_DIR (the harness keeps its own files in <it>/harness)."""
    return builder.cache_dir.parent


def helm_path(builder: Builder) -> Path:
    return cache_root(builder) / "helm" / HELM_VERSION / "helm"


def helm_ldflags() -> str:
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"]
    flags.append("-X helm.sh/helm/v3/internal/version.gitTreeState=clean")
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {package}.k8sVersionMajor=1", f"-X {package}.k8sVersionMinor={HELM_K8S_MINOR}"]
    return " ".join(flags)


def build_helm(builder: Builder) -> Path:
    """Build helm once per version (idempotent); returns the binary.

    `go install MODULE/cmd/helm@VERSION` outside any module, with the harness's module
    and build caches, so the shared Kubernetes dependencies download only once.
    """
    target = helm_path(builder)
    with exclusive_lock(target.parent.parent / "build.lock", "helm build"):
        started = time.monotonic()
        if target.exists():
            log(f"helm {HELM_VERSION} up to date in {target} ({time.monotonic() - started:.1f}s)")
            return target
        target.parent.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="helm-", dir=target.parent.parent))
        try:
            log(f"building helm {HELM_VERSION} into {target} (a few minutes the first time)")
            env = builder.go_environment() | {"GOFLAGS": "-modcacherw", "GOBIN": str(staging)}
            result = subprocess.run(
                [
                    builder.go,
                    "install",
                    "-trimpath",
                    "-ldflags",
                    helm_ldflags(),
                    f"{HELM_MODULE}/cmd/helm@{HELM_VERSION}",
                ],
                cwd=staging,
                env=env,
                check=False,
            )
            if result.returncode != 0 or not (staging / "helm").exists():
                raise HarnessError(
                    f"go install {HELM_MODULE}/cmd/helm@{HELM_VERSION} failed (exit {result.returncode})"
                )
            if target.parent.exists():
                shutil.rmtree(target.parent)
            staging.rename(target.parent)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        log(f"helm built in {time.monotonic() - started:.1f}s")
        return target


def gpu_operator_chart(builder: Builder) -> Path:
    """The GPU Operator chart of the module whose ClusterPolicy CRD the harness installs."""
    chart = (
        builder.module_dir(GPU_OPERATOR_SOURCE.module, GPU_OPERATOR_SOURCE.version)
        / "deployments"
        / "gpu-operator"
    )
    if not (chart / "Chart.yaml").is_file():
        raise HarnessError(
            f"{GPU_OPERATOR_SOURCE.module}@{GPU_OPERATOR_SOURCE.version} "
            "has no deployments/gpu-operator chart"
        )
    return chart


def olm_crd_files(builder: Builder) -> list[Path]:
    directory = builder.module_dir(*OLM_API_MODULE)
    files = [directory / relative for relative in OLM_CRD_FILES]
    missing = [str(path) for path in files if not path.is_file()]
    if missing:
        raise HarnessError(f"{OLM_API_MODULE[0]}@{OLM_API_MODULE[1]} lacks {', '.join(missing)}")
    return files


def _link(directory: Path, name: str, target: Path) -> str:
    """kustomize refuses absolute resource paths: reach a module directory through a link."""
    link = directory / name
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    return name


def _write_kustomization(directory: Path, document: dict) -> None:
    # JSON is YAML; kustomize reads kustomization.yaml either way.
    (directory / "kustomization.yaml").write_text(json.dumps(document, indent=2) + "\n")


def _webhook_patches(rendered: Sequence[dict]) -> list[dict]:
    """JSON patches that narrow each webhook of each webhook configuration to the gate label."""
    selector = {"matchLabels": {WEBHOOK_GATE_LABEL[0]: WEBHOOK_GATE_LABEL[1]}}
    patches = []
    for document in rendered:
        if document.get("kind") not in WEBHOOK_KINDS:
            continue
        operations = [
            {"op": "add", "path": f"/webhooks/{index}/objectSelector", "value": selector}
            for index in range(len(document.get("webhooks") or []))
        ]
        if operations:
            patches.append(
                {
                    "target": {"kind": document["kind"], "name": document["metadata"]["name"]},
                    "patch": json.dumps(operations),
                }
            )
    return patches


def _image_named(manifests: Path, basename: str) -> str:
    """The name (without tag) of the image whose last path part is BASENAME in MANIFESTS."""
    pattern = re.compile(r"^\s*(?:-\s*)?(?:image|newName):\s*[\"']?([^\s\"':@]+(?::\d+)?(?:/[^\s\"':@]+)*)")
    for path in sorted(manifests.rglob("*.yaml")):
        for line in path.read_text(errors="replace").splitlines():
            match = pattern.match(line)
            if match and match.group(1).rsplit("/", 1)[-1] == basename:
                return match.group(1)
    raise HarnessError(f"no image named */{basename} in {manifests}")


def write_manifests(harness: Harness, name: str, directory: Path) -> Path:
    """Write a kustomization for NAME into DIRECTORY (created, contents replaced)."""
    if name not in MANIFEST_NAMES:
        raise HarnessError(f"unknown manifests {name!r}; choose from {', '.join(MANIFEST_NAMES)}")
    builder = harness.builder
    directory = directory.resolve()
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    upstream = directory / "upstream"
    upstream.mkdir()
    if name == "training-operator-v1":
        module_dir = builder.module_dir(*TRAINING_OPERATOR_MODULE)
        resources = [_link(upstream, "training-operator", module_dir / "manifests") + "/overlays/standalone"]
        resources = ["upstream/" + resource for resource in resources]
        kustomization: dict = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    else:
        # Upstream's overlays/manager, with JobSet from its module instead of a GitHub download.
        trainer = builder.module_dir(*TRAINER_MODULE) / "manifests"
        jobset = builder.module_dir(*JOBSET_MODULE) / "config"
        _link(upstream, "trainer", trainer)
        shutil.copy(trainer / "overlays" / "manager" / "namespace.yaml", directory / "namespace.yaml")
        jobset_dir = directory / "jobset"
        jobset_dir.mkdir()
        _link(jobset_dir, "upstream", jobset)
        shutil.copy(
            trainer / "third-party" / "jobset" / "patches" / "jobset_remove_namespace.yaml",
            jobset_dir / "jobset_remove_namespace.yaml",
        )
        _write_kustomization(
            jobset_dir,
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": ["upstream/default"],
                "images": [{"name": _image_named(jobset, "jobset"), "newTag": JOBSET_MODULE[1]}],
                "patches": [
                    {
                        "path": "jobset_remove_namespace.yaml",
                        "target": {"group": "", "version": "v1", "kind": "Namespace"},
                    }
                ],
            },
        )
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": "kubeflow-system",
            "images": [
                {"name": _image_named(trainer, "trainer-controller-manager"), "newTag": TRAINER_MODULE[1]}
            ],
            "secretGenerator": [
                {
                    "name": "kubeflow-trainer-webhook-cert",
                    "namespace": "kubeflow-system",
                    "options": {"disableNameSuffixHash": True},
                }
            ],
        }
        resources = ["namespace.yaml"] + [
            f"upstream/trainer/base/{part}" for part in ("crds", "manager", "rbac", "webhook")
        ]
        resources.append("jobset")
    kustomization["resources"] = resources
    _write_kustomization(directory, kustomization)
    # Render once to find the webhooks, then gate them (see the module docstring).
    rendered = render(harness, directory)
    patches = _webhook_patches(rendered)
    if patches:
        kustomization["patches"] = patches
        _write_kustomization(directory, kustomization)
    return directory


def render_file(harness: Harness, name: str, target: Path) -> Path:
    """NAME's kustomization rendered by kubectl into one multi-document YAML file."""
    with tempfile.TemporaryDirectory(prefix="manifests-") as scratch:
        directory = write_manifests(harness, name, Path(scratch) / name)
        result = harness.kubectl("kustomize", str(directory), check=False, timeout=300)
    if result.returncode != 0:
        raise HarnessError(f"kubectl kustomize {name} failed: {result.stderr.strip()}")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(result.stdout)
    return target.resolve()


def render(harness: Harness, directory: Path) -> list[dict]:
    """`kubectl kustomize DIRECTORY` as a list of objects."""
    result = harness.kubectl("kustomize", str(directory), check=False, timeout=300)
    if result.returncode != 0:
        raise HarnessError(f"kubectl kustomize {directory} failed: {result.stderr.strip()}")
    return _yaml_documents(harness, result.stdout)


def _yaml_documents(harness: Harness, text: str) -> list[dict]:
    """YAML to objects without PyYAML: the harness's kubectl converts a List to JSON."""
    result = harness.kubectl(
        "create", "--dry-run=client", "-o", "json", "-f", "-", input=text, check=False, timeout=300
    )
    if result.returncode != 0:
        raise HarnessError(f"cannot read the rendered manifests: {result.stderr.strip()}")
    # One JSON object per input document, one after the other.
    decoder, text, position, documents = json.JSONDecoder(), result.stdout, 0, []
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position == len(text):
            return documents
        document, position = decoder.raw_decode(text, position)
        documents.extend(document.get("items", [document]) if document.get("kind") == "List" else [document])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("helm", help=f"build helm {HELM_VERSION} if needed; print its path")
    commands.add_parser("chart", help="print the NVIDIA GPU Operator chart directory")
    commands.add_parser("olm-crds", help="print the OLM CRD files")
    manifests = commands.add_parser("manifests", help="write a kustomization of upstream install manifests")
    manifests.add_argument("name", choices=MANIFEST_NAMES)
    manifests.add_argument("directory", type=Path)
    rendered = commands.add_parser("render", help="render those manifests into one YAML file")
    rendered.add_argument("name", choices=MANIFEST_NAMES)
    rendered.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    try:
        builder = Builder(HarnessConfig.from_environment().cache_dir)
        if args.command == "helm":
            print(build_helm(builder))
        elif args.command == "chart":
            print(gpu_operator_chart(builder))
        elif args.command == "olm-crds":
            for path in olm_crd_files(builder):
                print(path)
        elif args.command == "manifests":
            print(write_manifests(Harness(), args.name, args.directory))
        else:
            print(render_file(Harness(), args.name, args.file))
    except HarnessError as exc:
        print(f"sources: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    os.umask(0o022)
    sys.exit(main())
