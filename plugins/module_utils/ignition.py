# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Ignition 3.x documents and OpenShift MachineConfigs that ship files: build and validate.

The API server stores a MachineConfig's ``spec.config`` as free-form data
(``x-kubernetes-preserve-unknown-fields``): a wrong Ignition version or a mode given as a
string is accepted there and only breaks later, on the nodes, in the machine-config
daemon. So everything here is checked before any API call, and every problem names the
object and the field.

Pure functions only: the filter plugin and the roles call them, the unit tests exercise
them directly.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse

DEFAULT_IGNITION_VERSION = "3.2.0"
MACHINECONFIG_API_VERSION = "machineconfiguration.openshift.io/v1"
# The label a MachineConfigPool's machineConfigSelector matches by convention.
ROLE_LABEL = "machineconfiguration.openshift.io/role"
DATA_URL_PREFIX = "data:text/plain;charset=utf-8;base64,"
DEFAULT_FILE_MODE = 0o644

_IGNITION_VERSION_RE = re.compile(r"^3\.[0-9]+\.[0-9]+(-experimental)?$")
# RFC 1123 subdomain, the rule Kubernetes applies to most object names.
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_OCTAL_MODE_RE = re.compile(r"^0?[0-7]{3,4}$")


class IgnitionError(ValueError):
    """A file or document that is not valid; the message names the field."""


def data_url(content):
    """Encode text as the base64 ``data:`` URL Ignition's ``contents.source`` takes."""
    if not isinstance(content, str):
        raise IgnitionError("file content must be text, got %s" % type(content).__name__)
    return DATA_URL_PREFIX + base64.b64encode(content.encode("utf-8")).decode("ascii")


def decode_data_url(url):
    """Return the bytes a ``data:`` URL carries (base64 or percent-encoded)."""
    if not isinstance(url, str) or not url.startswith("data:"):
        raise IgnitionError("%r is not a data: URL" % (url,))
    header, separator, payload = url[len("data:") :].partition(",")
    if not separator:
        raise IgnitionError("data: URL has no ',' before its payload")
    if header.split(";")[-1] == "base64":
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError) as error:
            raise IgnitionError("data: URL payload is not valid base64 (%s)" % error) from error
    return urllib.parse.unquote_to_bytes(payload)


def parse_mode(mode, where="mode"):
    """Turn 420, 0o644 or the strings '0644' / '644' into the integer Ignition wants.

    YAML 1.1 reads an unquoted 0644 as 420 already; a quoted '0644' is read as octal
    because that is what anyone writing it means (a decimal 644 is a nonsense mode).
    """
    if isinstance(mode, bool):
        raise IgnitionError("%s must be an integer such as 420 (0644), got a boolean" % where)
    if isinstance(mode, int):
        value = mode
    elif isinstance(mode, str) and _OCTAL_MODE_RE.match(mode.strip()):
        value = int(mode.strip(), 8)
    else:
        raise IgnitionError(
            "%s %r is not a file mode; write an integer such as 420 or '0644'" % (where, mode)
        )
    if not 0 <= value <= 0o7777:
        raise IgnitionError("%s %r is outside 0..07777" % (where, mode))
    return value


def ignition_file(path, content, mode=DEFAULT_FILE_MODE, overwrite=True):
    """One ``storage.files`` entry: the content as a base64 data URL, mode as an integer."""
    entry = {
        "path": path,
        "mode": parse_mode(mode, "file %s: mode" % path),
        "overwrite": overwrite,
        "contents": {"source": data_url(content)},
    }
    problems = file_problems(entry, "file %s" % path)
    if problems:
        raise IgnitionError("; ".join(problems))
    return entry


def ignition_config(files, version=DEFAULT_IGNITION_VERSION):
    """An Ignition document shipping ``files`` (dicts with path, content and optional mode)."""
    if isinstance(files, dict) or not isinstance(files, (list, tuple)):
        raise IgnitionError("files must be a list of {path, content, mode} dicts")
    entries = []
    for index, spec in enumerate(files):
        if not isinstance(spec, dict) or "path" not in spec or "content" not in spec:
            raise IgnitionError("files[%d] must be a dict with path and content (and optional mode)" % index)
        unknown = sorted(set(spec) - {"path", "content", "mode", "overwrite"})
        if unknown:
            raise IgnitionError(
                "files[%d] has unknown keys %s; use path, content, mode, overwrite"
                % (index, ", ".join(unknown))
            )
        entries.append(
            ignition_file(
                spec["path"],
                spec["content"],
                spec.get("mode", DEFAULT_FILE_MODE),
                spec.get("overwrite", True),
            )
        )
    return {"ignition": {"version": version}, "storage": {"files": entries}}


def machineconfig(name, pool, files, version=DEFAULT_IGNITION_VERSION, labels=None):
    """A MachineConfig for ``pool`` (its role label) that ships ``files`` through Ignition."""
    if labels is not None and not isinstance(labels, dict):
        raise IgnitionError(
            "labels must be a mapping of label names to values, got %s" % type(labels).__name__
        )
    metadata_labels = {ROLE_LABEL: pool}
    metadata_labels.update(labels or {})
    document = {
        "apiVersion": MACHINECONFIG_API_VERSION,
        "kind": "MachineConfig",
        "metadata": {"name": name, "labels": metadata_labels},
        "spec": {"config": ignition_config(files, version)},
    }
    problems = machineconfig_problems(document)
    if problems:
        raise IgnitionError("\n".join(problems))
    return document


def files_problems(files, version=DEFAULT_IGNITION_VERSION, where="files"):
    """Problems of files given as {path, content, mode} and of the Ignition version, as input.

    The same checks ``ignition_config`` makes, but reported all at once as a list (empty when
    valid) so a role can fail with every problem in one message before any API call.
    """
    problems = []
    if not isinstance(version, str) or not _IGNITION_VERSION_RE.match(version):
        problems.append(
            "ignition version %r is not an Ignition 3.x version string such as '3.2.0'" % (version,)
        )
    if isinstance(files, dict) or not isinstance(files, (list, tuple)):
        return problems + ["%s must be a list of {path, content, mode} dicts" % where]
    seen_paths = set()
    for index, spec in enumerate(files):
        label = "%s[%d]" % (where, index)
        if not isinstance(spec, dict):
            problems.append("%s must be a dict with path, content and optional mode" % label)
            continue
        path = spec.get("path")
        label = "%s (%s)" % (label, path)
        unknown = sorted(str(key) for key in set(spec) - {"path", "content", "mode", "overwrite"})
        if unknown:
            problems.append(
                "%s: unknown keys %s; use path, content, mode, overwrite" % (label, ", ".join(unknown))
            )
        if not isinstance(spec.get("content"), str):
            problems.append("%s: content must be text" % label)
        try:
            mode = parse_mode(spec.get("mode", DEFAULT_FILE_MODE), "%s: mode" % label)
        except IgnitionError as error:
            problems.append(str(error))
            mode = DEFAULT_FILE_MODE
        entry = {"path": path, "mode": mode, "overwrite": spec.get("overwrite", True)}
        problems.extend(file_problems(entry, label))
        if isinstance(path, str):
            if path in seen_paths:
                problems.append("%s: path %s appears twice" % (label, path))
            seen_paths.add(path)
    return problems


def file_problems(entry, where):
    """Problems of one ``storage.files`` entry, each prefixed with ``where``."""
    if not isinstance(entry, dict):
        return ["%s must be a dict" % where]
    problems = []
    path = entry.get("path")
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append("%s: path %r must be an absolute path" % (where, path))
    elif "/../" in path + "/" or "/./" in path + "/" or "//" in path or path.endswith("/"):
        problems.append(
            "%s: path %r must be a normalised file path (no '.', '..', '//' or trailing '/')" % (where, path)
        )
    if "mode" in entry:
        mode = entry["mode"]
        if isinstance(mode, bool) or not isinstance(mode, int):
            problems.append(
                "%s: mode must be an integer (decimal, 420 for 0644), got %s %r"
                % (where, type(mode).__name__, mode)
            )
        elif not 0 <= mode <= 0o7777:
            problems.append("%s: mode %d is outside 0..4095 (07777)" % (where, mode))
    if "overwrite" in entry and not isinstance(entry["overwrite"], bool):
        problems.append("%s: overwrite must be true or false" % where)
    contents = entry.get("contents", {})
    if not isinstance(contents, dict):
        problems.append("%s: contents must be a dict with source" % where)
    elif "source" in contents:
        source = contents["source"]
        if not isinstance(source, str):
            problems.append("%s: contents.source must be a URL string" % where)
        elif source.startswith("data:"):
            try:
                decode_data_url(source)
            except IgnitionError as error:
                problems.append("%s: contents.source: %s" % (where, error))
    return problems


def ignition_problems(config, where="spec.config"):
    """Every problem of an Ignition 3.x document, one message each naming the field."""
    if not isinstance(config, dict):
        return ["%s must be an Ignition document (a dict), got %s" % (where, type(config).__name__)]
    problems = []
    ignition = config.get("ignition")
    version = ignition.get("version") if isinstance(ignition, dict) else None
    if not isinstance(version, str):
        problems.append(
            "%s.ignition.version must be a string such as '3.2.0', got %s %r"
            % (where, type(version).__name__, version)
        )
    elif not _IGNITION_VERSION_RE.match(version):
        problems.append(
            "%s.ignition.version %r is not an Ignition 3.x version such as '3.2.0'" % (where, version)
        )
    storage = config.get("storage", {})
    if not isinstance(storage, dict):
        problems.append("%s.storage must be a dict" % where)
        return problems
    files = storage.get("files", [])
    if not isinstance(files, list):
        problems.append("%s.storage.files must be a list" % where)
        return problems
    seen_paths = set()
    for index, entry in enumerate(files):
        problems.extend(file_problems(entry, "%s.storage.files[%d]" % (where, index)))
        path = entry.get("path") if isinstance(entry, dict) else None
        if isinstance(path, str):
            if path in seen_paths:
                problems.append("%s.storage.files[%d]: path %s appears twice" % (where, index, path))
            seen_paths.add(path)
    return problems


def machineconfig_problems(document):
    """Problems of a MachineConfig document: name, role label and its Ignition config."""
    if not isinstance(document, dict):
        return ["MachineConfig must be a dict"]
    metadata = document.get("metadata") or {}
    if not isinstance(metadata, dict):
        return ["MachineConfig: metadata must be a dict, got %s" % type(metadata).__name__]
    name = metadata.get("name")
    label = "MachineConfig %s" % name
    problems = []
    if document.get("kind") != "MachineConfig" or document.get("apiVersion") != MACHINECONFIG_API_VERSION:
        problems.append("%s: must be apiVersion %s, kind MachineConfig" % (label, MACHINECONFIG_API_VERSION))
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN_RE.match(name):
        problems.append(
            "%s: metadata.name %r must be a lower-case DNS subdomain (a-z, 0-9, '-', '.')" % (label, name)
        )
    labels = metadata.get("labels") or {}
    role = labels.get(ROLE_LABEL) if isinstance(labels, dict) else None
    if not isinstance(role, str) or not role:
        problems.append("%s: metadata.labels[%s] must name the pool's role" % (label, ROLE_LABEL))
    spec = document.get("spec") or {}
    if not isinstance(spec, dict):
        spec = {"config": spec}
    problems.extend("%s: %s" % (label, problem) for problem in ignition_problems(spec.get("config")))
    return problems


def is_dns_subdomain(name):
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN_RE.match(name))
