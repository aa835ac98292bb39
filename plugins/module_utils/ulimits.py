# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Resource limits for container runtimes and login sessions: parse, validate, render.

Three syntaxes are handled, all validated before anything is written to a node:

- ``name=soft:hard`` entries, the syntax of CRI-O's ``default_ulimits`` and Docker's
  ``--ulimit``; ``-1`` means unlimited. Rendered as a CRI-O TOML drop-in or as systemd
  ``LimitX=`` directives for a runtime's service (containerd).
- pam_limits entries (``domain type item value``) for ``/etc/security/limits.d/``.

Pure functions only: the filter plugins and the modules call them, and the unit tests
exercise them directly.
"""

from __future__ import annotations

import re

UNLIMITED = -1
# CRI-O and Docker store limits as int64.
MAX_LIMIT = 2**63 - 1

# The names CRI-O and Docker accept (go-units ulimitNameMapping), in their order.
ULIMIT_NAMES = (
    "core",
    "cpu",
    "data",
    "fsize",
    "locks",
    "memlock",
    "msgqueue",
    "nice",
    "nofile",
    "nproc",
    "rss",
    "rtprio",
    "rttime",
    "sigpending",
    "stack",
)

# Items pam_limits understands (limits.conf(5)).
PAM_LIMIT_ITEMS = (
    "core",
    "data",
    "fsize",
    "memlock",
    "nofile",
    "rss",
    "stack",
    "cpu",
    "nproc",
    "as",
    "maxlogins",
    "maxsyslogins",
    "nonewprivs",
    "priority",
    "locks",
    "sigpending",
    "msgqueue",
    "nice",
    "rtprio",
)
PAM_LIMIT_TYPES = ("soft", "hard", "-")
# Items whose value may be negative (a niceness or a priority), not a size or a count.
PAM_SIGNED_ITEMS = ("nice", "priority")
PAM_UNLIMITED_WORDS = ("unlimited", "infinity", "-1")

_ENTRY_RE = re.compile(r"^([a-z]+)=(-?[0-9]+):(-?[0-9]+)$")
_INT_RE = re.compile(r"^-?[0-9]+$")
# A user, @group, %group, uid/gid range (1000:2000, @500:) or the wildcard `*`.
_PAM_DOMAIN_RE = re.compile(r"^(\*|[%@]?[A-Za-z0-9_][A-Za-z0-9_.-]*\$?|[%@]?[0-9]*:[0-9]*)$")


class UlimitError(ValueError):
    """An entry that is not a valid limit; the message names the entry."""


class Ulimit:
    """One ``name=soft:hard`` limit; ``-1`` (UNLIMITED) stands for unlimited."""

    __slots__ = ("name", "soft", "hard")

    def __init__(self, name, soft, hard):
        self.name = name
        self.soft = soft
        self.hard = hard

    def __eq__(self, other):
        return isinstance(other, Ulimit) and (self.name, self.soft, self.hard) == (
            other.name,
            other.soft,
            other.hard,
        )

    def __hash__(self):
        return hash((self.name, self.soft, self.hard))

    def __repr__(self):
        return "Ulimit(%r, %d, %d)" % (self.name, self.soft, self.hard)

    def __str__(self):
        return "%s=%d:%d" % (self.name, self.soft, self.hard)

    def as_dict(self):
        return {"name": self.name, "soft": self.soft, "hard": self.hard}


def _limit_rank(value):
    """Order limits with unlimited above every number."""
    return float("inf") if value == UNLIMITED else value


def parse_ulimit(entry):
    """Parse one ``name=soft:hard`` entry into a Ulimit, or raise UlimitError naming it."""
    if not isinstance(entry, str):
        raise UlimitError("ulimit entry %r must be a string like 'memlock=-1:-1'" % (entry,))
    text = entry.strip()
    match = _ENTRY_RE.match(text)
    if not match:
        if "=" in text and ":" not in text.partition("=")[2]:
            reason = "both soft and hard values are required (write %s:%s)" % (
                text,
                text.partition("=")[2],
            )
        else:
            reason = "expected name=soft:hard with integers, -1 meaning unlimited"
        raise UlimitError("ulimit entry %r is malformed: %s" % (entry, reason))
    name, soft_text, hard_text = match.groups()
    if name not in ULIMIT_NAMES:
        hint = " (CRI-O calls it nproc)" if name == "noproc" else ""
        raise UlimitError(
            "ulimit entry %r has an unknown name %r%s; known names: %s"
            % (entry, name, hint, ", ".join(ULIMIT_NAMES))
        )
    soft, hard = int(soft_text), int(hard_text)
    for value in (soft, hard):
        if value < UNLIMITED:
            raise UlimitError(
                "ulimit entry %r has the negative value %d; use a non-negative integer or -1 for unlimited"
                % (entry, value)
            )
        if value > MAX_LIMIT:
            raise UlimitError("ulimit entry %r has a value above %d" % (entry, MAX_LIMIT))
    if _limit_rank(soft) > _limit_rank(hard):
        raise UlimitError(
            "ulimit entry %r has a soft limit above its hard limit; "
            "the soft limit must not exceed the hard one" % (entry,)
        )
    return Ulimit(name, soft, hard)


def parse_ulimits(entries):
    """Parse a list of entries; every problem is reported at once, each naming its entry.

    Raises UlimitError whose message has one line per bad entry.
    """
    problems = ulimit_problems(entries)
    if problems:
        raise UlimitError("\n".join(problems))
    return [parse_ulimit(entry) for entry in entries]


def ulimit_problems(entries):
    """Return one message per bad entry (an empty list when all are valid)."""
    if isinstance(entries, str) or not isinstance(entries, (list, tuple)):
        return ["ulimits must be a list of 'name=soft:hard' strings, got %s" % type(entries).__name__]
    problems = []
    seen = {}
    for entry in entries:
        try:
            limit = parse_ulimit(entry)
        except UlimitError as error:
            problems.append(str(error))
            continue
        if limit.name in seen:
            problems.append(
                "ulimit entry %r sets %s again (already set by %r); keep one entry per name"
                % (entry, limit.name, seen[limit.name])
            )
        else:
            seen[limit.name] = entry
    return problems


def render_crio_dropin(entries):
    """Render the CRI-O drop-in that sets ``[crio.runtime] default_ulimits``.

    The entries keep the order given (the user's order is what they review in a diff);
    values are normalised (``memlock=-1:-1``) so equal limits always render the same text.
    """
    limits = parse_ulimits(entries)
    lines = ["[crio.runtime]"]
    if limits:
        # One entry per line, as in the MachineConfig OpenShift users already know; no
        # trailing comma, which older TOML parsers reject.
        lines.append("default_ulimits = [")
        lines.append(",\n".join('\t"%s"' % limit for limit in limits))
        lines.append("]")
    else:
        lines.append("default_ulimits = []")
    return "\n".join(lines) + "\n"


def systemd_limit_value(limit):
    """``LimitX=`` value: one number when soft equals hard, else soft:hard; -1 is infinity."""

    def word(value):
        return "infinity" if value == UNLIMITED else str(value)

    if limit.soft == limit.hard:
        return word(limit.soft)
    return "%s:%s" % (word(limit.soft), word(limit.hard))


def render_systemd_limits(entries):
    """Render ``LimitX=`` directive lines (without the ``[Service]`` header)."""
    return [
        "Limit%s=%s" % (limit.name.upper(), systemd_limit_value(limit)) for limit in parse_ulimits(entries)
    ]


class PamLimit:
    """One pam_limits line: domain, type, item, value (an int or the word unlimited)."""

    __slots__ = ("domain", "type", "item", "value")

    def __init__(self, domain, limit_type, item, value):
        self.domain = domain
        self.type = limit_type
        self.item = item
        self.value = value

    def as_dict(self):
        return {"domain": self.domain, "type": self.type, "item": self.item, "value": self.value}


def _describe(entry):
    if isinstance(entry, dict):
        return "{%s}" % ", ".join("%s: %s" % (key, entry[key]) for key in sorted(entry, key=str))
    return repr(entry)


def parse_pam_limit(entry):
    """Validate one limits.d entry given as a dict with domain, type, item and value."""
    if not isinstance(entry, dict):
        raise UlimitError(
            "limits entry %s must be a dict with domain, type, item and value" % _describe(entry)
        )
    missing = [key for key in ("domain", "type", "item", "value") if key not in entry]
    if missing:
        raise UlimitError("limits entry %s lacks %s" % (_describe(entry), ", ".join(missing)))
    unknown = sorted(str(key) for key in entry if key not in ("domain", "type", "item", "value"))
    if unknown:
        raise UlimitError("limits entry %s has unknown keys %s" % (_describe(entry), ", ".join(unknown)))
    domain = str(entry["domain"]).strip()
    limit_type = str(entry["type"]).strip()
    item = str(entry["item"]).strip()
    raw_value = entry["value"]
    if isinstance(raw_value, bool):
        raise UlimitError("limits entry %s has a boolean value" % _describe(entry))
    value_text = str(raw_value).strip()
    if not _PAM_DOMAIN_RE.match(domain):
        raise UlimitError(
            "limits entry %s has an invalid domain %r: use a user, @group, %%group, a uid range or *"
            % (_describe(entry), domain)
        )
    if limit_type not in PAM_LIMIT_TYPES:
        raise UlimitError(
            "limits entry %s has the type %r; use soft, hard or - (both)" % (_describe(entry), limit_type)
        )
    if item not in PAM_LIMIT_ITEMS:
        raise UlimitError(
            "limits entry %s has an unknown item %r; known items: %s"
            % (_describe(entry), item, ", ".join(PAM_LIMIT_ITEMS))
        )
    if value_text.lower() in PAM_UNLIMITED_WORDS and item not in PAM_SIGNED_ITEMS:
        value = "unlimited"
    elif _INT_RE.match(value_text):
        value = int(value_text)
        if item in PAM_SIGNED_ITEMS:
            if item == "nice" and not -20 <= value <= 19:
                raise UlimitError("limits entry %s: nice must be between -20 and 19" % _describe(entry))
        elif value < 0:
            raise UlimitError(
                "limits entry %s has the negative value %d; use a non-negative integer or unlimited"
                % (_describe(entry), value)
            )
    else:
        raise UlimitError(
            "limits entry %s has the value %r; use an integer or unlimited" % (_describe(entry), value_text)
        )
    return PamLimit(domain, limit_type, item, value)


def pam_limit_problems(entries):
    """Return one message per bad limits.d entry (an empty list when all are valid)."""
    if isinstance(entries, (str, dict)) or not isinstance(entries, (list, tuple)):
        return ["limits must be a list of dicts with domain, type, item and value"]
    problems = []
    seen = set()
    for entry in entries:
        try:
            limit = parse_pam_limit(entry)
        except UlimitError as error:
            problems.append(str(error))
            continue
        types = ("soft", "hard") if limit.type == "-" else (limit.type,)
        for limit_type in types:
            key = (limit.domain, limit_type, limit.item)
            if key in seen:
                problems.append(
                    "limits entry %s sets the %s %s of %s a second time"
                    % (_describe(entry), limit_type, limit.item, limit.domain)
                )
                break
            seen.add(key)
    return problems


def parse_pam_limits(entries):
    problems = pam_limit_problems(entries)
    if problems:
        raise UlimitError("\n".join(problems))
    return [parse_pam_limit(entry) for entry in entries]


def render_pam_limits(entries):
    """Render limits.d lines, aligned in columns, in the order given."""
    limits = parse_pam_limits(entries)
    if not limits:
        return ""
    rows = [(limit.domain, limit.type, limit.item, str(limit.value)) for limit in limits]
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    lines = [
        "%s  %s  %s  %s" % (row[0].ljust(widths[0]), row[1].ljust(widths[1]), row[2].ljust(widths[2]), row[3])
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def parse_runtime_ulimit(entry):
    """Read one entry as a runtime reads it from its configuration (go-units' ParseUlimit):
    ``name=soft:hard`` or ``name=value`` (soft and hard both), -1 meaning unlimited.

    Laxer than :func:`parse_ulimit`, which is what the roles accept from a user: this reads
    what a node already has, written by anyone.
    """
    text = entry.strip() if isinstance(entry, str) else ""
    match = re.match(r"^([a-z]+)=(-?[0-9]+)(?::(-?[0-9]+))?$", text)
    if not match or match.group(1) not in ULIMIT_NAMES:
        raise UlimitError("ulimit entry %r is not name=soft:hard or name=value with a known name" % (entry,))
    soft = int(match.group(2))
    hard = int(match.group(3)) if match.group(3) is not None else soft
    return Ulimit(match.group(1), soft, hard)


def limit_text(value):
    """A limit as /proc/PID/limits shows it: the number, or unlimited for -1."""
    return "unlimited" if value in (UNLIMITED, "unlimited") else str(value)
