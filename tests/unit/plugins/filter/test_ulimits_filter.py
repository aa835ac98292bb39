"""The ulimits filters as templates call them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter import ulimits


def test_the_filters_are_registered():
    assert set(ulimits.FilterModule().filters()) == {
        "validate_ulimits",
        "ulimit_problems",
        "crio_ulimits_toml",
        "systemd_limits",
        "pam_limit_problems",
        "pam_limits_conf",
    }


def test_validate_ulimits_normalises():
    assert ulimits.validate_ulimits([" memlock=-1:-1", "nofile=010:20"]) == ["memlock=-1:-1", "nofile=10:20"]


def test_bad_input_raises_a_filter_error_naming_the_entry():
    with pytest.raises(AnsibleFilterError, match="'memlock=-1' is malformed"):
        ulimits.validate_ulimits(["memlock=-1"])
    with pytest.raises(AnsibleFilterError, match="'noproc'"):
        ulimits.crio_ulimits_toml(["noproc=1:1"])
    with pytest.raises(AnsibleFilterError, match="negative value -5"):
        ulimits.systemd_limits(["nofile=-5:-5"])
    with pytest.raises(AnsibleFilterError, match="unknown item"):
        ulimits.pam_limits_conf([{"domain": "*", "type": "-", "item": "mem", "value": 1}])


def test_rendering_filters():
    assert ulimits.crio_ulimits_toml(["memlock=-1:-1"]).startswith("[crio.runtime]\n")
    assert ulimits.systemd_limits(["memlock=-1:-1"]) == ["LimitMEMLOCK=infinity"]
    assert ulimits.pam_limits_conf([{"domain": "*", "type": "-", "item": "memlock", "value": -1}]) == (
        "*  -  memlock  unlimited\n"
    )
    assert ulimits.FilterModule().filters()["ulimit_problems"](["memlock=-1:-1"]) == []
