"""The trainer image for tests, built from training/Containerfile with no registry.

A user builds training/Containerfile on a CUDA PyTorch base from their registry. Here no
registry is reachable and the PyPI torch is a 6 GB CUDA build, so the tests build the same
Containerfile on a base made on this machine that borrows Python and torch from it:

1. ``tests/podman/build-trainer-base.sh``: a Debian minbase root filesystem with the shared
   libraries CPython and torch load (once per machine, a versioned tag).
2. :func:`build_base`: a thin layer on it that plays the PyTorch base. ``/opt/venv`` is a
   virtual environment whose interpreter is this machine's Python (at the same path, mounted
   read-only at run time), and whose ``.pth`` adds ``/opt/host-torch``: links to torch,
   torchvision, pip and their dependencies in the project venv's site-packages (also mounted
   read-only), and to nothing else. So the base has what a PyTorch base has, and the
   Containerfile's pip must install the rest of what training/pyproject.toml declares
   (pycocotools), from a wheelhouse made here with ``pip download``; an undeclared import
   fails the build.
3. :func:`build_trainer_image`: training/Containerfile itself on that base, offline
   (``--network none``, ``PIP_NO_INDEX``), layers cached by podman.

Run time needs :func:`runtime_mounts` (host path -> same path in the container, read-only),
for podman (``--volume``) and for pods (hostPath volumes). Everything takes a
:class:`Storage`: podman's own store by default, or the ``--root``/``--runroot`` CRI-O
reads, so an image built here is at once visible to CRI-O.

Usage (prints what it built, or the mounts as JSON)::

    python tests/podman/trainer_image.py base|build|mounts|wheelhouse [--root DIR --runroot DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import tomllib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
PODMAN_DIR = REPO_ROOT / "tests" / "podman"
CONTAINERS_CONF = PODMAN_DIR / "containers.conf"
ROOTFS_SCRIPT = PODMAN_DIR / "build-trainer-base.sh"
TRAINING_DIR = REPO_ROOT / "training"
CONTAINERFILE = TRAINING_DIR / "Containerfile"
DEFAULT_VENV = REPO_ROOT / ".venv"
CACHE_DIR = pathlib.Path(
    os.environ.get("GPUOPS_CACHE_DIR") or pathlib.Path.home() / ".cache" / "gpuops-training"
)

# The base layer's tag is this name, the Python version and a digest of what the layer holds.
BASE_REPOSITORY = "localhost/gpuops-trainer-base"
# The trainer image the tests build and run (and a real node's pods run with pull policy Never),
# tagged per checkout: several checkouts on one machine share podman's storage.
TRAINER_IMAGE = "localhost/gpuops-trainer:dev-" + hashlib.sha256(str(REPO_ROOT).encode()).hexdigest()[:8]
# Where the base keeps its environment and the links to the host's torch.
BASE_VENV = "/opt/venv"
TORCH_LINKS = "/opt/host-torch"
# What a PyTorch base brings: these distributions and everything they require.
BASE_DISTRIBUTIONS = ("torch", "torchvision", "pip")
# The wheelhouse's path inside the build.
WHEELS_IN_BUILD = "/wheels"
# The image's non-root user (training/Containerfile's defaults).
TRAINER_UID = 1000
TRAINER_GID = 1000


class TrainerImageError(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class Storage:
    """A containers storage: podman's own when both are None. podman refuses a runroot longer
    than 50 characters."""

    root: str | None = None
    runroot: str | None = None

    @classmethod
    def from_environment(cls) -> Storage:
        return cls(
            os.environ.get("GPUOPS_PODMAN_ROOT") or None, os.environ.get("GPUOPS_PODMAN_RUNROOT") or None
        )

    def podman(self) -> list[str]:
        command = ["podman"]
        if self.root:
            command += ["--root", self.root]
        if self.runroot:
            command += ["--runroot", self.runroot]
        return command

    def script_environment(self) -> dict[str, str]:
        return {"GPUOPS_PODMAN_ROOT": self.root or "", "GPUOPS_PODMAN_RUNROOT": self.runroot or ""}


@dataclasses.dataclass(frozen=True)
class Mount:
    """A read-only bind mount at the same path inside the container."""

    host_path: str
    kind: str  # "Directory" or "File", as a hostPath volume's type

    @property
    def container_path(self) -> str:
        return self.host_path

    def volume_option(self) -> str:
        return "%s:%s:ro" % (self.host_path, self.container_path)


def podman_environment() -> dict[str, str]:
    return dict(os.environ, CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF") or str(CONTAINERS_CONF))


def _run(command: list[str], **options) -> subprocess.CompletedProcess:
    options.setdefault("env", podman_environment())
    result = subprocess.run(command, text=True, capture_output=True, check=False, **options)
    if result.returncode != 0:
        raise TrainerImageError(
            "%s failed (exit %d):\n%s%s"
            % (" ".join(command), result.returncode, result.stdout[-4000:], result.stderr[-4000:])
        )
    return result


def image_exists(image: str, storage: Storage = Storage()) -> bool:
    command = [*storage.podman(), "image", "exists", image]
    return subprocess.run(command, env=podman_environment(), check=False).returncode == 0


# Runs in the venv's own interpreter: where its Python and torch are, and what the base may hold.
_DESCRIBE_VENV = r"""
import importlib.metadata as metadata, json, os, sys, sysconfig
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

site = os.path.realpath(sysconfig.get_path("purelib"))
# Each distribution with the extras asked of it (torch asks cuda-toolkit for [cublas,...]).
wanted, seen, done = [(name, "") for name in sys.argv[1:]], {}, set()
while wanted:
    name, extra = wanted.pop()
    name = canonicalize_name(name)
    if (name, extra) in done:
        continue
    done.add((name, extra))
    seen[name] = dist = metadata.distribution(name)
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
            wanted += [(requirement.name, "")] + [(requirement.name, more) for more in requirement.extras]
entries = set()
for dist in seen.values():
    for path in dist.files or []:
        if path.parts[0] not in ("..", "__pycache__") and os.path.lexists(os.path.join(site, path.parts[0])):
            entries.add(path.parts[0])
libpython = None
if sysconfig.get_config_var("Py_ENABLE_SHARED"):
    libpython = os.path.join(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("INSTSONAME"))
print(json.dumps({
    "version": "%d.%d" % sys.version_info[:2],
    "full_version": sys.version.split()[0],
    "executable": os.path.realpath(sys._base_executable),
    "stdlib": sysconfig.get_path("stdlib"),
    "libpython": libpython,
    "site_packages": site,
    "distributions": {name: dist.version for name, dist in sorted(seen.items())},
    "entries": sorted(entries),
}))
"""


@functools.lru_cache
def describe_venv(venv: pathlib.Path = DEFAULT_VENV) -> dict:
    """This machine's Python behind VENV, and the torch environment a base borrows from it
    (read once per process)."""
    python = pathlib.Path(venv) / "bin" / "python"
    if not python.exists():
        raise TrainerImageError(f"{python} does not exist: make venv first")
    return json.loads(_run([str(python), "-c", _DESCRIBE_VENV, *BASE_DISTRIBUTIONS], env=None).stdout)


def runtime_mounts(venv: pathlib.Path = DEFAULT_VENV) -> list[Mount]:
    """What an image built on the base needs mounted, read-only, at the same paths."""
    described = describe_venv(venv)
    mounts = [Mount(described["executable"], "File"), Mount(described["stdlib"], "Directory")]
    if described["libpython"]:
        mounts.append(Mount(described["libpython"], "File"))
    mounts.append(Mount(described["site_packages"], "Directory"))
    return mounts


def rootfs_image() -> str:
    return _run([str(ROOTFS_SCRIPT), "--image-name"]).stdout.strip()


def build_rootfs(storage: Storage = Storage()) -> str:
    """The Debian root filesystem (tests/podman/build-trainer-base.sh; once per machine)."""
    env = dict(podman_environment(), **storage.script_environment())
    _run([str(ROOTFS_SCRIPT)], env=env)
    return rootfs_image()


def _base_layer(described: dict, rootfs: str, context: pathlib.Path) -> str:
    """Write the base layer's build context into CONTEXT; return its Containerfile's text."""
    tree = context / "tree"
    bin_dir = tree / BASE_VENV.lstrip("/") / "bin"
    site = tree / BASE_VENV.lstrip("/") / "lib" / ("python" + described["version"]) / "site-packages"
    links = tree / TORCH_LINKS.lstrip("/")
    for directory in (bin_dir, site, links):
        directory.mkdir(parents=True)
    (tree / BASE_VENV.lstrip("/") / "pyvenv.cfg").write_text(
        "home = %s\ninclude-system-site-packages = false\nversion = %s\n"
        % (os.path.dirname(described["executable"]), described["full_version"])
    )
    (bin_dir / "python").symlink_to(described["executable"])
    for alias in ("python3", "python" + described["version"]):
        (bin_dir / alias).symlink_to("python")
    (site / "host-torch.pth").write_text(TORCH_LINKS + "\n")
    for entry in described["entries"]:
        (links / entry).symlink_to(os.path.join(described["site_packages"], entry))
    # Every directory above a mount must be searchable by the non-root user (/root is not).
    above = sorted(
        {
            str(parent)
            for mount in (described["executable"], described["stdlib"], described["site_packages"])
            for parent in pathlib.PurePosixPath(mount).parents
            if str(parent) != "/"
        }
    )
    return (
        f"FROM {rootfs}\n"
        "COPY tree/ /\n"
        f"RUN for directory in {' '.join(above)}; do "
        'if [ -d "$directory" ]; then chmod go+rx "$directory"; fi; done\n'
        f'CMD ["{BASE_VENV}/bin/python3"]\n'
    )


def _digest_of(context: pathlib.Path, containerfile: str) -> str:
    digest = hashlib.sha256(containerfile.encode())
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if path.is_symlink():
            digest.update(("link %s -> %s\n" % (relative, os.readlink(path))).encode())
        elif path.is_file():
            digest.update(("file %s\n" % relative).encode() + path.read_bytes())
    return digest.hexdigest()[:12]


def build_base(storage: Storage = Storage(), venv: pathlib.Path = DEFAULT_VENV) -> str:
    """The PyTorch-like base (see the module docstring); built only when its content changed."""
    described = describe_venv(venv)
    rootfs = build_rootfs(storage)
    with tempfile.TemporaryDirectory(prefix="gpuops-trainer-base-") as workdir:
        context = pathlib.Path(workdir)
        containerfile = _base_layer(described, rootfs, context)
        image = "%s:py%s-%s" % (BASE_REPOSITORY, described["version"], _digest_of(context, containerfile))
        if image_exists(image, storage):
            return image
        (context / "Containerfile").write_text(containerfile)
        _run([*storage.podman(), "build", "--network", "none", "--tag", image, str(context)])
    return image


def missing_requirements(described: dict) -> list[str]:
    """What training/pyproject.toml declares that the base lacks, and what its build needs (pip
    builds in an environment of its own, which sees nothing of the base)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pyproject = tomllib.loads((TRAINING_DIR / "pyproject.toml").read_text())
    present = set(described["distributions"])
    lacking = [
        text
        for text in pyproject["project"]["dependencies"]
        if canonicalize_name(Requirement(text).name) not in present
    ]
    return sorted(lacking + pyproject["build-system"]["requires"])


def build_wheelhouse(venv: pathlib.Path = DEFAULT_VENV) -> pathlib.Path:
    """Wheels of what the base lacks, with the constraints' versions, downloaded once with this
    machine's pip configuration (the build itself runs offline)."""
    described = describe_venv(venv)
    requirements = missing_requirements(described)
    constraints = REPO_ROOT / "constraints.txt"
    key = hashlib.sha256(
        json.dumps([requirements, constraints.read_text(), described["version"]]).encode()
    ).hexdigest()[:12]
    wheelhouse = CACHE_DIR / "trainer-wheels" / key
    if (wheelhouse / ".complete").exists():
        return wheelhouse
    wheelhouse.parent.mkdir(parents=True, exist_ok=True)
    staging = pathlib.Path(tempfile.mkdtemp(prefix="staging-", dir=wheelhouse.parent))
    try:
        _run(
            [
                str(pathlib.Path(venv) / "bin" / "python"),
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary=:all:",
                "--constraint",
                str(constraints),
                "--dest",
                str(staging),
                *requirements,
            ],
            env=None,
        )
        (staging / ".complete").write_text("\n".join(requirements) + "\n")
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(wheelhouse)
        staging.rename(wheelhouse)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return wheelhouse


def build_inputs(storage: Storage = Storage(), venv: pathlib.Path = DEFAULT_VENV) -> dict:
    """The build arguments and volumes that build training/Containerfile here: the local base,
    the wheelhouse, pip offline, this machine's Python mounted (the roles/trainer_image tests
    pass the same to the role)."""
    wheelhouse = build_wheelhouse(venv)
    return {
        "build_args": {
            "BASE_IMAGE": build_base(storage, venv),
            "PIP_NO_INDEX": "1",
            "PIP_FIND_LINKS": WHEELS_IN_BUILD,
        },
        "volumes": [f"{wheelhouse}:{WHEELS_IN_BUILD}:ro"]
        + [mount.volume_option() for mount in runtime_mounts(venv)],
    }


def build_trainer_image(
    storage: Storage = Storage(),
    image: str = TRAINER_IMAGE,
    venv: pathlib.Path = DEFAULT_VENV,
    build_args: dict[str, str] | None = None,
    context: pathlib.Path = TRAINING_DIR,
) -> str:
    """CONTEXT's Containerfile (training/Containerfile) on the local base, offline; podman's
    layer cache makes a rebuild of unchanged sources take seconds."""
    inputs = build_inputs(storage, venv)
    command = [*storage.podman(), "build", "--network", "none", "--file", str(context / "Containerfile")]
    for name, value in {**inputs["build_args"], **(build_args or {})}.items():
        command += ["--build-arg", f"{name}={value}"]
    for volume in inputs["volumes"]:
        command += ["--volume", volume]
    _run([*command, "--tag", image, str(context)])
    return image


def run_arguments(venv: pathlib.Path = DEFAULT_VENV) -> list[str]:
    """`podman run` options that give an image built here its Python and torch."""
    return [option for mount in runtime_mounts(venv) for option in ("--volume", mount.volume_option())]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("what", choices=["base", "build", "mounts", "wheelhouse"])
    parser.add_argument("--root", default=os.environ.get("GPUOPS_PODMAN_ROOT") or None)
    parser.add_argument("--runroot", default=os.environ.get("GPUOPS_PODMAN_RUNROOT") or None)
    parser.add_argument("--venv", type=pathlib.Path, default=DEFAULT_VENV)
    parser.add_argument("--image", default=TRAINER_IMAGE)
    options = parser.parse_args(argv)
    storage = Storage(options.root, options.runroot)
    try:
        if options.what == "base":
            print(build_base(storage, options.venv))
        elif options.what == "build":
            print(build_trainer_image(storage, options.image, options.venv))
        elif options.what == "wheelhouse":
            print(build_wheelhouse(options.venv))
        else:
            print(json.dumps([dataclasses.asdict(mount) for mount in runtime_mounts(options.venv)], indent=2))
    except TrainerImageError as error:
        print(error, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
