"""crio_config.py: the files CRI-O reads, in its order, and the value of each key that wins."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.module_utils import crio_config
from ansible_collections.gpuops.training.plugins.module_utils.crio_config import (
    CrioConfigError,
    config_files,
    default_ulimits_entries,
    effective_settings,
    read_effective_settings,
    read_toml_values,
    values_of,
)

# What a node's files look like: comments, tables with quoted keys, multi-line arrays with a
# trailing comma, inline tables, other scalars, arrays of tables, strings of every kind.
MAIN_CONFIG = """\
# The main file of a node (written for these tests).
[crio]
root = "/var/lib/containers/storage"
storage_option = [
]

[crio.runtime]
default_runtime = "runc"  # a comment after a value
default_ulimits = [
    "nofile=1024:1024", # first
    'memlock=65536:65536',
]
pids_limit = -1
log_size_max = 1_000_000
enable_thing = true
seccomp_profile = ""
conmon_env = ["PATH=/usr/local/sbin:/usr/local/bin"]
ratio = 0.5

[crio.runtime.runtimes."kata-qemu"]
runtime_path = "/usr/bin/kata"
allowed_annotations = ["io.kubernetes.cri-o.Devices"]
limits = { memlock = "ignored", "nested.key" = [1, 2] }

[crio.image]
pause_image = "localhost/site/pause:3.10"
pause_command = '/pause'
insecure_registries = []
description = \"\"\"
multi "line" # not a comment
\"\"\"

[[crio.hooks]]
default_ulimits = ["not=1:1"]
"""


@pytest.fixture(params=["tomllib", "subset"])
def reader(request):
    return values_of if request.param == "tomllib" else read_toml_values


def test_both_readers_find_the_keys_in_a_full_file(reader):
    assert reader(MAIN_CONFIG) == {
        "default_ulimits": ["nofile=1024:1024", "memlock=65536:65536"],
        "pause_image": "localhost/site/pause:3.10",
        "pause_command": "/pause",
    }


@pytest.mark.parametrize(
    "text",
    [
        '[crio.runtime]\ndefault_ulimits = ["memlock=-1:-1"\n',
        "[crio.runtime\n",
        '[crio.runtime]\ndefault_ulimits = "a" "b"\n',
        "[crio.runtime]\nx = 1\nx = 2\n",
        '[crio.runtime]\nname = "unterminated\n',
    ],
)
def test_both_readers_refuse_what_is_not_toml(reader, text):
    with pytest.raises(CrioConfigError, match="not valid TOML"):
        reader(text)


def test_the_subset_reader_serves_pythons_without_a_toml_parser(monkeypatch):
    monkeypatch.setattr(crio_config, "_toml_loader", lambda: None)
    assert values_of("[crio.runtime]\ndefault_ulimits = []\n") == {"default_ulimits": []}


def test_crio_reads_the_main_file_then_every_file_of_the_drop_in_directory_in_lexical_order(tmp_path):
    main = tmp_path / "crio.conf"
    main.write_text("")
    drop_ins = tmp_path / "crio.conf.d"
    (drop_ins / "50-sub").mkdir(parents=True)
    names = ("99-ulimits.conf", "10-a.conf", "99-ulimits.conf.gpuops-original", "50-sub/x.conf", ".hidden")
    for name in names:
        (drop_ins / name).write_text("")
    assert config_files(str(main), str(drop_ins)) == [
        str(main),
        str(drop_ins / ".hidden"),
        str(drop_ins / "10-a.conf"),
        str(drop_ins / "50-sub" / "x.conf"),
        str(drop_ins / "99-ulimits.conf"),
        # Not a .conf name, read all the same (and last): why copies never belong there.
        str(drop_ins / "99-ulimits.conf.gpuops-original"),
    ]
    assert config_files(str(tmp_path / "absent.conf"), str(tmp_path / "absent.d")) == []


def test_the_last_file_that_sets_a_key_wins():
    settings = effective_settings(
        [
            ("/main", '[crio.runtime]\ndefault_ulimits = ["memlock=1:1"]\n[crio.image]\npause_image = "a"\n'),
            ("/d/10", '[crio.runtime]\ndefault_ulimits = ["memlock=2:2", "nofile=3:3"]\n'),
            ("/d/20", "[crio.runtime]\npids_limit = 5\n"),
        ]
    )
    assert settings["default_ulimits"] == {"value": ["memlock=2:2", "nofile=3:3"], "source": "/d/10"}
    assert settings["pause_image"] == {"value": "a", "source": "/main"}
    assert settings["pause_command"] == {"value": None, "source": ""}


def test_a_file_crio_would_refuse_is_named(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "99-broken.conf").write_bytes(b"\xff\xfe garbage")
    with pytest.raises(CrioConfigError, match="99-broken.conf is not UTF-8 text"):
        read_effective_settings(str(tmp_path / "absent"), str(tmp_path / "d"))
    (tmp_path / "d" / "99-broken.conf").write_text("[crio.runtime\n")
    with pytest.raises(CrioConfigError, match="99-broken.conf: not valid TOML"):
        read_effective_settings(str(tmp_path / "absent"), str(tmp_path / "d"))


def test_default_ulimits_must_be_a_list_of_strings():
    assert default_ulimits_entries({"value": None, "source": ""}) == []
    assert default_ulimits_entries({"value": ["memlock=1:1"], "source": "/f"}) == ["memlock=1:1"]
    with pytest.raises(CrioConfigError, match="/f: crio.runtime.default_ulimits must be a list of strings"):
        default_ulimits_entries({"value": "memlock=1:1", "source": "/f"})
