# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The Kubernetes API's rules for names, label keys and values and resource names.

Each ``*_problem`` function returns ``None`` for a valid value or a short phrase that says
what was expected, so callers can prefix the variable or field it came from. The rules are
those of k8s.io/apimachinery/pkg/util/validation.
"""

from __future__ import annotations

import re

_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def dns_label_problem(value):
    """A DNS-1123 label: what namespaces and most names must be."""
    if not isinstance(value, str) or not value:
        return "must be a DNS-1123 label (lower-case letters, digits and '-'), got %r" % (value,)
    if len(value) > 63:
        return "must be at most 63 characters, got %d (%r)" % (len(value), value)
    if not _DNS_LABEL_RE.match(value):
        return (
            "must be a DNS-1123 label: lower-case letters, digits and '-', starting and ending"
            " with a letter or digit, got %r" % value
        )
    return None


def dns_subdomain_problem(value):
    """A DNS-1123 subdomain: what most object names must be."""
    if not isinstance(value, str) or not value:
        return "must be a DNS-1123 subdomain (lower-case letters, digits, '-' and '.'), got %r" % (value,)
    if len(value) > 253:
        return "must be at most 253 characters, got %d" % len(value)
    if not _DNS_SUBDOMAIN_RE.match(value):
        return (
            "must be a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', starting and"
            " ending with a letter or digit, got %r" % value
        )
    return None


def qualified_name_problem(value, require_prefix=False):
    """A qualified name (``prefix/name`` or ``name``): label keys and extended resources."""
    if not isinstance(value, str) or not value:
        return "must be a qualified name such as example.com/name, got %r" % (value,)
    prefix, slash, name = value.rpartition("/")
    if require_prefix and not slash:
        return "must have a domain prefix, such as nvidia.com/gpu, got %r" % value
    if slash and (not prefix or dns_subdomain_problem(prefix)):
        return "has an invalid prefix %r (a DNS-1123 subdomain such as nvidia.com)" % prefix
    if len(name) > 63 or not _QUALIFIED_NAME_RE.match(name):
        return (
            "has an invalid name part %r (at most 63 letters, digits, '-', '_' or '.', starting"
            " and ending with a letter or digit)" % name
        )
    return None


def label_value_problem(value):
    if not isinstance(value, str):
        return "must be a string, got %s %r" % (type(value).__name__, value)
    if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
        return (
            "must be at most 63 letters, digits, '-', '_' or '.', starting and ending with a"
            " letter or digit, got %r" % value
        )
    return None


def labels_problems(labels, where):
    """Problems of a ``{key: value}`` label map, each prefixed with ``where``."""
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return ["%s must be a mapping of label keys to values, got %s" % (where, type(labels).__name__)]
    problems = []
    for key, value in labels.items():
        problem = qualified_name_problem(key)
        if problem:
            problems.append("%s: label key %r %s" % (where, key, problem))
        problem = label_value_problem(value)
        if problem:
            problems.append("%s: label %s value %s" % (where, key, problem))
    return problems
