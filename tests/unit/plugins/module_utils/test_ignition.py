"""Ignition files and MachineConfigs: data URLs, modes, and validation before any API call."""

from __future__ import annotations

import base64

import pytest

from ansible_collections.gpuops.training.plugins.module_utils.ignition import (
    IgnitionError,
    data_url,
    decode_data_url,
    files_problems,
    ignition_problems,
    machineconfig,
    machineconfig_problems,
    parse_mode,
)
from ansible_collections.gpuops.training.plugins.module_utils.ulimits import render_crio_dropin

DROPIN = render_crio_dropin(["memlock=-1:-1", "nproc=1048576:1048576", "nofile=65536:65536"])
DROPIN_PATH = "/etc/crio/crio.conf.d/99-ulimits.conf"


def test_machineconfig_ships_the_dropin_as_ignition_320():
    document = machineconfig("99-worker-crio-ulimits", "worker", [{"path": DROPIN_PATH, "content": DROPIN}])
    assert document["apiVersion"] == "machineconfiguration.openshift.io/v1"
    assert document["kind"] == "MachineConfig"
    assert document["metadata"] == {
        "name": "99-worker-crio-ulimits",
        "labels": {"machineconfiguration.openshift.io/role": "worker"},
    }
    config = document["spec"]["config"]
    assert config["ignition"] == {"version": "3.2.0"}
    (entry,) = config["storage"]["files"]
    assert entry["path"] == DROPIN_PATH
    assert entry["mode"] == 420
    assert entry["overwrite"] is True
    assert entry["contents"]["source"].startswith("data:text/plain;charset=utf-8;base64,")
    assert decode_data_url(entry["contents"]["source"]).decode() == DROPIN
    assert machineconfig_problems(document) == []


def test_seed_machineconfig_payload_decodes():
    # The data URL of the published recipe (which misspells nproc as noproc).
    source = (
        "data:text/plain;charset=utf-8;base64,W2NyaW8ucnVudGltZV0KZGVmYXVsdF91bGltaXRzID0gWwoJIm1lbWxvY2s9"
        "LTE6LTEiLAoJIm5vcHJvYz0xMDQ4NTc2OjEwNDg1NzYiLAoJIm5vZmlsZT02NTUzNjo2NTUzNiIKXQ=="
    )
    assert (
        decode_data_url(source).decode().startswith('[crio.runtime]\ndefault_ulimits = [\n\t"memlock=-1:-1"')
    )


def test_percent_encoded_data_url_decodes():
    assert decode_data_url("data:,hello%20world") == b"hello world"


def test_data_url_round_trips_unicode():
    assert decode_data_url(data_url("é\n")) == "é\n".encode()
    assert data_url("x") == "data:text/plain;charset=utf-8;base64," + base64.b64encode(b"x").decode()


@pytest.mark.parametrize(
    ("mode", "expected"), [(420, 420), (0o600, 384), ("0644", 420), ("755", 493), ("0o644", None)]
)
def test_parse_mode(mode, expected):
    if expected is None:
        with pytest.raises(IgnitionError, match="is not a file mode"):
            parse_mode(mode)
    else:
        assert parse_mode(mode) == expected


@pytest.mark.parametrize("mode", [True, 0o10000, -1, 4.2, "rw-r--r--"])
def test_bad_modes_are_refused(mode):
    with pytest.raises(IgnitionError):
        parse_mode(mode)


def test_files_problems_reports_everything_at_once_naming_each_file():
    problems = files_problems(
        [
            {"path": "etc/relative.conf", "content": "x"},
            {"path": "/etc/a.conf", "content": "x", "mode": "rw"},
            {"path": "/etc/a.conf", "content": 3},
            {"path": "/etc/../b.conf", "content": "x", "owner": "root"},
        ],
        version=3,
    )
    assert problems == [
        "ignition version 3 is not an Ignition 3.x version string such as '3.2.0'",
        "files[0] (etc/relative.conf): path 'etc/relative.conf' must be an absolute path",
        "files[1] (/etc/a.conf): mode 'rw' is not a file mode; write an integer such as 420 or '0644'",
        "files[2] (/etc/a.conf): content must be text",
        "files[2] (/etc/a.conf): path /etc/a.conf appears twice",
        "files[3] (/etc/../b.conf): unknown keys owner; use path, content, mode, overwrite",
        "files[3] (/etc/../b.conf): path '/etc/../b.conf' must be a normalised file path"
        " (no '.', '..', '//' or trailing '/')",
    ]
    assert files_problems([{"path": DROPIN_PATH, "content": DROPIN, "mode": "0644"}]) == []


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda c: c["ignition"].update(version=3.2),
            "spec.config.ignition.version must be a string such as '3.2.0', got float 3.2",
        ),
        (
            lambda c: c["ignition"].update(version="2.2.0"),
            "spec.config.ignition.version '2.2.0' is not an Ignition 3.x version",
        ),
        (
            lambda c: c["storage"]["files"][0].update(mode="0644"),
            "spec.config.storage.files[0]: mode must be an integer (decimal, 420 for 0644), got str '0644'",
        ),
        (
            lambda c: c["storage"]["files"][0].update(path="crio.conf"),
            "spec.config.storage.files[0]: path 'crio.conf' must be an absolute path",
        ),
        (
            lambda c: c["storage"]["files"][0]["contents"].update(source="data:;base64,@@"),
            "spec.config.storage.files[0]: contents.source: data: URL payload is not valid base64",
        ),
        (
            lambda c: c["storage"]["files"].append(dict(c["storage"]["files"][0])),
            "spec.config.storage.files[1]: path %s appears twice" % DROPIN_PATH,
        ),
    ],
)
def test_ignition_problems_name_the_field(mutate, expected):
    document = machineconfig("99-worker-crio-ulimits", "worker", [{"path": DROPIN_PATH, "content": DROPIN}])
    mutate(document["spec"]["config"])
    problems = machineconfig_problems(document)
    assert len(problems) == 1
    assert problems[0].startswith("MachineConfig 99-worker-crio-ulimits: " + expected)


def test_machineconfig_refuses_bad_name_and_missing_role():
    with pytest.raises(IgnitionError) as error:
        machineconfig("99_Worker", "", [{"path": DROPIN_PATH, "content": DROPIN}])
    message = str(error.value)
    assert "metadata.name '99_Worker' must be a lower-case DNS subdomain" in message
    assert "metadata.labels[machineconfiguration.openshift.io/role] must name the pool's role" in message


def test_machineconfig_refuses_bad_version_before_building():
    with pytest.raises(IgnitionError, match="ignition.version '3' is not an Ignition 3.x version"):
        machineconfig("99-worker-x", "worker", [{"path": DROPIN_PATH, "content": ""}], version="3")


def test_ignition_problems_of_a_non_document():
    assert ignition_problems("3.2.0") == ["spec.config must be an Ignition document (a dict), got str"]
    assert ignition_problems({"ignition": {"version": "3.4.0"}}) == []
