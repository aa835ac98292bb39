# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: validate_ulimits
short_description: Check C(name=soft:hard) ulimit entries and return them normalised
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
description:
  - Checks a list of ulimit entries in the syntax of CRI-O's C(default_ulimits) and Docker's
    C(--ulimit) (V(memlock=-1:-1)) and returns them normalised, in the order given.
  - Known names are C(core), C(cpu), C(data), C(fsize), C(locks), C(memlock), C(msgqueue),
    C(nice), C(nofile), C(nproc), C(rss), C(rtprio), C(rttime), C(sigpending) and C(stack).
  - Values are non-negative integers or V(-1) for unlimited; the soft limit must not exceed
    the hard one. Each name may appear once.
  - Fails naming every bad entry. The same module holds C(ulimit_problems) (the messages as a
    list, empty when valid), C(crio_ulimits_toml) (the CRI-O drop-in text),
    C(systemd_limits) (C(LimitX=) lines for a systemd drop-in), C(pam_limit_problems) and
    C(pam_limits_conf) (C(/etc/security/limits.d/) lines).
options:
  _input:
    description: The entries, for example V(["memlock=-1:-1", "nofile=65536:65536"]).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Stop before any change when an entry is wrong
  ansible.builtin.assert:
    that: crio_limits_ulimits | gpuops.training.ulimit_problems | length == 0
    fail_msg: "{{ crio_limits_ulimits | gpuops.training.ulimit_problems | join('; ') }}"

- name: Render the CRI-O drop-in
  ansible.builtin.copy:
    dest: /etc/crio/crio.conf.d/99-ulimits.conf
    content: "{{ ['memlock=-1:-1', 'nofile=65536:65536'] | gpuops.training.crio_ulimits_toml }}"
    mode: "0644"

- name: Render systemd limits for containerd
  ansible.builtin.debug:
    msg: "{{ ['memlock=-1:-1'] | gpuops.training.systemd_limits }}" # ['LimitMEMLOCK=infinity']
"""

RETURN = r"""
_value:
  description: The entries, normalised (C(memlock=-1:-1)).
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.module_utils.ulimits import (
    UlimitError,
    pam_limit_problems,
    parse_ulimits,
    render_crio_dropin,
    render_pam_limits,
    render_systemd_limits,
    ulimit_problems,
)


def _wrap(function, entries):
    try:
        return function(entries)
    except UlimitError as error:
        raise AnsibleFilterError(str(error)) from error


def validate_ulimits(entries):
    return [str(limit) for limit in _wrap(parse_ulimits, entries)]


def crio_ulimits_toml(entries):
    return _wrap(render_crio_dropin, entries)


def systemd_limits(entries):
    return _wrap(render_systemd_limits, entries)


def pam_limits_conf(entries):
    return _wrap(render_pam_limits, entries)


class FilterModule:
    def filters(self):
        return {
            "validate_ulimits": validate_ulimits,
            "ulimit_problems": ulimit_problems,
            "crio_ulimits_toml": crio_ulimits_toml,
            "systemd_limits": systemd_limits,
            "pam_limit_problems": pam_limit_problems,
            "pam_limits_conf": pam_limits_conf,
        }
