"""The training_job role's variables and argument spec, and how training_verify turns a
launcher's promised transport into NCCL expectations - without a cluster."""

from __future__ import annotations

import pathlib

import jinja2
import pytest
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import training_workload

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def load(path):
    return yaml.safe_load((ROLES / path).read_text())


def test_every_default_is_in_the_argument_spec_with_the_same_value():
    defaults = load("training_job/defaults/main.yml")
    options = load("training_job/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert options[name].get("default", value) == value, name
        assert options[name]["description"], name


def test_every_cluster_launcher_variable_is_documented_with_a_comment():
    lines = (ROLES / "training_job" / "defaults" / "main.yml").read_text().splitlines()
    start = next(
        number for number, line in enumerate(lines) if line.startswith("# ---- Kubernetes launchers")
    )
    for number in range(start, len(lines)):
        line = lines[number]
        if not line or line.startswith((" ", "#", "-")):
            continue
        # A variable, or a group of variables under one comment.
        above = number - 1
        while lines[above] and not lines[above].startswith("#") and ":" in lines[above]:
            above -= 1
        assert lines[above].startswith("#"), "%s has no comment above it" % line


def test_the_launcher_choices_are_the_ones_the_role_has_tasks_for():
    options = load("training_job/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    choices = options["training_job_launcher"]["choices"]
    assert choices == ["local", "ssh", "pytorchjob", "indexed_job", "trainjob", "runai"]
    for launcher in choices:
        assert (ROLES / "training_job" / "tasks" / ("launch_%s.yml" % launcher)).is_file()
    assert set(choices) - {"local", "ssh"} == set(training_workload.TRAINER_LAUNCHERS)


def test_the_workload_settings_pass_every_key_the_renderer_knows():
    settings = load("training_job/vars/main.yml")["training_job_workload_settings"]
    assert set(settings) == set(training_workload.DEFAULTS)


# Keys the role computes from other variables (no default of their own to compare).
COMPUTED_KEYS = ("launcher", "run_id", "trainer_args", "gpus_per_node")


@pytest.mark.parametrize(
    "key",
    sorted(
        key
        for key in training_workload.DEFAULTS
        if key not in COMPUTED_KEYS and "training_job_" + key in load("training_job/defaults/main.yml")
    ),
)
def test_the_renderers_defaults_match_the_roles(key):
    defaults = load("training_job/defaults/main.yml")
    name = "training_job_" + key
    role_value = defaults[name]
    python_value = training_workload.DEFAULTS[key]
    if python_value is None:
        assert role_value == ""
    else:
        assert role_value == python_value or str(role_value) == str(python_value), key


def render_expect(run, backend, transport=""):
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLES / "training_verify" / "templates")),
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["bool"] = bool
    text = environment.get_template("nccl_expect.j2").render(
        training_verify_run=run,
        training_verify_training={"backend": backend},
        training_verify_nccl_transport=transport,
        training_verify_nccl_gdr=False,
    )
    return yaml.safe_load(text)


def test_a_promised_transport_is_checked_even_when_the_trainer_reports_gloo():
    run = {"world_size": 2, "nccl_transport": "IB"}
    assert render_expect(run, "gloo") == {
        "nccl_used": True,
        "nranks": 2,
        "transport": "IB",
        "gdr": False,
        "no_errors": True,
    }
    assert render_expect(run, "nccl", transport="Socket")["transport"] == "Socket"  # the user's setting wins


def test_without_a_promise_only_nccl_runs_are_checked():
    assert render_expect({"world_size": 2}, "gloo") == {}
    assert render_expect({"world_size": 2, "nccl_transport": ""}, "gloo") == {}
    assert render_expect({"world_size": 4}, "nccl") == {
        "nccl_used": True,
        "nranks": 4,
        "gdr": False,
        "no_errors": True,
    }
