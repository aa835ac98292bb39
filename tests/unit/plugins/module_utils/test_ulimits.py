"""ulimits.py: parsing, validation and rendering of runtime and login limits."""

from __future__ import annotations

import pytest
import tomllib
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils.ulimits import (
    ULIMIT_NAMES,
    Ulimit,
    UlimitError,
    limit_text,
    pam_limit_problems,
    parse_pam_limit,
    parse_runtime_ulimit,
    parse_ulimit,
    parse_ulimits,
    render_crio_dropin,
    render_pam_limits,
    render_systemd_limits,
    ulimit_problems,
)


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("memlock=-1:-1", Ulimit("memlock", -1, -1)),
        ("nofile=65536:65536", Ulimit("nofile", 65536, 65536)),
        (" nproc=1:-1 ", Ulimit("nproc", 1, -1)),
        ("stack=0:0", Ulimit("stack", 0, 0)),
    ],
)
def test_valid_entries_parse(entry, expected):
    assert parse_ulimit(entry) == expected


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("memlock=-1", ["'memlock=-1'", "both soft and hard", "memlock=-1:-1"]),
        ("noproc=1048576:1048576", ["'noproc'", "nproc"]),
        ("bogus=1:1", ["unknown name 'bogus'"]),
        ("nofile=-2:-1", ["negative value -2"]),
        ("nofile=10:5", ["soft limit above its hard limit"]),
        ("memlock=-1:1024", ["soft limit above its hard limit"]),
        ("memlock=unlimited:unlimited", ["malformed"]),
        ("memlock", ["malformed"]),
        ("nofile=%d:%d" % (2**63, 2**63), ["above"]),
    ],
)
def test_bad_entries_are_named_in_the_error(entry, words):
    with pytest.raises(UlimitError) as error:
        parse_ulimit(entry)
    for word in words:
        assert word in str(error.value)


def test_a_non_string_entry_is_rejected():
    with pytest.raises(UlimitError, match="must be a string"):
        parse_ulimit(65536)


def test_every_problem_is_reported_at_once():
    problems = ulimit_problems(["memlock=-1", "nofile=1:1", "nofile=2:2", "x=1:1"])
    assert len(problems) == 3
    assert "'memlock=-1'" in problems[0]
    assert "sets nofile again" in problems[1]
    assert "'x'" in problems[2]
    with pytest.raises(UlimitError) as error:
        parse_ulimits(["memlock=-1", "x=1:1"])
    assert str(error.value).count("\n") == 1


def test_a_string_instead_of_a_list_is_a_problem():
    assert ulimit_problems("memlock=-1:-1") == ["ulimits must be a list of 'name=soft:hard' strings, got str"]


def test_the_crio_dropin_is_the_seed_with_nproc_spelled_right():
    text = render_crio_dropin(["memlock=-1:-1", "nproc=1048576:1048576", "nofile=65536:65536"])
    assert text == (
        "[crio.runtime]\n"
        "default_ulimits = [\n"
        '\t"memlock=-1:-1",\n'
        '\t"nproc=1048576:1048576",\n'
        '\t"nofile=65536:65536"\n'
        "]\n"
    )
    assert tomllib.loads(text)["crio"]["runtime"]["default_ulimits"][1] == "nproc=1048576:1048576"


def test_the_crio_dropin_normalises_and_handles_an_empty_list():
    assert '"nofile=1:2"' in render_crio_dropin([" nofile=01:002 "])
    assert tomllib.loads(render_crio_dropin([])) == {"crio": {"runtime": {"default_ulimits": []}}}


def test_systemd_limits():
    assert render_systemd_limits(["memlock=-1:-1", "nofile=1024:1048576", "core=0:-1"]) == [
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1024:1048576",
        "LimitCORE=0:infinity",
    ]


def test_every_known_name_has_a_systemd_directive():
    lines = render_systemd_limits(["%s=1:1" % name for name in ULIMIT_NAMES])
    assert [line.split("=")[0] for line in lines] == ["Limit" + name.upper() for name in ULIMIT_NAMES]


def test_pam_limits_render_aligned():
    text = render_pam_limits(
        [
            {"domain": "*", "type": "-", "item": "memlock", "value": "unlimited"},
            {"domain": "@gpu", "type": "soft", "item": "nofile", "value": 65536},
            {"domain": "root", "type": "hard", "item": "nice", "value": -5},
            {"domain": "1000:", "type": "hard", "item": "stack", "value": "infinity"},
        ]
    )
    assert text.splitlines() == [
        "*      -     memlock  unlimited",
        "@gpu   soft  nofile   65536",
        "root   hard  nice     -5",
        "1000:  hard  stack    unlimited",
    ]


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ({"domain": "a b", "type": "-", "item": "nofile", "value": 1}, ["invalid domain"]),
        ({"domain": "u", "type": "both", "item": "nofile", "value": 1}, ["type 'both'"]),
        ({"domain": "u", "type": "-", "item": "noproc", "value": 1}, ["unknown item 'noproc'"]),
        ({"domain": "u", "type": "-", "item": "nofile", "value": -3}, ["negative value -3"]),
        ({"domain": "u", "type": "-", "item": "nofile", "value": "lots"}, ["'lots'"]),
        ({"domain": "u", "type": "-", "item": "nofile", "value": True}, ["boolean"]),
        ({"domain": "u", "type": "-", "item": "nice", "value": 40}, ["between -20 and 19"]),
        ({"domain": "u", "type": "-", "item": "nofile"}, ["lacks value"]),
        ({"domain": "u", "type": "-", "item": "nofile", "value": 1, "extra": 1}, ["unknown keys extra"]),
        ("u - nofile 1", ["must be a dict"]),
    ],
)
def test_bad_pam_entries_are_named(entry, words):
    with pytest.raises(UlimitError) as error:
        parse_pam_limit(entry)
    for word in words:
        assert word in str(error.value)


def test_a_pam_limit_set_twice_is_a_problem():
    problems = pam_limit_problems(
        [
            {"domain": "u", "type": "-", "item": "nofile", "value": 1},
            {"domain": "u", "type": "soft", "item": "nofile", "value": 2},
        ]
    )
    assert problems == [
        "limits entry {domain: u, item: nofile, type: soft, value: 2} sets the soft nofile of u a second time"
    ]
    assert pam_limit_problems("x") == ["limits must be a list of dicts with domain, type, item and value"]


@given(st.text(max_size=40))
def test_any_string_either_parses_or_raises_ulimit_error(text):
    try:
        limit = parse_ulimit(text)
    except UlimitError:
        return
    # Whatever parses renders back to an entry that parses to the same limit.
    assert parse_ulimit(str(limit)) == limit


@given(
    st.sampled_from(ULIMIT_NAMES),
    st.integers(min_value=-5, max_value=2**64),
    st.integers(min_value=-5, max_value=2**64),
)
def test_numeric_entries_follow_the_rules(name, soft, hard):
    entry = "%s=%d:%d" % (name, soft, hard)
    valid = (
        soft >= -1
        and hard >= -1
        and max(soft, hard) < 2**63
        and (hard == -1 or (soft != -1 and soft <= hard))
    )
    if valid:
        assert parse_ulimit(entry) == Ulimit(name, soft, hard)
        assert tomllib.loads(render_crio_dropin([entry]))["crio"]["runtime"]["default_ulimits"] == [entry]
    else:
        with pytest.raises(UlimitError, match=entry):
            parse_ulimit(entry)


@given(st.lists(st.one_of(st.text(max_size=20), st.integers(), st.none()), max_size=5))
def test_any_list_gives_problems_or_renders(entries):
    problems = ulimit_problems(entries)
    if problems:
        with pytest.raises(UlimitError):
            render_crio_dropin(entries)
    else:
        tomllib.loads(render_crio_dropin(entries))


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("memlock=-1:-1", ("memlock", -1, -1)),
        ("memlock=8388608", ("memlock", 8388608, 8388608)),
        (" nofile=1024:4096 ", ("nofile", 1024, 4096)),
    ],
)
def test_runtime_entries_are_read_as_runtimes_read_them(entry, expected):
    limit = parse_runtime_ulimit(entry)
    assert (limit.name, limit.soft, limit.hard) == expected


@pytest.mark.parametrize("entry", ["noproc=1:1", "memlock", "memlock=a:b", 5, None])
def test_runtime_entries_runtimes_refuse_are_refused(entry):
    with pytest.raises(UlimitError, match="is not name=soft:hard or name=value with a known name"):
        parse_runtime_ulimit(entry)


def test_limits_as_proc_shows_them():
    assert [limit_text(value) for value in (-1, "unlimited", 65536)] == ["unlimited", "unlimited", "65536"]
