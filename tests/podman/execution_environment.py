"""The execution environment, built for real from execution-environment.yml with no registry.

A user builds execution-environment.yml with ansible-builder on the EE base image their
organisation mirrors, and ansible-galaxy fetches the collections from Galaxy. Here neither a
registry nor Galaxy is reachable, so the same definition is built with ``ansible-builder
build --container-runtime podman`` on what this machine has:

1. ``tests/podman/build-ee-base.sh``: a Debian bookworm base from the machine's Debian mirror
   with what ansible-builder's scripts need first (python3, pip, venv, a package manager
   wrapper for the bindep file's ``[platform:dpkg]`` entries); once per machine.
2. A build definition beside a copy of the project's one, with the project's dependencies
   (ansible-core, ansible-runner, meta/ee-requirements.txt from PyPI, meta/ee-bindep.txt
   from the Debian mirror, requirements.yml) unchanged, and these local additions:

   - the collections requirements.yml names (those galaxy.yml depends on) are the copies the
     ``ansible`` package bundles in the project venv (the ones ``make test`` runs with),
     copied into the galaxy stage's collections path before ansible-galaxy runs, which then
     finds them installed (``--offline``: it asks no server);
   - this checkout's collection (``ansible-galaxy collection build``), installed offline in
     the last layer, as AWX's project sync would add it to a job: it is mounted into the
     build rather than put in the build context, whose every file is an input of the
     galaxy stage, so a changed tree rebuilds one layer and not the Python packages;
   - kubectl and helm, the binaries the harness builds from source through the Go module
     proxy (the kubernetes.core kustomize lookup of the training_operator role calls kubectl,
     kubernetes.core.helm of the gpu_operator role calls helm), copied to /usr/local/bin;
   - for the Debian base: build arguments ``EE_BASE_IMAGE`` (the override
     execution-environment.yml documents) and ``PKGMGR`` (the base's apt-get wrapper instead
     of dnf), and ``options.skip_pip_install`` (Debian disables ensurepip for its system
     Python; the base has Debian's pip).

The image is tagged with a digest of everything that goes into it, so an unchanged tree
finds it in podman's storage and builds nothing.

Usage (prints the image)::

    python tests/podman/execution_environment.py base|build
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import pathlib
import shutil
import ssl
import subprocess
import sys
import sysconfig
import tarfile

import yaml
from packaging.specifiers import SpecifierSet

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PODMAN_DIR = REPO_ROOT / "tests" / "podman"
CONTAINERS_CONF = PODMAN_DIR / "containers.conf"
BASE_SCRIPT = PODMAN_DIR / "build-ee-base.sh"
DEFINITION = REPO_ROOT / "execution-environment.yml"
GALAXY_YML = REPO_ROOT / "galaxy.yml"
WORK_DIR = REPO_ROOT / ".build" / "execution-environment"
EE_REPOSITORY = "localhost/gpuops-training-ee"
# What the image must hold beside Python: the binaries the roles call.
TOOLS = ("kubectl", "helm")
# Where ansible-builder's galaxy stage installs collections (and the final stage copies from).
COLLECTIONS_IN_IMAGE = "/usr/share/ansible/collections"
# Where the build sees this checkout's collection artifact (mounted, not in the context).
COLLECTION_MOUNT = "/gpuops-collection"
# The CA bundle of the base (Debian's ca-certificates), which Debian's pip reads.
CA_BUNDLE_IN_IMAGE = "/etc/ssl/certs/ca-certificates.crt"

sys.path.insert(0, str(REPO_ROOT / "tests" / "harness"))

from k8s_harness import Builder, HarnessConfig, HarnessError  # noqa: E402
from sources import build_helm  # noqa: E402


class ExecutionEnvironmentError(RuntimeError):
    pass


def podman_environment() -> dict[str, str]:
    return dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF") or str(CONTAINERS_CONF))


def _run(command: list[str], **options) -> subprocess.CompletedProcess:
    options.setdefault("env", podman_environment())
    result = subprocess.run(command, text=True, capture_output=True, check=False, **options)
    if result.returncode != 0:
        raise ExecutionEnvironmentError(
            "%s failed (exit %d):\n%s\n%s"
            % (" ".join(command), result.returncode, result.stdout[-6000:], result.stderr[-4000:])
        )
    return result


def _require(*tools: str) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        raise ExecutionEnvironmentError(
            "missing %s: make system-packages installs podman, runc and debootstrap" % ", ".join(missing)
        )


def image_exists(image: str) -> bool:
    return (
        subprocess.run(["podman", "image", "exists", image], env=podman_environment(), check=False).returncode
        == 0
    )


def base_image() -> str:
    """The Debian base (tests/podman/build-ee-base.sh; once per machine)."""
    _require("podman", "runc")  # the script names debootstrap when it has to build
    _run([str(BASE_SCRIPT)])
    return _run([str(BASE_SCRIPT), "--image-name"]).stdout.strip()


def package_manager() -> str:
    return _run([str(BASE_SCRIPT), "--package-manager"]).stdout.strip()


def tool_binaries() -> dict[str, pathlib.Path]:
    """kubectl and helm as the harness builds them (from the Go module proxy, cached)."""
    builder = Builder(HarnessConfig.from_environment().cache_dir)
    try:
        return {"kubectl": builder.build() / "kubectl", "helm": build_helm(builder)}
    except HarnessError as error:
        raise ExecutionEnvironmentError(f"building kubectl and helm failed: {error}") from error


def bundled_collections() -> dict[str, pathlib.Path]:
    """The collections galaxy.yml depends on, as the `ansible` package in this Python bundles
    them, each checked against the range galaxy.yml asks for."""
    site = pathlib.Path(sysconfig.get_path("purelib")) / "ansible_collections"
    found = {}
    for name, wanted in yaml.safe_load(GALAXY_YML.read_text())["dependencies"].items():
        directory = site.joinpath(*name.split("."))
        manifest = directory / "MANIFEST.json"
        if not manifest.is_file():
            raise ExecutionEnvironmentError(
                f"{name} is not in {site}: the `ansible` package of the project venv bundles it (make venv)"
            )
        version = json.loads(manifest.read_text())["collection_info"]["version"]
        if version not in SpecifierSet(wanted.replace(" ", "")):
            raise ExecutionEnvironmentError(f"{name} {version} in {site} is outside galaxy.yml's {wanted}")
        found[name] = directory
    return found


def build_collection(destination: pathlib.Path) -> pathlib.Path:
    """This checkout's collection artifact, built into DESTINATION."""
    destination.mkdir(parents=True, exist_ok=True)
    for old in destination.glob("*.tar.gz"):
        old.unlink()
    galaxy = pathlib.Path(sys.executable).parent / "ansible-galaxy"
    _run([str(galaxy), "collection", "build", "--force", "--output-path", str(destination), str(REPO_ROOT)])
    (tarball,) = destination.glob("*.tar.gz")
    return tarball


def artifact_digest(tarball: pathlib.Path) -> str:
    """What a collection artifact holds, independent of the tar's timestamps: a digest of its
    MANIFEST.json (which carries the checksum of FILES.json, which carries every file's)."""
    with tarfile.open(tarball) as archive:
        member = archive.extractfile("MANIFEST.json")
        assert member is not None
        return hashlib.sha256(member.read()).hexdigest()[:12]


def _copy_collection(source: pathlib.Path, destination: pathlib.Path) -> None:
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _dependency_files() -> list[str]:
    """The project definition's galaxy, Python and bindep files, relative to it."""
    dependencies = yaml.safe_load(DEFINITION.read_text())["dependencies"]
    return [dependencies[key] for key in ("galaxy", "python", "system")]


def build_definition(work: pathlib.Path, artifact: str) -> dict:
    """The project's definition with the local additions of the module docstring; ARTIFACT is
    the collection tarball's path under COLLECTION_MOUNT. The definition's dependency files
    are copied beside it, under the same relative names."""
    definition = yaml.safe_load(DEFINITION.read_text())
    for relative in _dependency_files():
        (work / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / relative, work / relative)
    definition["additional_build_files"] = [
        *definition.get("additional_build_files", []),
        {"src": "files/collections", "dest": "collections"},
        {"src": "files/tools", "dest": "tools"},
    ]
    steps = definition.setdefault("additional_build_steps", {})
    # requirements.yml's collections, already installed: ansible-galaxy --offline finds them.
    steps["prepend_galaxy"] = [
        *steps.get("prepend_galaxy", []),
        f"COPY _build/collections/ansible_collections {COLLECTIONS_IN_IMAGE}/ansible_collections",
    ]
    # The collection itself last, as AWX's project sync would add it: a changed tree rebuilds
    # this layer only (everything under _build is an input of the galaxy stage and all after).
    steps["append_final"] = [
        *steps.get("append_final", []),
        "COPY _build/tools/ /usr/local/bin/",
        "RUN ansible-galaxy collection install --offline -p %s %s/%s"
        % (COLLECTIONS_IN_IMAGE, COLLECTION_MOUNT, artifact),
    ]
    # Debian disables ensurepip for its system Python: the base brings pip from Debian instead.
    definition.setdefault("options", {})["skip_pip_install"] = True
    return definition


def build_arguments(base: str) -> dict[str, str]:
    return {
        "EE_BASE_IMAGE": base,
        "PKGMGR": package_manager(),
        # Galaxy cannot be reached: the requirements are all local.
        "ANSIBLE_GALAXY_CLI_COLLECTION_OPTS": "--offline",
    }


def _digest(work: pathlib.Path, arguments: dict[str, str]) -> str:
    """Everything that goes into the image (the collection artifact by its own digest, which
    names its directory under files-mounted)."""
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True).encode())
    digest.update(importlib.metadata.version("ansible-builder").encode())
    inputs = [work / "execution-environment.yml", *(work / relative for relative in _dependency_files())]
    inputs += (work / "files").rglob("*")
    for path in sorted(inputs):
        if path.is_file():
            digest.update(("%s %o\n" % (path.relative_to(work).as_posix(), path.stat().st_mode)).encode())
            with path.open("rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()[:12]


def prepare(work: pathlib.Path = WORK_DIR) -> tuple[pathlib.Path, dict[str, str], str]:
    """Write the build definition and its files into WORK; return the definition's path, the
    build arguments and the image's tag."""
    base = base_image()
    tools = tool_binaries()
    collections = bundled_collections()
    for stale in ("files", "files-mounted", "execution-environment.yml", *_dependency_files()):
        path = work / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    staging = build_collection(work / "collection-build")
    artifact = "%s/%s" % (artifact_digest(staging), staging.name)
    (work / "files-mounted" / artifact).parent.mkdir(parents=True)
    staging.rename(work / "files-mounted" / artifact)
    files = work / "files"
    for name, directory in collections.items():
        _copy_collection(directory, files / "collections" / "ansible_collections" / name.replace(".", "/"))
    (files / "tools").mkdir(parents=True)
    for name, binary in tools.items():
        shutil.copy2(binary, files / "tools" / name)
    definition = work / "execution-environment.yml"
    definition.write_text(yaml.safe_dump(build_definition(work, artifact), sort_keys=False))
    arguments = build_arguments(base)
    return definition, arguments, "%s:%s" % (EE_REPOSITORY, _digest(work, arguments))


def host_ca_bundle() -> pathlib.Path:
    """The certificate authorities this machine's pip trusts."""
    for candidate in (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        ssl.get_default_verify_paths().cafile,
    ):
        if candidate and pathlib.Path(candidate).is_file():
            return pathlib.Path(candidate).resolve()
    raise ExecutionEnvironmentError("no CA bundle found for pip: set PIP_CERT or SSL_CERT_FILE")


def build(work: pathlib.Path = WORK_DIR) -> str:
    """The execution environment image; ansible-builder runs only when an input changed."""
    definition, arguments, image = prepare(work)
    if image_exists(image):
        return image
    context = work / "context"
    shutil.rmtree(context, ignore_errors=True)
    command = [
        str(pathlib.Path(sys.executable).parent / "ansible-builder"),
        "build",
        "--file",
        str(definition),
        "--context",
        str(context),
        "--tag",
        image,
        "--container-runtime",
        "podman",
        "--output-filename",
        "Containerfile",
        "--verbosity",
        "2",
    ]
    for name, value in arguments.items():
        command += ["--build-arg", f"{name}={value}"]
    # pip in the build trusts what this machine trusts (a proxy's certificate authority, say):
    # the host's bundle is mounted over the image's during the build, not copied into it.
    volumes = [
        f"{host_ca_bundle()}:{CA_BUNDLE_IN_IMAGE}:ro",
        f"{work / 'files-mounted'}:{COLLECTION_MOUNT}:ro",
    ]
    command += ["--extra-build-cli-args", " ".join("--volume " + volume for volume in volumes)]
    log = work / "build.log"
    with log.open("w") as stream:
        result = subprocess.run(
            command, cwd=work, env=podman_environment(), stdout=stream, stderr=subprocess.STDOUT, check=False
        )
    if result.returncode != 0:
        raise ExecutionEnvironmentError(
            "ansible-builder build failed (exit %d); the end of %s:\n%s"
            % (result.returncode, log, _tail(log))
        )
    return image


def _tail(path: pathlib.Path, characters: int = 6000) -> str:
    with open(path, errors="replace") as stream:
        return stream.read()[-characters:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("what", choices=["base", "build"])
    options = parser.parse_args(argv)
    try:
        print(base_image() if options.what == "base" else build())
    except ExecutionEnvironmentError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
