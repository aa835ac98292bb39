# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Attributes shared by modules; use ``gpuops.training.attributes.read_only``."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options: {}
"""

    # Modules that read and report: they change nothing, so they run the same in check mode.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is nothing to show.
"""
