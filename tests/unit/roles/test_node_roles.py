"""The node roles' variables, templates and argument specs, without a node.

The templates are rendered with Jinja2 and the collection's filters, as Ansible renders
them (trim_blocks on), for both OS families the roles know.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

import jinja2
import pytest
import tomllib
import yaml

from ansible_collections.gpuops.training.plugins.filter.ulimits import FilterModule

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
NODE_ROLES = ("crio_limits", "containerd_limits", "host_limits", "rdma_modules", "preflight")


def load(path):
    return yaml.safe_load((ROLES / path).read_text())


def render(role, template, **variables):
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(ROLES / role / "templates")),
        trim_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters.update({"gpuops.training." + name: f for name, f in FilterModule().filters().items()})
    defaults = load(role + "/defaults/main.yml")
    return environment.get_template(template).render(
        ansible_managed="Ansible managed", **{**defaults, **variables}
    )


def test_the_crio_dropin_renders_the_defaults_as_toml():
    text = render("crio_limits", "99-ulimits.conf.j2")
    assert tomllib.loads(text) == {
        "crio": {
            "runtime": {"default_ulimits": ["memlock=-1:-1", "nproc=1048576:1048576", "nofile=65536:65536"]}
        }
    }


def test_the_toml_check_accepts_the_dropin_and_refuses_broken_files(tmp_path):
    check = load("crio_limits/vars/main.yml")["crio_limits_toml_check"]
    # The template's validate string is %-formatted: the script must not contain a percent sign.
    assert "%" not in check
    good = tmp_path / "good.conf"
    good.write_text(render("crio_limits", "99-ulimits.conf.j2"))
    broken = tmp_path / "broken.conf"
    broken.write_text('[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"\n')
    wrong_type = tmp_path / "wrong.conf"
    wrong_type.write_text('[crio.runtime]\ndefault_ulimits = "memlock=-1:-1"\n')

    def run(path):
        return subprocess.run(
            [sys.executable, "-c", check, str(path)], capture_output=True, text=True, check=False
        )

    assert run(good).returncode == 0
    assert "not valid TOML" in run(broken).stderr
    assert "must be a list of strings" in run(wrong_type).stderr


def test_the_containerd_dropin_renders_systemd_limits():
    text = render("containerd_limits", "99-gpuops-limits.conf.j2")
    body = [line for line in text.splitlines() if not line.startswith("#")]
    assert body == ["[Service]", "LimitMEMLOCK=infinity", "LimitNOFILE=1048576"]


def test_the_containerd_dropin_lands_beside_the_unit():
    assert load("containerd_limits/vars/main.yml")["containerd_limits_dropin_dir"] == (
        "/etc/systemd/system/{{ containerd_limits_service }}.d"
    )


def test_the_host_limits_render_for_root_and_everyone():
    body = [
        line.split()
        for line in render("host_limits", "limits.conf.j2").splitlines()
        if not line.startswith("#")
    ]
    assert body == [
        ["*", "-", "memlock", "unlimited"],
        ["*", "-", "nofile", "1048576"],
        ["root", "-", "memlock", "unlimited"],
        ["root", "-", "nofile", "1048576"],
    ]


@pytest.mark.parametrize(
    ("family", "packages"),
    [
        (
            "Debian",
            [
                "rdma-core",
                "ibverbs-providers",
                "ibverbs-utils",
                "infiniband-diags",
                "rdmacm-utils",
                "perftest",
            ],
        ),
        (
            "RedHat",
            [
                "rdma-core",
                "libibverbs",
                "libibverbs-utils",
                "infiniband-diags",
                "librdmacm-utils",
                "perftest",
            ],
        ),
    ],
)
def test_rdma_packages_per_os_family(family, packages):
    family_vars = load("rdma_modules/vars/%s.yml" % family)
    assert family_vars["rdma_modules_os_packages"] == packages
    assert family_vars["rdma_modules_package_manager"] == {"Debian": "apt", "RedHat": "dnf"}[family]


@pytest.mark.parametrize("family", ["Debian", "RedHat"])
def test_the_modules_load_file_renders_for_both_families(family):
    modules = load("rdma_modules/defaults/main.yml")["rdma_modules_kernel_modules"] + ["nvidia-peermem"]
    text = render(
        "rdma_modules",
        "modules-load.conf.j2",
        rdma_modules_to_load=modules,
        **load("rdma_modules/vars/%s.yml" % family),
    )
    assert [line for line in text.splitlines() if not line.startswith("#")] == [
        "ib_core",
        "ib_uverbs",
        "rdma_ucm",
        "nvidia-peermem",
    ]
