# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Image pull Secrets: the names a role is given, and whether the Secrets it read are usable.

:func:`name_problems` checks a list of Secret names before anything is read. :func:`found_problems`
takes what ``kubernetes.core.k8s_info`` returned for each name (a loop's results, read with
``no_log``) and names each Secret that is missing or holds no registry credentials. It reads the
Secrets' names and types only, never their data, so its messages can be shown.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.k8s_names import dns_subdomain_problem

# The types the kubelet reads registry credentials from.
PULL_SECRET_TYPES = ("kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg")


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
