# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The AnsibleModule every module of this collection is built with.

ansible-core's argument validator lets a few wrong shapes escape as Python exceptions
instead of a failed result: a boolean, number or null where a dict with suboptions is
expected (or inside a list of them), and an infinite float for an int option. The module
would die with a traceback. Here they end in one message naming the argument, like every
other validation failure.
"""

from __future__ import annotations

import math

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

# What the validator can let escape for a shape it does not expect.
_VALIDATOR_ESCAPES = (TypeError, OverflowError, ValueError)


def build_module(argument_spec, **kwargs):
    """AnsibleModule(argument_spec, **kwargs), failing cleanly where ansible-core would not."""
    try:
        return AnsibleModule(argument_spec=argument_spec, **kwargs)
    except _VALIDATOR_ESCAPES as error:
        # The parameters are read again by a module that accepts anything, keeping no_log,
        # only to report the wrong argument in ansible's usual way.
        lenient = AnsibleModule(argument_spec=_lenient_spec(argument_spec), supports_check_mode=True)
        lenient.fail_json(msg=wrong_shape_message(argument_spec, lenient.params, error))


def _lenient_spec(argument_spec):
    return {
        name: {
            "type": "raw",
            "no_log": bool(spec.get("no_log")),
            "aliases": list(spec.get("aliases") or []),
        }
        for name, spec in argument_spec.items()
    }


def wrong_shape_message(argument_spec, params, error=None, prefix=""):
    """Name the first argument whose value has a shape the validator cannot handle."""
    for name, spec in argument_spec.items():
        value = params.get(name)
        for alias in spec.get("aliases") or []:
            if value is None:
                value = params.get(alias)
        if value is None:
            continue
        label = prefix + name
        if spec.get("type") == "int" and isinstance(value, float) and not math.isfinite(value):
            return "argument '%s' must be a finite integer, got %r" % (label, value)
        suboptions = spec.get("options")
        if not suboptions:
            continue
        names = ", ".join(sorted(suboptions))
        if spec.get("type") == "list":
            items = value if isinstance(value, list) else [value]
            for index, item in enumerate(items):
                if not isinstance(item, dict):
                    return "argument '%s[%d]' is of type %s; expected a dictionary with keys among: %s" % (
                        label,
                        index,
                        type(item).__name__,
                        names,
                    )
                nested = wrong_shape_message(suboptions, item, prefix="%s[%d]." % (label, index))
                if nested:
                    return nested
        elif not isinstance(value, (dict, str)):
            return "argument '%s' is of type %s; expected a dictionary with keys among: %s" % (
                label,
                type(value).__name__,
                names,
            )
        elif isinstance(value, dict):
            nested = wrong_shape_message(suboptions, value, prefix=label + ".")
            if nested:
                return nested
    if error is None:
        return None
    # Otherwise the argument is found by validating each one on its own.
    for name, spec in argument_spec.items():
        if params.get(name) is None:
            continue
        try:
            ArgumentSpecValidator({name: spec}).validate({name: params[name]})
        except _VALIDATOR_ESCAPES as single_error:
            return "argument '%s' could not be validated: %s" % (name, single_error)
    return "the module's arguments could not be validated: %s" % error
