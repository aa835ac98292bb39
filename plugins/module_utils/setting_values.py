# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How role variables handed to the builders are read: Ansible templating turns numbers and
booleans into strings on the way, so "8" is 8 and "true" is True, and nothing else is."""

from __future__ import annotations

import re

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def as_int(value):
    """An int from an int or a string of digits; None otherwise (bools are not ints here)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.match(r"^-?[0-9]+$", value.strip()):
        return int(value.strip())
    return None


def as_bool(value):
    if isinstance(value, bool):
        return value
    return isinstance(value, str) and value.strip().lower() in ("true", "yes", "1", "on")
