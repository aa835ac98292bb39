"""execution-environment.yml is valid for ansible-builder and lists what the plugins import.

An execution environment that misses a Python package fails only when a job template
reaches the module that imports it; this test fails first.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import yaml
from ansible_builder.ee_schema import validate_schema
from packaging.requirements import Requirement

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFINITION = REPO_ROOT / "execution-environment.yml"
# Import name -> distribution name, where they differ.
DISTRIBUTION_OF = {"yaml": "PyYAML", "jinja2": "Jinja2"}
# Provided by ansible-core in every execution environment.
PROVIDED = {"ansible", "ansible_collections", "jinja2", "yaml"}


def third_party_imports():
    """Top-level modules imported by the collection's plugins, other than the stdlib's."""
    found = {}
    for path in sorted((REPO_ROOT / "plugins").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module.split(".")[0]]
            else:
                continue
            for name in names:
                if name not in sys.stdlib_module_names and name != "__future__":
                    found.setdefault(name, path.relative_to(REPO_ROOT).as_posix())
    return found


def definition():
    return yaml.safe_load(DEFINITION.read_text())


def test_the_definition_passes_ansible_builders_schema():
    ee = definition()
    validate_schema(ee)  # raises DefinitionError naming the bad key
    assert ee["version"] == 3
    for key in ("galaxy", "python", "system"):
        assert (REPO_ROOT / ee["dependencies"][key]).is_file(), key


def test_ansible_builder_creates_a_build_context_with_the_collections_requirements(tmp_path):
    result = subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "ansible-builder"),
            "create",
            "--file",
            str(DEFINITION),
            "--context",
            str(tmp_path / "context"),
            # Otherwise the name follows the runtime it finds on the PATH (a Dockerfile where only docker is).
            "--output-filename",
            "Containerfile",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    containerfile = (tmp_path / "context" / "Containerfile").read_text()
    assert "EE_BASE_IMAGE" in containerfile
    files = tmp_path / "context" / "_build"
    assert "kubernetes.core" in (files / "requirements.yml").read_text()
    assert "matplotlib" in (files / "requirements.txt").read_text()


def test_every_third_party_import_of_the_plugins_is_a_requirement():
    listed = {
        Requirement(line).name.lower()
        for line in (REPO_ROOT / definition()["dependencies"]["python"]).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    imports = third_party_imports()
    assert "matplotlib" in imports and "kubernetes" in imports  # the scan sees real imports
    missing = {
        name: where
        for name, where in imports.items()
        if name not in PROVIDED and DISTRIBUTION_OF.get(name, name).lower() not in listed
    }
    assert not missing, "imported by the plugins but not in the execution environment: %s" % missing


def collections_the_content_uses():
    """Other collections named by the roles' and playbooks' FQCNs and the plugins' imports."""
    used = set()
    for path in list((REPO_ROOT / "roles").rglob("*.yml")) + list((REPO_ROOT / "playbooks").rglob("*.yml")):
        for word in path.read_text().split():
            parts = word.strip(":'\"").split(".")
            namespace_known = parts[0] in {"kubernetes", "community", "ansible", "containers"}
            if len(parts) >= 3 and namespace_known and parts[:2] != ["ansible", "builtin"]:
                used.add(".".join(parts[:2]))
    for path in (REPO_ROOT / "plugins").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible_collections."):
                used.add(".".join(node.module.split(".")[1:3]))
    return used - {"gpuops.training"}


def test_galaxy_yml_and_requirements_declare_exactly_the_collections_the_content_uses():
    used = collections_the_content_uses()
    assert "kubernetes.core" in used  # the scan sees real module names
    declared = set(yaml.safe_load((REPO_ROOT / "galaxy.yml").read_text())["dependencies"])
    wanted = {
        entry["name"] for entry in yaml.safe_load((REPO_ROOT / "requirements.yml").read_text())["collections"]
    }
    # Declared but unused is a dependency every installer pays for; used but undeclared breaks
    # an install from Galaxy.
    assert declared == used, {"declared, not used": declared - used, "used, not declared": used - declared}
    assert wanted == declared, wanted ^ declared


def test_the_build_make_test_runs_keeps_every_dependency_of_the_definition(tmp_path):
    """tests/podman/execution_environment.py builds this file with local additions (the
    collections requirements.yml names already installed, the collection itself, kubectl and
    helm): everything the file asks for must reach the image unchanged."""
    sys.path.insert(0, str(REPO_ROOT / "tests" / "podman"))
    import execution_environment

    project = definition()
    built = execution_environment.build_definition(tmp_path, "0123abcd/gpuops-training-0.1.0.tar.gz")
    validate_schema(built)
    assert built["version"] == project["version"] and built["images"] == project["images"]
    assert built["dependencies"] == project["dependencies"]
    for relative in (project["dependencies"][key] for key in ("galaxy", "python", "system")):
        assert (tmp_path / relative).read_text() == (REPO_ROOT / relative).read_text(), relative
    for stage, steps in project.get("additional_build_steps", {}).items():
        assert built["additional_build_steps"][stage][: len(steps)] == steps, stage
    install = built["additional_build_steps"]["append_final"][-1]
    assert install.startswith("RUN ansible-galaxy collection install --offline")
    assert install.endswith("/0123abcd/gpuops-training-0.1.0.tar.gz")
