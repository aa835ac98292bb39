# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a fabric profile leads to expect of two nodes' nccl-tests all_reduce.

The profiles are data (``roles/nccl_tests/vars/fabric_profiles.yml``): per profile the line rate
of one NIC (``gbit_per_nic``), the NICs of a node that carry the traffic (``nics_per_node``),
and the share of their line rate a healthy, tuned pair of nodes reaches as all_reduce bus
bandwidth with ``NCCL_ALGO=Ring`` (``expected_share``; null where no published figure backs
one: such a fabric is judged against the fleet's median alone), each with its source.

With the Ring algorithm on two nodes the bus bandwidth is what crosses the NICs (see the
sources), so the expectation of a pair is ``gbit_per_nic x nics_per_node / 8 x expected_share``
GB/s.
"""

from __future__ import annotations

REQUIRED = ("description", "gbit_per_nic", "nics_per_node", "expected_share", "sources")


class ProfileError(ValueError):
    """A profile name or setting that cannot be used; the message starts with its variable."""


def profile_problems(name, profile):
    """What is wrong with one profile's data (the unit tests hold every shipped profile to it)."""
    problems = []
    if not isinstance(profile, dict):
        return ["%s: a profile must be a mapping, got %r" % (name, profile)]
    problems += ["%s: %s is missing" % (name, key) for key in REQUIRED if key not in profile]
    if not isinstance(profile.get("gbit_per_nic"), (int, float)) or profile.get("gbit_per_nic", 0) <= 0:
        problems.append("%s: gbit_per_nic must be a positive number" % name)
    if not isinstance(profile.get("nics_per_node"), int) or profile.get("nics_per_node", 0) < 1:
        problems.append("%s: nics_per_node must be a positive integer" % name)
    share = profile.get("expected_share")
    if share is not None and not (isinstance(share, (int, float)) and 0 < share <= 1):
        problems.append("%s: expected_share must be null or between 0 and 1" % name)
    sources = profile.get("sources")
    if not isinstance(sources, dict) or not all(
        isinstance(sources.get(key), str) and sources.get(key)
        for key in ("gbit_per_nic", "nics_per_node", "expected_share")
    ):
        problems.append(
            "%s: sources must say where gbit_per_nic, nics_per_node and expected_share come from" % name
        )
    return problems


def select_profile(name, profiles, option="nccl_tests_fabric_profile"):
    """The profile called ``name`` (None for an empty name), or ProfileError naming the option
    and the profiles there are."""
    if name in (None, ""):
        return None
    if not isinstance(name, str) or name not in (profiles or {}):
        raise ProfileError(
            "%s: there is no fabric profile %r; the profiles are: %s"
            % (option, name, ", ".join(sorted(profiles or {})))
        )
    return dict(profiles[name], name=name)


def expected_pair_busbw(profile, nics_per_node=None):
    """The all_reduce bus bandwidth (GB/s) two healthy nodes of this profile reach, or None
    where the profile has no expected share."""
    if not profile or profile.get("expected_share") is None:
        return None
    nics = int(nics_per_node) if nics_per_node else int(profile["nics_per_node"])
    return round(float(profile["gbit_per_nic"]) * nics / 8.0 * float(profile["expected_share"]), 2)


def line_rate_gbyte_s(profile, nics_per_node=None):
    if not profile:
        return None
    nics = int(nics_per_node) if nics_per_node else int(profile["nics_per_node"])
    return float(profile["gbit_per_nic"]) * nics / 8.0
