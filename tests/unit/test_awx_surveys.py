"""The AWX survey examples in docs/awx stay true to the roles they feed.

Every survey question must set a variable one of the playbook's roles declares in its
argument spec, offer only values the spec accepts, and default to the role's default, so a
job template built from the survey behaves like the playbook run from the command line.
"""

from __future__ import annotations

import json
import pathlib

import pytest
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
SURVEYS = {
    "train_survey.json": ["training_job", "training_verify"],
    "provision_nodes_survey.json": [
        "crio_limits",
        "containerd_limits",
        "host_limits",
        "rdma_modules",
        "preflight",
    ],
    "provision_cluster_survey.json": [
        "machineconfig_limits",
        "gpu_operator",
        "training_operator",
        "training_namespace",
        "secondary_networks",
    ],
}
AWX_TYPES = {"text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"}


def role_options(roles):
    options = {}
    for role in roles:
        spec = yaml.safe_load((REPO_ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())
        options.update(spec["argument_specs"]["main"]["options"])
    return options


def as_spec_type(value, option):
    """The survey's answer as the argument spec converts it (AWX sends text for choices)."""
    kind = option.get("type", "str")
    if kind == "bool":
        return {"true": True, "false": False}[str(value).lower()]
    if kind == "int":
        return int(value)
    if kind == "list":
        return [item.strip() for item in value.split(",")] if isinstance(value, str) else value
    return value


def test_every_survey_example_is_checked():
    assert sorted(path.name for path in (REPO_ROOT / "docs" / "awx").glob("*.json")) == sorted(SURVEYS)


@pytest.mark.parametrize("survey_name", sorted(SURVEYS))
def test_each_question_feeds_a_declared_variable_with_its_default_and_valid_choices(survey_name):
    survey = json.loads((REPO_ROOT / "docs" / "awx" / survey_name).read_text())
    options = role_options(SURVEYS[survey_name])
    assert survey["name"] and survey["description"] and survey["spec"]
    variables = [question["variable"] for question in survey["spec"]]
    assert len(variables) == len(set(variables))
    for question in survey["spec"]:
        name = question["variable"]
        assert question["type"] in AWX_TYPES, name
        assert {"question_name", "required", "default"} <= set(question), name
        assert name in options, "%s is not an option of %s" % (name, SURVEYS[survey_name])
        option = options[name]
        if "default" in option:
            assert as_spec_type(question["default"], option) == option["default"], name
        if question["type"] == "multiplechoice":
            accepted = option.get("choices") or ([True, False] if option.get("type") == "bool" else None)
            assert accepted, "%s is a multiple choice but the spec names no choices" % name
            assert all(as_spec_type(choice, option) in accepted for choice in question["choices"]), name
            assert question["default"] in question["choices"], name
        if question["type"] == "integer":
            assert option.get("type") == "int", name
            assert question["min"] <= question["default"] <= question["max"], name
