"""trainer_image: documented defaults that match the Containerfile and the trainer package, and
the image-reference patterns its checks use, without podman."""

from __future__ import annotations

import pathlib
import re

import jinja2
import pytest
import tomllib
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
ROLE = REPO_ROOT / "roles" / "trainer_image"


def load(path):
    return yaml.safe_load((ROLE / path).read_text())


def test_every_default_is_in_the_readme():
    readme = (ROLE / "README.md").read_text()
    for name in load("defaults/main.yml"):
        assert "`%s`" % name in readme, name


def test_the_password_is_hidden_by_the_argument_spec():
    options = load("meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options["trainer_image_password"]["no_log"] is True


def test_the_defaults_match_the_trainer_package_and_the_containerfile():
    defaults = load("defaults/main.yml")
    version = tomllib.loads((REPO_ROOT / "training" / "pyproject.toml").read_text())["project"]["version"]
    assert defaults["trainer_image_tag"] == version
    containerfile = (REPO_ROOT / "training" / "Containerfile").read_text()
    assert "ARG TRAINER_UID=%d\n" % defaults["trainer_image_uid"] in containerfile
    assert "ARG TRAINER_GID=%d\n" % defaults["trainer_image_gid"] in containerfile
    # Every pip setting the role documents is a build argument the Containerfile takes.
    for name in re.findall(r"PIP_[A-Z_]+", (ROLE / "defaults" / "main.yml").read_text()):
        assert "ARG %s=" % name in containerfile, name


def test_the_base_image_has_no_default():
    # The base comes from the user's registry: no default may name one.
    assert load("defaults/main.yml")["trainer_image_base"] == ""
    assert re.search(r"^ARG BASE_IMAGE$", (REPO_ROOT / "training" / "Containerfile").read_text(), re.M)


@pytest.fixture(scope="module")
def patterns():
    """The role's patterns as Ansible templates them (vars/main.yml, lazily nested)."""
    variables = load("vars/main.yml")
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def resolve(name):
        return environment.from_string(variables[name]).render(**{key: resolve(key) for key in names(name)})

    def names(name):
        return [key for key in re.findall(r"(trainer_image_\w+_pattern)", variables[name]) if key != name]

    return {
        kind: re.compile("^%s$" % resolve("trainer_image_%s_pattern" % kind).strip())
        for kind in ("reference", "name", "registry", "tag")
    }


@pytest.mark.parametrize(
    ("kind", "value", "valid"),
    [
        ("reference", "registry.example:5000/ml/pytorch:24.05-py3", True),
        ("reference", "localhost/gpuops-trainer-base:py3.11-8c40deb27010", True),
        ("reference", "pytorch/pytorch@sha256:" + "a" * 64, True),
        ("reference", "mirror.example/nvidia/pytorch:24.05-py3@sha256:" + "0" * 64, True),
        ("reference", "https://registry.example/pytorch:1", False),
        ("reference", "registry.example/PyTorch:1", False),
        ("reference", "pytorch:1:2", False),
        ("name", "ml/gpuops-trainer", True),
        ("name", "gpuops-trainer:1", False),
        ("registry", "registry.example:5000/ml", True),
        ("registry", "127.0.0.1:5000", True),
        ("registry", "registry.example/", False),
        ("tag", "0.1.0", True),
        ("tag", "-v1", False),
        ("tag", "x" * 129, False),
    ],
)
def test_the_reference_patterns(patterns, kind, value, valid):
    assert bool(patterns[kind].match(value)) is valid
