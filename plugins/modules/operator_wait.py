#!/usr/bin/python
# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: operator_wait
short_description: Wait until an operator's CRDs, Deployments, OLM Subscription and ClusterPolicy are ready
description:
  - Polls the CustomResourceDefinitions in O(crds), the Deployments in O(deployments), the OLM
    Subscriptions in O(subscriptions) and the NVIDIA GPU Operator ClusterPolicies in
    O(cluster_policies) until every one is ready, and
    fails after O(timeout) seconds with one line per object that is not, giving its state,
    its conditions and, for a Deployment, what its pods report.
  - A CRD is ready once Established=True; NamesAccepted=False (a name clash) fails at once.
  - A Deployment is ready as C(kubectl rollout status) sees it - the latest generation
    observed, every replica updated and available, no old replica left, Progressing with
    reason C(NewReplicaSetAvailable). When it is not, the message includes each pod's
    problem, such as the scheduler's reason for not placing it (for example that no node
    matches its node selector) or a container's waiting reason (C(ImagePullBackOff)).
  - A ClusterPolicy is ready when C(status.state) is C(ready). C(ignored) - the operator acts
    on one ClusterPolicy per cluster and another came first - fails at once. The
    ClusterPolicy API has no C(observedGeneration), so right after a change its state can
    still be the one from before the change.
  - An OLM Subscription is ready once C(status.installedCSV) names a ClusterServiceVersion
    in phase C(Succeeded); until then the message gives its state and the conditions OLM
    reports (such as an InstallPlan waiting for manual approval).
  - Objects that do not exist yet count as not ready (an OLM install creates CRDs later).
version_added: 0.1.0
author:
  - gpuops.training maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.training.attributes.read_only
  - gpuops.training.kubernetes

options:
  crds:
    description: Names of CustomResourceDefinitions, for example V(pytorchjobs.kubeflow.org).
    type: list
    elements: str
    default: []
  deployments:
    description: Deployments as V(namespace/name), for example V(kubeflow/training-operator).
    type: list
    elements: str
    default: []
  subscriptions:
    description: OLM Subscriptions (C(operators.coreos.com/v1alpha1)) as V(namespace/name).
    type: list
    elements: str
    default: []
  cluster_policies:
    description: Names of NVIDIA GPU Operator ClusterPolicies (C(nvidia.com/v1)), for example V(cluster-policy).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for all objects together before failing.
    type: int
    default: 600
  poll_interval:
    description: Seconds between two reads.
    type: int
    default: 5
requirements:
  - kubernetes (the Python client)
seealso:
  - module: kubernetes.core.k8s_info
  - module: gpuops.training.mcp_wait
"""

EXAMPLES = r"""
- name: Wait until the Training Operator's CRDs are Established and its controller is available
  gpuops.training.operator_wait:
    crds: [pytorchjobs.kubeflow.org, mpijobs.kubeflow.org]
    deployments: [kubeflow/training-operator]
    timeout: 300

- name: Wait until the GPU Operator is up and its ClusterPolicy reports ready
  gpuops.training.operator_wait:
    deployments: [gpu-operator/gpu-operator]
    cluster_policies: [cluster-policy]
    timeout: 1800
    poll_interval: 15
"""

RETURN = r"""
resources:
  description:
    - Per object, the verdict of the last read - C(kind), C(name), C(namespace), C(done),
      C(failed) (will never become ready), C(pending) (one line per unmet check) and
      C(conditions) (a one-line summary); Deployments add C(replicas),
      C(updated_replicas), C(available_replicas) and C(pods) (each not-ready pod with its
      C(problems)); Subscriptions add C(installed_csv) and C(state); ClusterPolicies add
      C(state) and C(operator_namespace).
  returned: always
  type: list
  elements: dict
  sample:
    - kind: Deployment
      name: training-operator
      namespace: kubeflow
      done: false
      failed: false
      pending:
        - 0 of 1 replicas available
        - "pod training-operator-7d9c-x2x: not scheduled: Unschedulable: 0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector."
      conditions: "Available=False (MinimumReplicasUnavailable: Deployment does not have minimum availability.)"
      replicas: 1
      updated_replicas: 1
      available_replicas: 0
      pods:
        - name: training-operator-7d9c-x2x
          problems: ["not scheduled: Unschedulable: 0/2 nodes are available: ..."]
    - kind: ClusterPolicy
      name: cluster-policy
      namespace: null
      done: true
      failed: false
      pending: []
      state: ready
      operator_namespace: gpu-operator
      conditions: "Ready=True (Reconciled: ClusterPolicy is ready as all resources have been successfully reconciled), Error=False (Ready)"
elapsed:
  description: Seconds spent waiting.
  returned: always
  type: float
"""

from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import (
    ApiException,
    build_kubernetes_module,
    client,
    connect,
    connection_error_message,
    poll,
    wait_options_problem,
)
from ansible_collections.gpuops.training.plugins.module_utils.operator_status import (
    clusterpolicy_ready,
    crd_established,
    deployment_available,
    failure_message,
    label_selector,
    not_found,
    subscription_installed,
    timeout_message,
)


def _plain(api, obj):
    """The API's JSON form (camelCase keys) of a client model."""
    return api.sanitize_for_serialization(obj)


def read_crd(api, name):
    return _plain(api, client.ApiextensionsV1Api(api).read_custom_resource_definition(name))


def read_deployment(api, namespace, name):
    return _plain(api, client.AppsV1Api(api).read_namespaced_deployment(name, namespace))


def list_pods(api, namespace, selector):
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
    return _plain(api, pods).get("items") or []


def read_subscription(api, namespace, name):
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "operators.coreos.com", "v1alpha1", namespace, "subscriptions", name
    )


def read_csv(api, namespace, name):
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "operators.coreos.com", "v1alpha1", namespace, "clusterserviceversions", name
    )


def read_cluster_policy(api, name):
    return client.CustomObjectsApi(api).get_cluster_custom_object("nvidia.com", "v1", "clusterpolicies", name)


class ReadError(Exception):
    pass


def _read(reader, *args):
    """The object, or None when it does not exist; other API errors end the wait."""
    try:
        return reader(*args)
    except ApiException as error:
        if error.status == 404:
            return None
        raise ReadError("%s %s" % (error.status, error.reason)) from error


def judge(api, crds, deployments, cluster_policies, subscriptions=()):
    verdicts = []
    for name in crds:
        crd = _read(read_crd, api, name)
        verdicts.append(crd_established(crd) if crd else not_found("CustomResourceDefinition", name))
    for namespace, name in deployments:
        deployment = _read(read_deployment, api, namespace, name)
        if deployment is None:
            verdicts.append(not_found("Deployment", name, namespace))
            continue
        verdict = deployment_available(deployment)
        if not verdict["done"]:
            selector = label_selector((deployment.get("spec") or {}).get("selector"))
            verdict = deployment_available(
                deployment, list_pods(api, namespace, selector) if selector else []
            )
        verdicts.append(verdict)
    for namespace, name in subscriptions:
        subscription = _read(read_subscription, api, namespace, name)
        if subscription is None:
            verdicts.append(not_found("Subscription", name, namespace))
            continue
        installed = (subscription.get("status") or {}).get("installedCSV")
        csv = _read(read_csv, api, namespace, installed) if installed else None
        verdicts.append(subscription_installed(subscription, csv))
    for name in cluster_policies:
        cluster_policy = _read(read_cluster_policy, api, name)
        verdicts.append(
            clusterpolicy_ready(cluster_policy)
            if cluster_policy
            else not_found("ClusterPolicy", name, hint="nothing created it, or its CRD is not installed")
        )
    return verdicts


def main():
    module = build_kubernetes_module(
        {
            "crds": {"type": "list", "elements": "str", "default": []},
            "deployments": {"type": "list", "elements": "str", "default": []},
            "subscriptions": {"type": "list", "elements": "str", "default": []},
            "cluster_policies": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "int", "default": 600},
            "poll_interval": {"type": "int", "default": 5},
        }
    )
    params = module.params
    if not (params["crds"] or params["deployments"] or params["subscriptions"] or params["cluster_policies"]):
        module.fail_json(msg="name at least one of crds, deployments, subscriptions or cluster_policies")
    if wait_options_problem(params):
        module.fail_json(msg=wait_options_problem(params))
    namespaced = {}
    for option in ("deployments", "subscriptions"):
        namespaced[option] = []
        for item in params[option]:
            namespace, _sep, name = item.partition("/")
            if not namespace or not name or "/" in name:
                module.fail_json(msg="%s must be given as namespace/name, got %r" % (option, item))
            namespaced[option].append((namespace, name))

    api = connect(module)

    def read_and_judge():
        try:
            return judge(
                api,
                params["crds"],
                namespaced["deployments"],
                params["cluster_policies"],
                namespaced["subscriptions"],
            )
        except ReadError as error:
            module.fail_json(msg="cannot read the objects to wait for: %s" % error)
        except Exception as error:  # no answer (connection refused, TLS, DNS) or a refused value
            module.fail_json(
                msg=connection_error_message(error, api, params["kubeconfig"], "the objects to wait for")
            )

    outcome, verdicts, elapsed = poll(read_and_judge, params["timeout"], params["poll_interval"])
    if outcome == "done":
        module.exit_json(changed=False, resources=verdicts, elapsed=elapsed)
    message = (
        failure_message(verdicts) if outcome == "failed" else timeout_message(verdicts, params["timeout"])
    )
    module.fail_json(msg=message, resources=verdicts, elapsed=elapsed)


if __name__ == "__main__":
    main()
