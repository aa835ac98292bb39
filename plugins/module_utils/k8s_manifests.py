# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Install manifests (a list of Kubernetes objects) checked, ordered and reported on.

The roles that install an operator from its upstream manifests check them before any
API call, apply them in dependency order (namespaces and CRDs before what lives in them,
webhooks last so they never block the objects applied with them), delete them in the
reverse order, and report a rejected object by name with the API server's own message.

Every helper takes the objects as a list or as their JSON text (``manifest_json``): a big
manifest (upstream's CRDs are megabytes) is cheap to hand from task to task as one string,
while Ansible 2.19 templates, tags and copies a list of nested objects at every task that
names it (seconds each).
"""

from __future__ import annotations

import ast
import datetime
import json
import math
import re
import uuid
from collections.abc import Mapping

try:  # on the controller (filters, actions); a module that only reports never parses YAML
    import yaml

    try:  # libyaml's parser: about 10 times as fast as PyYAML's own
        from yaml import CSafeLoader as _SafeLoader
    except ImportError:  # pragma: no cover
        from yaml import SafeLoader as _SafeLoader
except ImportError:  # pragma: no cover
    yaml = _SafeLoader = None

# kustomize's legacy order: what others depend on first, admission webhooks last.
APPLY_ORDER = (
    "Namespace",
    "ResourceQuota",
    "StorageClass",
    "CustomResourceDefinition",
    "ServiceAccount",
    "PodSecurityPolicy",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "ConfigMap",
    "Secret",
    "Endpoints",
    "Service",
    "LimitRange",
    "PriorityClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
)
LAST = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


class ManifestError(ValueError):
    """An argument that is not what the helpers take; the message names it."""


def as_objects(value, what="documents"):
    """``value`` as a list: a list or tuple as it is, a string as the objects' JSON text (a
    JSON list, or the stream ``objects_json`` writes: a ``---`` line before each object's JSON
    on a line of its own), None as empty. Anything else is returned unchanged for the caller
    to name; a string that is neither is a ManifestError naming ``what``."""
    if not isinstance(value, str):
        return value
    try:
        if value.startswith("---"):
            return [json.loads(line) for line in value.split("\n") if line.strip() not in ("", "---")]
        if not value.strip():
            return []
        parsed = json.loads(value)
    except (ValueError, RecursionError) as error:
        raise ManifestError(
            "%s must be a list of Kubernetes objects or their JSON text, got a string that is not JSON (%s)"
            % (what, error)
        ) from None
    if parsed is not None and not isinstance(parsed, list):
        raise ManifestError(
            "%s must be a list of Kubernetes objects or their JSON text, got the JSON text of %s"
            % (what, "a mapping" if isinstance(parsed, dict) else _kind_of_value(parsed))
        )
    return parsed


# What a YAML 1.1 parser (kubernetes.core.k8s's yaml.safe_load_all, which reads a string
# definition) would read otherwise than JSON means: line breaks of YAML's own (NEL, LS, PS),
# which fold inside a quoted scalar, and characters it refuses. JSON leaves them as they are
# inside strings, where the \u escape that replaces them means the same to both.
_YAML_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")


def _yaml_float(number):
    """A float as YAML 1.1 reads it back: with a dot before its exponent (1.0e+20, not 1e+20,
    which YAML reads as a string), .inf and .nan for the non-finite ones."""
    if math.isnan(number):
        return ".nan"
    if number in (float("inf"), float("-inf")):
        return "-.inf" if number < 0 else ".inf"
    text = repr(number)
    if "." not in text and "e" in text:
        mantissa, exponent = text.split("e")
        text = "%s.0e%s" % (mantissa, exponent)
    return text


def _json_safe(value, floats):
    """``value`` ready for json.dumps: dates as ISO text (as Ansible's JSON encoder writes
    them), and each float that YAML would read otherwise replaced by a placeholder string,
    recorded in ``floats``. Containers are copied only where something changed."""
    if isinstance(value, dict):
        copied = {key: _json_safe(item, floats) for key, item in value.items()}
        return value if all(copied[key] is value[key] for key in value) else copied
    if isinstance(value, list):
        copied = [_json_safe(item, floats) for item in value]
        return value if all(new is old for new, old in zip(copied, value, strict=True)) else copied
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, float) and not isinstance(value, bool):
        text = _yaml_float(value)
        if text != repr(value):
            placeholder = "gpuops-float-%s-%d" % (floats["nonce"], len(floats["texts"]))
            floats["texts"][placeholder] = text
            return placeholder
    return value


def objects_json(items):
    """The JSON text of a list of objects as a multi-document YAML stream: ``---`` and each
    object's JSON on a line of its own (JSON without spaces holds no line break), which YAML
    1.1 (kubernetes.core.k8s reading a string ``definition``) reads as the same objects, one
    document each; no objects is an empty text."""
    floats = {"nonce": uuid.uuid4().hex, "texts": {}}
    try:
        text = "".join(
            "---\n%s\n" % json.dumps(item, ensure_ascii=False, separators=(",", ":"))
            for item in _json_safe(list(items), floats)
        )
    except (TypeError, ValueError, RecursionError) as error:
        raise ManifestError("the objects cannot be written as JSON: %s" % error) from None
    text = _YAML_UNSAFE.sub(lambda match: "\\u%04x" % ord(match.group()), text)
    for placeholder, number in floats["texts"].items():
        text = text.replace('"%s"' % placeholder, number)
    return text


def same_form(given, items):
    """``items`` in the form the caller gave its objects in: JSON text for a string, else
    the list."""
    return objects_json(items) if isinstance(given, str) else items


def manifest_json(text, labels=None):
    """The objects of a multi-document YAML text (a rendered kustomization, a manifest file)
    as one JSON text: parsed with libyaml, empty documents dropped, Lists unpacked, sorted for
    applying (``apply_order``) and labelled (``with_labels``)."""
    if not isinstance(text, str):
        raise ManifestError("the manifests must be YAML text, got %s" % _kind_of_value(text))
    if yaml is None:  # pragma: no cover
        raise ManifestError("reading the manifests needs PyYAML on the controller")
    try:
        # str.__str__: libyaml takes an exact str only, not Ansible's tagged str.
        documents = list(yaml.load_all(str.__str__(text), Loader=_SafeLoader))
    except yaml.YAMLError as error:
        raise ManifestError("the manifests are not valid YAML: %s" % error) from None
    except RecursionError:
        raise ManifestError("the manifests are not valid YAML: nested too deeply") from None
    return objects_json(with_labels(apply_order(documents), labels))


def _metadata_of(document):
    metadata = document.get("metadata") if isinstance(document, dict) else None
    return metadata if isinstance(metadata, dict) else {}


def _string_list(value, what):
    """``value`` as a list of strings (None is empty); ManifestError naming ``what`` otherwise."""
    if value is None:
        return []
    if isinstance(value, (str, dict)) or not isinstance(value, (list, tuple, set)):
        raise ManifestError("%s must be a list of strings, got %s" % (what, _kind_of_value(value)))
    if not all(isinstance(item, str) for item in value):
        raise ManifestError("%s must be a list of strings, got %r" % (what, list(value)))
    return list(value)


def object_ref(document):
    """``Kind namespace/name`` or ``Kind name``."""
    if not isinstance(document, dict):
        return "(not an object)"
    metadata = _metadata_of(document)
    name = metadata.get("name") or "(no name)"
    if metadata.get("namespace"):
        name = "%s/%s" % (metadata["namespace"], name)
    return "%s %s" % (document.get("kind") or "(no kind)", name)


def objects(documents):
    """The objects of a parsed multi-document YAML (or their JSON text): empty documents
    dropped, Lists unpacked."""
    documents = as_objects(documents)
    if documents is not None and (
        isinstance(documents, (str, dict)) or not isinstance(documents, (list, tuple))
    ):
        raise ManifestError(
            "documents must be a list of Kubernetes objects or their JSON text, got %s"
            % _kind_of_value(documents)
        )
    found = []
    for document in documents or []:
        if document is None:
            continue
        if isinstance(document, dict) and document.get("kind") == "List" and "items" in document:
            items = document.get("items") or []
            if not isinstance(items, list):
                raise ManifestError(
                    "documents: a List's items must be a list, got %s" % _kind_of_value(items)
                )
            found.extend(items)
        else:
            found.append(document)
    return found


def _kind_of_value(value):
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__


def manifest_problems(documents, required=(), what="the manifests"):
    """Every problem of a list of objects as messages; empty when they can be applied.

    ``required`` names objects that must be among them, as ``Kind/name``.
    """
    problems = []
    try:
        items = objects(documents)
        required = _string_list(required, "required")
    except ManifestError as error:
        return ["%s: %s" % (what, error)]
    if not items:
        return ["%s hold no Kubernetes objects" % what]
    seen = {}
    for index, document in enumerate(items):
        where = "object %d" % (index + 1)
        if not isinstance(document, dict):
            problems.append("%s is not a mapping but %s" % (where, _kind_of_value(document)))
            continue
        metadata = document.get("metadata")
        missing = [field for field in ("apiVersion", "kind") if not isinstance(document.get(field), str)]
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            missing.append("metadata.name")
        if missing:
            problems.append("%s (%s) lacks %s" % (where, object_ref(document), ", ".join(missing)))
            continue
        if not isinstance(metadata.get("namespace", ""), str):
            problems.append(
                "%s (%s) has a metadata.namespace that is not a string" % (where, object_ref(document))
            )
            continue
        if document["kind"] == "Deployment" and not metadata.get("namespace"):
            problems.append("%s (%s) has no metadata.namespace" % (where, object_ref(document)))
        group = document["apiVersion"].rpartition("/")[0]
        key = (group, document["kind"], metadata.get("namespace") or "", metadata["name"])
        if key in seen:
            problems.append("%s (%s) repeats object %d" % (where, object_ref(document), seen[key] + 1))
        else:
            seen[key] = index
    present = {
        "%s/%s" % (document.get("kind"), _metadata_of(document).get("name"))
        for document in items
        if isinstance(document, dict)
    }
    for wanted in required:
        if wanted not in present:
            problems.append("%s have no %s" % (what, wanted.replace("/", " ", 1)))
    return problems


def apply_order(documents):
    """Objects sorted for applying (stable within a kind)."""
    items = objects(documents)

    def rank(document):
        kind = document.get("kind") if isinstance(document, dict) else None
        if kind in APPLY_ORDER:
            return APPLY_ORDER.index(kind)
        if kind in LAST:
            return len(APPLY_ORDER) + 1 + LAST.index(kind)
        return len(APPLY_ORDER)

    return sorted(items, key=rank)


def with_labels(documents, labels):
    """The objects with ``labels`` added to each one's metadata; labels an object already
    has keep their value.

    An object applied server-side that sets no field but its name (a bare Namespace) is
    owned by no field manager, and the API server rewrites it on the next apply (it records
    a ``before-first-apply`` manager), so a second run would report a change. A label the
    role owns on every object keeps re-runs quiet.
    """
    if labels is not None and not isinstance(labels, dict):
        raise ManifestError(
            "labels must be a mapping of label names to values, got %s" % _kind_of_value(labels)
        )
    labelled = []
    for document in objects(documents):
        if isinstance(document, dict) and isinstance(document.get("metadata"), dict) and labels:
            metadata = dict(document["metadata"])
            merged = dict(labels)
            merged.update(metadata.get("labels") or {})
            metadata["labels"] = merged
            document = dict(document, metadata=metadata)
        labelled.append(document)
    return labelled


def _stub(document):
    """What a deletion needs of an object: apiVersion, kind, name and namespace."""
    metadata = _metadata_of(document)
    stub = {"name": metadata.get("name")}
    if metadata.get("namespace"):
        stub["namespace"] = metadata["namespace"]
    return {"apiVersion": document.get("apiVersion"), "kind": document.get("kind"), "metadata": stub}


def delete_order(documents, keep_kinds=()):
    """Objects (apiVersion, kind, name, namespace) in the reverse of the apply order,
    without the kinds to keep."""
    keep_kinds = _string_list(keep_kinds, "keep_kinds")
    items = apply_order(documents)
    for index, document in enumerate(items):
        if not isinstance(document, dict):
            raise ManifestError(
                "documents: object %d is not a mapping but %s" % (index + 1, _kind_of_value(document))
            )
    return [_stub(document) for document in reversed(items) if document.get("kind") not in keep_kinds]


def by_kind(documents, kind):
    return [
        document
        for document in objects(documents)
        if isinstance(document, dict) and document.get("kind") == kind
    ]


def object_refs(documents):
    """``object_ref`` of each object: what a task needs to name them, without the objects."""
    return [object_ref(document) for document in objects(documents)]


def names(documents, kind):
    """Names of the objects of one kind; ``namespace/name`` for namespaced ones."""
    found = []
    for document in by_kind(documents, kind):
        metadata = _metadata_of(document)
        name = metadata.get("name")
        found.append("%s/%s" % (metadata["namespace"], name) if metadata.get("namespace") else name)
    return found


def split_by_namespaces(documents, existing_namespaces):
    """``(ready, deferred)``: objects that can be dry-run now, and those in a namespace that
    does not exist yet (a server-side dry run of them fails with NotFound until the
    namespace is really created). Cluster-scoped objects are always ready."""
    existing = set(_string_list(existing_namespaces, "existing_namespaces"))
    ready, deferred = [], []
    for document in objects(documents):
        namespace = _metadata_of(document).get("namespace")
        waits = namespace and (not isinstance(namespace, str) or namespace not in existing)
        (deferred if waits else ready).append(document)
    return ready, deferred


def api_error_message(text):
    """The API server's message from a kubernetes.core error such as
    ``Failed to apply object: b'{"kind":"Status",...,"message":"..."}'``; the text as is
    when it holds no Status."""
    text = str(text or "")
    for opener in ("b'", 'b"'):
        start = text.find(opener)
        if start < 0:
            continue
        try:
            body = ast.literal_eval(text[start:])
            status = json.loads(body.decode("utf-8", "replace") if isinstance(body, bytes) else body)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    start = text.find("{")
    if start >= 0:
        try:
            # The Status, with whatever text follows it.
            status = json.JSONDecoder().raw_decode(text, start)[0]
        except (ValueError, RecursionError):
            return text
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])
    return text


def _paired(documents, results):
    """(object, result) pairs, as far as both go."""
    if results is not None and (isinstance(results, (str, dict)) or not isinstance(results, (list, tuple))):
        raise ManifestError(
            "results must be a list of kubernetes.core.k8s results, got %s" % _kind_of_value(results)
        )
    items, results = objects(documents), list(results or [])
    return [(items[index], results[index]) for index in range(min(len(items), len(results)))]


def rejected(documents, results):
    """``Kind ns/name: message`` for every object whose result carries an ``error``.

    ``results`` are kubernetes.core.k8s results in the order of ``documents`` (a
    ``definition`` list applied with ``continue_on_error``).
    """
    lines = []
    for document, result in _paired(documents, results):
        error = (result or {}).get("error") if isinstance(result, dict) else None
        if error:
            message = api_error_message(error.get("msg") if isinstance(error, dict) else error)
            lines.append("%s: %s" % (object_ref(document), message))
    return lines


def changed(documents, results):
    """References of the objects whose result says changed."""
    return [
        object_ref(document)
        for document, result in _paired(documents, results)
        if isinstance(result, dict) and result.get("changed") and not result.get("error")
    ]


def _plain(value):
    """Nested mappings and lists as plain dicts and lists. Not copy.deepcopy: on the lazily
    templated containers Ansible 2.19 hands a plugin that copies the templating context too."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def call_results(documents, registered):
    """The per-object results of one kubernetes.core.k8s call over ``documents``, in their
    order: its ``result.results`` for several objects, the result itself for one, none when the
    call was skipped."""
    if registered is None or registered == "":
        return []
    if not isinstance(registered, dict):
        raise ManifestError(
            "results must be the registered result of kubernetes.core.k8s, got %s"
            % _kind_of_value(registered)
        )
    if not registered or registered.get("skipped"):
        return []
    if len(objects(documents)) == 1:
        return [registered]
    inner = registered.get("result")
    if isinstance(inner, dict) and isinstance(inner.get("results"), list):
        return inner["results"]
    raise ManifestError("results: a kubernetes.core.k8s call over several objects has result.results")


def _answered(result):
    """Whether the API server answered the call that failed (its error holds the server's
    Status), rather than the call never reaching it."""
    error = result.get("error")
    text = str(error.get("msg") if isinstance(error, dict) else error)
    return api_error_message(text) != text


def apply_report(documents, registered, deferred=(), what="the objects", check_mode=False):
    """What one kubernetes.core.k8s call over ``documents`` did, object by object.

    ``registered`` is the call's registered result (``continue_on_error: true``);
    ``deferred`` the objects check mode did not send (their namespace does not exist yet).
    Returns ``changed``, ``changed_objects``, ``deferred_objects``, ``rejected_objects`` (one
    ``Kind ns/name: server's message`` line each), ``diff`` (one entry per changed object
    that has one, headed with the object) and ``msg``: every rejected object when there is
    one (with ``failed``; headed "The API server rejected" when the server answered every
    failed call), else a one-line summary.
    """
    items = objects(documents)
    results = call_results(items, registered)
    refused = rejected(items, results)
    touched = changed(items, results)
    try:
        later = [object_ref(document) for document in objects(deferred)]
    except ManifestError as error:
        raise ManifestError("deferred: %s" % error) from error
    diffs = []
    for document, result in _paired(items, results):
        diff = result.get("diff") if isinstance(result, dict) and result.get("changed") else None
        if isinstance(diff, dict) and "before" in diff and "after" in diff:
            reference = object_ref(document)
            diffs.append(
                {
                    "before_header": reference,
                    "after_header": reference,
                    "before": _plain(diff["before"]),
                    "after": _plain(diff["after"]),
                }
            )
    report = {
        "changed": bool(touched or later),
        "changed_objects": touched,
        "deferred_objects": later,
        "rejected_objects": refused,
        "diff": diffs,
    }
    if refused:
        report["failed"] = True
        if all(_answered(result) for result in results if isinstance(result, dict) and result.get("error")):
            header = "The API server rejected %d of the %d objects of %s:" % (len(refused), len(items), what)
        else:  # some never reached it (the server did not answer): each line says why
            header = "%d of the %d objects of %s failed:" % (len(refused), len(items), what)
        report["msg"] = "\n- ".join([header] + refused)
        return report
    verb = "would change" if check_mode else "changed"
    summary = "%d of the %d objects of %s %s" % (len(touched), len(items), what, verb)
    if touched:
        summary += ": " + ", ".join(touched)
    if later:
        summary += "; check mode would also create %d in namespaces it would create: %s" % (
            len(later),
            ", ".join(later),
        )
    report["msg"] = summary
    return report
