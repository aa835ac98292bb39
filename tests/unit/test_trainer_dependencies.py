"""training/pyproject.toml declares every third-party package the trainer imports.

An image built from the package (training/Containerfile) installs what pyproject.toml
declares and nothing else: a module imported but not declared is missing there, and every
rank dies on import at start-up. The trainer's tests run in the development venv, where
everything happens to be installed, so they cannot see it; this test reads the imports.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAINER_SOURCES = REPO_ROOT / "training" / "src"
PYPROJECT = REPO_ROOT / "training" / "pyproject.toml"
# Import name -> distribution name, where they differ.
DISTRIBUTION_OF = {"PIL": "pillow"}


def first_party_modules():
    return {path.stem if path.is_file() else path.name for path in TRAINER_SOURCES.iterdir()} - {
        "__pycache__"
    }


def top_level_imports(source, filename="<source>"):
    """Top-level names of the absolute imports in SOURCE, at any depth (lazy imports too)."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module.split(".")[0]


def third_party_imports():
    """Top-level modules the trainer imports, other than its own and the standard library's,
    each with the first file that imports it."""
    own = first_party_modules()
    found = {}
    for path in sorted(TRAINER_SOURCES.rglob("*.py")):
        for name in top_level_imports(path.read_text(), str(path)):
            if name not in sys.stdlib_module_names and name != "__future__" and name not in own:
                found.setdefault(name, path.relative_to(REPO_ROOT).as_posix())
    return found


def declared_requirements():
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    return [Requirement(text) for text in project["dependencies"]]


def declared_distributions():
    return {canonicalize_name(requirement.name) for requirement in declared_requirements()}


def distribution_of(import_name):
    return canonicalize_name(DISTRIBUTION_OF.get(import_name, import_name))


def test_every_third_party_import_of_the_trainer_is_a_declared_dependency():
    declared = declared_distributions()
    missing = [
        "%s (imported by %s) needs %s" % (name, where, distribution_of(name))
        for name, where in sorted(third_party_imports().items())
        if distribution_of(name) not in declared
    ]
    assert not missing, "training/pyproject.toml does not declare:\n" + "\n".join(missing)


def test_every_declared_dependency_is_imported_by_the_trainer():
    imported = {distribution_of(name) for name in third_party_imports()}
    unused = sorted(declared_distributions() - imported)
    assert not unused, "training/pyproject.toml declares packages the trainer never imports: %s" % unused


def test_requirements_pin_nothing_the_constraints_file_pins():
    # constraints.txt pins the development venv; the package must stay installable on a
    # user's CUDA PyTorch base, whose torch it must not replace.
    pinned = {
        canonicalize_name(line.split("==")[0])
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    exact = [
        str(requirement)
        for requirement in declared_requirements()
        if canonicalize_name(requirement.name) in pinned
        and any(spec.operator in ("==", "===") for spec in requirement.specifier)
    ]
    assert not exact, "training/pyproject.toml pins what constraints.txt already pins: %s" % exact


def test_the_import_reader_sees_lazy_and_dotted_imports_and_skips_relative_ones():
    source = "import os.path\nfrom .data import x\ndef f():\n    from pycocotools.coco import COCO\n"
    assert list(top_level_imports(source)) == ["os", "pycocotools"]
    found = third_party_imports()
    assert found["pycocotools"] == "training/src/gpuops_trainer/evaluate.py"
    assert {"torch", "torchvision", "numpy", "PIL"} <= set(found)
    assert not {"os", "gpuops_trainer", "__future__"} & set(found)
