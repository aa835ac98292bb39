"""The training_job role's variables and argument spec, and how training_verify turns a
launcher's promised transport into NCCL expectations - without a cluster."""

from __future__ import annotations

import pathlib

import jinja2
import yaml

from ansible_collections.gpuops.training.plugins.module_utils import training_settings

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def load(path):
    return yaml.safe_load((ROLES / path).read_text())


def test_the_launcher_choices_are_the_ones_the_role_has_tasks_for():
    options = load("training_job/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    choices = options["training_job_launcher"]["choices"]
    assert choices == ["local", "ssh", "pytorchjob", "indexed_job", "trainjob", "runai"]
    for launcher in choices:
        assert (ROLES / "training_job" / "tasks" / ("launch_%s.yml" % launcher)).is_file()
    assert choices == list(training_settings.TRAINER_LAUNCHERS)
    assert set(choices) - {"local", "ssh"} == set(training_settings.CLUSTER_LAUNCHERS)


def test_every_option_of_the_argument_spec_is_a_setting_with_its_default():
    """The argument spec is where a setting is declared: the filters read its names and
    defaults from there, so nothing else lists them."""
    options = load("training_job/meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = training_settings.defaults()
    for name, option in options.items():
        key = name[len("training_job_") :]
        default = option.get("default")
        # A default the role computes (a template) is the role's to fill in.
        expected = None if isinstance(default, str) and "{{" in default else default
        assert defaults[key] == expected, name
    assert set(defaults) == {name[len("training_job_") :] for name in options} | {
        "mpirun_argv",
        "mpi_worker_command",
    }


def test_the_role_hands_every_setting_to_the_filters_by_prefix():
    """The role's settings are its variables by prefix: no hand mapping to keep in step."""
    variables = load("training_job/vars/main.yml")
    assert "gpuops.training.training_setting_names" in variables["training_job_setting_names"]
    assert "query('ansible.builtin.vars', *training_job_setting_names)" in variables["training_job_settings"]
    names = list(load("training_job/defaults/main.yml")) + list(variables) + ["training_job_run_dir"]
    # Every default is a setting; what the role computes (vars, facts) is not.
    assert training_settings.setting_names(names) == sorted(load("training_job/defaults/main.yml"))


def test_the_run_id_is_chosen_in_one_place():
    tasks = ROLES / "training_job" / "tasks"
    choosing = [path.name for path in sorted(tasks.glob("*.yml")) if "now(utc=true, fmt=" in path.read_text()]
    assert choosing == ["choose_run.yml"]
    # The torchrun command is the torchrun_argv filter's, for every launcher.
    assert not list((ROLES / "training_job" / "templates").glob("torchrun_*"))


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
