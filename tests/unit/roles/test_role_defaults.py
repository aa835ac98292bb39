"""Every role's variables: each default is declared in its argument spec with the same value
and a description, carries the role's prefix and has a comment above it in defaults/main.yml
(geerlingguy's convention), and the spec declares nothing the defaults leave out.

One test for every role under roles/, so a new role is held to it without a new test file.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
ROLE_NAMES = sorted(path.name for path in ROLES.iterdir() if path.is_dir())


def defaults_and_options(role):
    defaults = yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text()) or {}
    spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())
    return defaults, spec["argument_specs"]["main"]["options"]


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_default_is_declared_with_the_same_value_a_description_and_the_roles_prefix(role):
    defaults, options = defaults_and_options(role)
    assert set(defaults) == set(options), set(defaults) ^ set(options)
    for name, value in defaults.items():
        if "{{" in str(value) or isinstance(value, dict):
            # Computed from other variables, or a whole object (a ClusterPolicy spec): the spec
            # need not restate it, but what it states must agree.
            assert options[name].get("default", value) == value, name
        else:
            assert options[name].get("default") == value, name
        assert options[name].get("description"), name
        assert name.startswith(role + "_"), name


def is_variable(line):
    return bool(line) and not line.startswith(("#", " ", "-")) and ":" in line


@pytest.mark.parametrize("role", ROLE_NAMES)
def test_every_default_has_a_comment_above_it(role):
    lines = (ROLES / role / "defaults" / "main.yml").read_text().splitlines()
    for number, line in enumerate(lines):
        if not is_variable(line):
            continue
        # A variable, or one of a group of variables under one comment.
        above = number - 1
        while above > 0 and is_variable(lines[above]):
            above -= 1
        assert lines[above].startswith("#"), "%s: %s has no comment above it" % (role, line)
