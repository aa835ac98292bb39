"""Adversarial values for the bad-input suite, and the settings every test of it uses.

The values are what a playbook can hand a module or a filter by mistake: the wrong type,
None, empty containers, huge and non-finite numbers, unicode, NUL bytes, very long strings,
path traversal, and nested structures of all of them.
"""

from __future__ import annotations

import collections
import re

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Fixed examples (derandomize), no example database: the suite is the same on every run and
# machine, and stays well under a minute on 2 shared cores.
SETTINGS = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# What the suite tried and how each call ended, for the figures in the test report (see
# conftest.py): "clean error" is a failure with a message naming an argument, "accepted" a
# value the module or filter took as valid. A traceback fails the test instead.
TALLY = collections.Counter()

HUGE_INTS = [10**30, -(10**30), 2**63, -(2**63) - 1, 10**400]
SPECIAL_FLOATS = [float("nan"), float("inf"), float("-inf"), 1e308, -0.0]
NASTY_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "../../etc",
    "../../../../../../etc/passwd",
    "..",
    "-rf",
    "--help",
    "é漢字🙂",
    "\u202e\u200b",
    "x" * 5000,
    "line\nbreak",
    "${HOME}$(id)`id`;|&",
    "{{ lookup('env', 'HOME') }}",
    "-1",
    "0",
    "1Gi",
    "nan",
    "inf",
    "true",
    "None",
]

# Keys that look like the real ones, so nested dicts reach past a first type check.
PLAUSIBLE_KEYS = [
    "kind",
    "apiVersion",
    "metadata",
    "name",
    "namespace",
    "spec",
    "status",
    "labels",
    "items",
    "path",
    "content",
    "mode",
    "type",
    "log",
    "log_lines",
    "schema",
    "ranks",
    "error",
    "msg",
]

text = st.one_of(st.text(max_size=24), st.sampled_from(NASTY_TEXT))
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SPECIAL_FLOATS),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, text)
keys = st.one_of(st.sampled_from(PLAUSIBLE_KEYS), text)

# Anything YAML, JSON or Jinja can produce: scalars, lists and dicts nested a few levels.
anything = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(keys, children, max_size=4),
    ),
    max_leaves=12,
)


def like(valid, *others):
    """Mostly near-valid values, sometimes anything at all."""
    return st.one_of(valid, *others, anything)


def replace_one(valid_dict, value_strategy=anything):
    """A valid dict with one key set to an adversarial value (or dropped, or added)."""
    keys_list = sorted(valid_dict)

    def build(choice):
        action, key, value = choice
        result = dict(valid_dict)
        if action == "drop" and keys_list:
            result.pop(key, None)
        else:
            result[key] = value
        return result

    return st.tuples(
        st.sampled_from(["set", "set", "set", "drop", "add"]),
        st.one_of(st.sampled_from(keys_list), keys) if keys_list else keys,
        value_strategy,
    ).map(build)


def names_one_of(message, words):
    """Whether the message names one of ``words`` (as a word, not inside another one)."""
    return any(re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9])" % re.escape(word), message) for word in words)
