# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""A role's settings as its argument spec declares them, so that the Python that renders or
checks them knows their names, defaults and choices from that one place.

A role's variables reach a filter as a mapping without the role's prefix (``cpu`` for
``training_job_cpu``); :func:`options` reads ``roles/<role>/meta/argument_specs.yml`` of this
collection once (the filters run on the controller, where the collection's files are), and
:func:`defaults` and :func:`choice_problems` derive from it. A message names a setting by the
caller's variable: :func:`variable_namer` puts the caller's prefix back.
"""

from __future__ import annotations

import os

# Defaults that are Jinja templates are computed by the role itself (from another variable or
# the inventory); a caller that leaves them out gets None, and the code reading them decides.
_TEMPLATE_MARKER = "{{"
_COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_OPTIONS = {}


class SettingsError(ValueError):
    """Settings that cannot be read; the message names the variable."""


def spec_path(role):
    return os.path.join(_COLLECTION_ROOT, "roles", role, "meta", "argument_specs.yml")


def options(role):
    """The options of the role's ``main`` entry point, by variable name (read once)."""
    if role not in _OPTIONS:
        # PyYAML comes with Ansible on the controller; imported here so that importing this
        # file needs nothing outside the standard library.
        import yaml

        with open(spec_path(role), encoding="utf-8") as stream:
            spec = yaml.safe_load(stream)
        _OPTIONS[role] = dict(spec["argument_specs"]["main"]["options"])
    return _OPTIONS[role]


def defaults(role, prefix):
    """{setting: default} of every option, without the prefix; None for a computed default."""
    result = {}
    for name, option in options(role).items():
        default = option.get("default")
        if isinstance(default, str) and _TEMPLATE_MARKER in default:
            default = None
        result[name[len(prefix) :] if name.startswith(prefix) else name] = default
    return result


def variable_namer(prefix):
    """A function naming a setting by the caller's variable: ``cpu`` -> ``nccl_tests_cpu``."""

    def variable(key):
        return prefix + key

    return variable


def with_defaults(settings, role_defaults, prefix):
    """The settings with every key left out taken from ``role_defaults``."""
    if settings is not None and not isinstance(settings, dict):
        raise SettingsError(
            "the settings must be a mapping of %s* variables (without the prefix), got %s"
            % (prefix, type(settings).__name__)
        )
    merged = dict(role_defaults)
    merged.update(settings or {})
    return merged


def _choice_list(choices):
    shown = [str(choice) for choice in choices if choice != ""]
    return ", ".join(shown) + (" or empty" if "" in choices else "")


def choice_problems(role, prefix, settings, variable, skip=()):
    """One message per setting whose value is not among the choices its option lists."""
    found = []
    for name, option in options(role).items():
        key = name[len(prefix) :]
        choices = option.get("choices")
        if not choices or key in skip or option.get("type") == "list" or key not in settings:
            continue
        value = settings[key]
        if not (isinstance(value, str) and value in choices):
            found.append("%s must be one of %s, got %r" % (variable(key), _choice_list(choices), value))
    return found
