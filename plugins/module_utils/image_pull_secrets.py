# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Image pull Secrets: the names a role is given, and whether the Secrets it read are usable.

:func:`name_problems` checks a list of Secret names before anything is read. :func:`found_problems`
takes what ``kubernetes.core.k8s_info`` returned for each name (a loop's results, read with
``no_log``) and names each Secret that is missing or holds no registry credentials. It reads the
Secrets' names and types only, never their data, so its messages can be shown.

:func:`account_plan` decides what a ServiceAccount's ``imagePullSecrets`` list becomes when the
collection applies it again, beside other writers such as OpenShift's ServiceAccount controller,
which appends its own ``<account>-dockercfg-<5 characters>`` entry with an update under its own
field manager.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import dns_subdomain_problem

# The types the kubelet reads registry credentials from.
PULL_SECRET_TYPES = ("kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg")

# A ServiceAccount's imagePullSecrets is an atomic list (x-kubernetes-list-type: atomic, no merge
# key): server-side apply gives the whole list one set of owners, and an update by another writer
# takes it whole. Ownership cannot tell the collection's entries from others', so the collection
# records the names it put there in this annotation (comma-separated; Secret names have no comma).
RECORD_ANNOTATION = "gpuops.training/image-pull-secrets"
# OpenShift's ServiceAccount controller names its own entry here (OpenShift 4.16 on).
OPENSHIFT_PULL_ANNOTATION = "openshift.io/internal-registry-pull-secret-ref"
# Its entries' names: <account>-dockercfg-<5 characters> (the account's name cut short when long).
OPENSHIFT_DOCKERCFG = re.compile(r"-dockercfg-[a-z0-9]{5}$")
LIST_FIELD = "f:imagePullSecrets"


def name_problems(value, variable):
    """Problems of a list of Secret names (each a DNS-1123 subdomain, each once), naming ``variable``."""
    if not isinstance(value, list):
        return ["%s must be a list of Secret names, got %r" % (variable, value)]
    problems = []
    seen = set()
    for index, name in enumerate(value):
        problem = (
            dns_subdomain_problem(name) if isinstance(name, str) else "must be a string, got %r" % (name,)
        )
        if problem:
            problems.append("%s[%d] is not a Secret name: %s" % (variable, index, problem))
        elif name in seen:
            problems.append("%s[%d] repeats %r" % (variable, index, name))
        seen.add(name)
    return problems


def found_problems(results, variable, namespace):
    """One message per Secret of a k8s_info loop's ``results`` that is missing or is not of a
    registry-credentials type; [] when every one is usable."""
    if not isinstance(results, list):
        return [
            "the results of reading %s must be a list (a loop's results), got %s"
            % (variable, type(results).__name__)
        ]
    problems = []
    for result in results:
        if not isinstance(result, dict) or result.get("skipped"):
            continue
        name = result.get("item")
        resources = result.get("resources")
        resources = resources if isinstance(resources, list) else []
        if not resources:
            problems.append(
                "Secret %s, named in %s, does not exist in namespace %s: create it first (for example with"
                " kubectl create secret docker-registry %s -n %s ...) or remove it from %s"
                % (name, variable, namespace, name, namespace, variable)
            )
            continue
        kind = resources[0].get("type") if isinstance(resources[0], dict) else None
        if kind not in PULL_SECRET_TYPES:
            problems.append(
                "Secret %s, named in %s, is of type %s; the kubelet reads registry credentials only from %s"
                % (name, variable, kind, " or ".join(PULL_SECRET_TYPES))
            )
    return problems


def _names(entries):
    return [(entry.get("name") or "") if isinstance(entry, dict) else "" for entry in entries or []]


def _unique(names):
    seen = set()
    return [name for name in names if not (name in seen or seen.add(name))]


def list_owners(account):
    """The (manager, operation) pairs that own the account's imagePullSecrets list."""
    owners = []
    for entry in (account.get("metadata") or {}).get("managedFields") or []:
        if isinstance(entry, dict) and LIST_FIELD in (entry.get("fieldsV1") or {}):
            owners.append((entry.get("manager"), entry.get("operation")))
    return owners


def account_problems(account):
    """What makes ``account`` other than a ServiceAccount as the API server returns it, as far as
    :func:`account_plan` reads it (None, no account, is fine); [] when there is nothing."""
    if account is None:
        return []
    if not isinstance(account, dict):
        return ["the ServiceAccount read must be a mapping, got %s" % type(account).__name__]
    metadata = account.get("metadata")
    if not isinstance(metadata, dict):
        return ["the ServiceAccount read has no metadata mapping, got %r" % (metadata,)]
    problems = []
    annotations = metadata.get("annotations")
    if annotations is not None and not isinstance(annotations, dict):
        problems.append("its metadata.annotations must be a mapping, got %r" % (annotations,))
    elif annotations:
        for key in (RECORD_ANNOTATION, OPENSHIFT_PULL_ANNOTATION):
            if key in annotations and not isinstance(annotations[key], str):
                problems.append("its annotation %s must be a string, got %r" % (key, annotations[key]))
    version = metadata.get("resourceVersion")
    if version is not None and not isinstance(version, str):
        problems.append("its metadata.resourceVersion must be a string, got %r" % (version,))
    managed = metadata.get("managedFields")
    if managed is not None and not (
        isinstance(managed, list)
        and all(
            isinstance(entry, dict) and isinstance(entry.get("fieldsV1") or {}, dict) for entry in managed
        )
    ):
        problems.append("its metadata.managedFields must be a list of {manager, operation, fieldsV1}")
    entries = account.get("imagePullSecrets")
    if entries is not None and not (
        isinstance(entries, list)
        and all(isinstance(entry, dict) and isinstance(entry.get("name") or "", str) for entry in entries)
    ):
        problems.append("its imagePullSecrets must be a list of {name}, got %r" % (entries,))
    return problems


def account_plan(wanted, account, field_manager):
    """What to apply for a ServiceAccount's ``imagePullSecrets`` when the collection wants the
    Secrets ``wanted`` (names, in order) on it and ``account`` is the account as the server holds
    it (a dict, as kubernetes.core.k8s_info returns it, managedFields included; None when there
    is none yet; check it with :func:`account_problems` first). ``field_manager`` is the
    collection's server-side apply field manager.

    The collection's entries are the names the account's record annotation lists; an account
    without it (applied by a release before the record) has the whole list for the collection's
    when its field manager's apply owns the list, less the entries that look like OpenShift's,
    else none. Every other entry was added by someone else and is kept, after the wanted ones,
    in its order; the collection's entries it no longer wants are removed. The entry OpenShift's
    annotation names is never removed.

    Returns a dict:

    - ``names``: the list to apply, or None to leave the list out of the apply. It is left out
      when nothing needs to change and the collection's apply does not own the list (another
      writer took it): applying the same list would only make the collection a co-owner, a
      change of nothing but managedFields. It is never left out while the collection's apply
      owns it: an apply without a field its manager alone owns removes the field.
    - ``record``: the record annotation's value, or None to leave it out (no entry of the
      collection's to record).
    - ``kept``, ``removed``: the names kept as others', and the collection's names removed.
    - ``force``: True when the list must change while another field manager owns it: an apply
      without force would conflict with it. The list applied then holds that writer's entries.
    - ``resource_version``: the version the plan was made from, for a forced apply to be refused
      (409) if the account changed since, rather than drop an entry added meanwhile.
    """
    wanted = list(wanted or [])
    if not account:
        return {
            "names": wanted or None,
            "record": ",".join(wanted) if wanted else None,
            "kept": [],
            "removed": [],
            "force": False,
            "resource_version": None,
        }
    metadata = account.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    current = _names(account.get("imagePullSecrets"))
    owners = list_owners(account)
    ours = (field_manager, "Apply")
    owned = ours in owners
    openshift = annotations.get(OPENSHIFT_PULL_ANNOTATION)
    record = annotations.get(RECORD_ANNOTATION)
    if isinstance(record, str):
        added = {name for name in record.split(",") if name}
    elif owned:
        added = {name for name in current if not OPENSHIFT_DOCKERCFG.search(name)}
    else:
        added = set()
    added.discard(openshift)
    kept = [name for name in _unique(current) if name not in wanted and name not in added]
    removed = [name for name in _unique(current) if name in added and name not in wanted]
    names = wanted + kept
    change = names != current
    carry = owned or change
    force = change and any(owner != ours for owner in owners)
    return {
        "names": names if carry else None,
        "record": ",".join(wanted) if carry or wanted else None,
        "kept": kept,
        "removed": removed,
        "force": force,
        "resource_version": metadata.get("resourceVersion") if force else None,
    }
