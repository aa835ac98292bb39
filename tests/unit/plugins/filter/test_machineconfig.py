"""The machineconfig filters: thin wrappers that turn problems into filter errors."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.machineconfig import FilterModule

FILTERS = FilterModule().filters()


def test_machineconfig_filter_builds_with_labels_and_octal_string_mode():
    document = FILTERS["machineconfig"](
        "99-gpu-extra",
        "gpu",
        files=[{"path": "/etc/x.conf", "content": "a\n", "mode": "0600"}],
        labels={"team": "ml"},
    )
    assert document["metadata"]["labels"] == {"machineconfiguration.openshift.io/role": "gpu", "team": "ml"}
    assert document["spec"]["config"]["storage"]["files"][0]["mode"] == 0o600


def test_machineconfig_filter_error_names_the_object_and_file():
    with pytest.raises(
        AnsibleFilterError,
        match=r"MachineConfig 99-gpu-extra: file relative: path 'relative' must be an absolute path",
    ):
        FILTERS["machineconfig"]("99-gpu-extra", "gpu", files=[{"path": "relative", "content": ""}])


def test_ignition_problems_filter_takes_a_machineconfig_or_a_bare_document():
    assert FILTERS["ignition_problems"]({"ignition": {"version": 3}}) == [
        "config.ignition.version must be a string such as '3.2.0', got int 3"
    ]
    assert FILTERS["ignition_problems"]({"kind": "MachineConfig"})[0].startswith(
        "MachineConfig None: must be apiVersion"
    )


def test_files_problems_and_data_url_filters():
    assert FILTERS["ignition_files_problems"]([{"path": "/a", "content": "x"}], "3.2.0") == []
    assert FILTERS["ignition_data_url"]("x") == "data:text/plain;charset=utf-8;base64,eA=="
    with pytest.raises(AnsibleFilterError):
        FILTERS["ignition_data_url"](5)
