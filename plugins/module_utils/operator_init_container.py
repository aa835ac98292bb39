# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Training Operator v1's init container, made Guaranteed.

With a Master, the operator adds to every Worker of a PyTorchJob an init container that waits
for the Master's name to resolve. Upstream's template asks for less than its limits (50m/10Mi
against 100m/20Mi): the Workers become Burstable, and a namespace whose LimitRange holds every
container to requests equal to limits (training_namespace's Guaranteed sizing) rejects them.
The operator reads its template from ``/etc/config/initContainer.yaml`` when that file exists
(its ``--pytorch-init-container-template-file`` default): this module writes that file with
requests equal to limits, as a ConfigMap mounted into the operator's Deployment.

Self-contained (the test harness loads it by path to give its own operator the same file).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

CONFIGMAP_NAME = "training-operator-init-container"
CONFIG_DIR = "/etc/config"
TEMPLATE_FILE = "initContainer.yaml"
VOLUME_NAME = "init-container-template"
# The operator reads the file once: a changed template rolls its pod through this annotation.
TEMPLATE_HASH_ANNOTATION = "gpuops.training/init-container-template"
OPERATOR_CONTAINER = "training-operator"

# The operator's Go template: the image, the tries and the Master's address are its own
# placeholders, filled in for each job. The command is upstream's loop, but it judges the
# answer by nslookup's Name: line, not by its exit status: busybox 1.29 and later exit 1 when
# any search domain answers NXDOMAIN, even after the name resolved in the namespace's own
# domain, so with a newer image than upstream's (alpine 3.10) the Workers waited forever.
_TEMPLATE = """\
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: %(cpu)s
      memory: %(memory)s
    requests:
      cpu: %(cpu)s
      memory: %(memory)s
  command: ['sh', '-c', '%(wait)s']
"""
_WAIT_FOR_MASTER = (
    "err=1;for i in $(seq {{.MaxTries}}); do"
    " if nslookup {{.MasterAddr}} | grep -q ^Name:; then err=0 && break; fi;"
    "echo waiting for master; sleep 2; done; exit $err"
)


def _plain_copy(value):
    """A copy of nested mappings and lists as plain dicts and lists. Not copy.deepcopy: on the
    lazily templated containers Ansible (2.19) hands a filter, deep-copying one Deployment took
    26 s with upstream's manifests in the play's variables."""
    if isinstance(value, Mapping):
        return {key: _plain_copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_copy(item) for item in value]
    return value


def _field(parent, key, kind, what):
    """parent[key], set to an empty KIND when missing; ValueError when it is something else."""
    value = parent.setdefault(key, kind())
    if value is None:
        value = parent[key] = kind()
    if not isinstance(value, kind):
        raise ValueError("%s has %s that is not a %s" % (what, key, "mapping" if kind is dict else "list"))
    return value


def _mapping(value):
    return value if isinstance(value, Mapping) else {}


def init_container_template(cpu, memory):
    """The template file's text: the init container with requests equal to limits."""
    return _TEMPLATE % {"cpu": cpu, "memory": memory, "wait": _WAIT_FOR_MASTER}


def _operator_container(objects):
    """The Deployment and container of the operator: the container named training-operator
    (upstream's), or else the only container of the only Deployment (a rendered file of one's
    own). None when neither is there."""
    deployments = [item for item in objects if isinstance(item, Mapping) and item.get("kind") == "Deployment"]
    candidates = []
    for deployment in deployments:
        pod = _mapping(_mapping(_mapping(deployment.get("spec")).get("template")).get("spec"))
        containers = pod.get("containers")
        if isinstance(containers, list):
            candidates += [
                (deployment, container) for container in containers if isinstance(container, Mapping)
            ]
    named = [pair for pair in candidates if pair[1].get("name") == OPERATOR_CONTAINER]
    if named:
        return named[0]
    return candidates[0] if len(deployments) == 1 and len(candidates) == 1 else None


def with_init_container_template(objects, cpu, memory):
    """The operator's objects with the template's ConfigMap (in the Deployment's namespace)
    mounted at /etc/config in its container. Returns new objects; raises ValueError when the
    manifests hold no operator container or it already mounts something at /etc/config."""
    if not isinstance(objects, (list, tuple)):
        raise ValueError("the objects must be a list of Kubernetes objects, got %s" % type(objects).__name__)
    objects = list(objects)
    found = _operator_container(objects)
    if found is None:
        raise ValueError(
            "the manifests hold no Deployment with a container named %s, nor a single Deployment"
            " with a single container" % OPERATOR_CONTAINER
        )
    # Only the Deployment changes, so only it is copied (the CRDs are most of the manifests).
    original, container = found
    deployment = _plain_copy(original)
    container = _operator_container([deployment])[1]
    position = next(index for index, item in enumerate(objects) if item is original)
    objects[position] = deployment
    metadata = _field(deployment, "metadata", dict, "the operator's Deployment")
    template = deployment["spec"]["template"]
    pod = template["spec"]
    mounts = _field(container, "volumeMounts", list, "the operator's container")
    volumes = _field(pod, "volumes", list, "the operator's pod template")
    pod_metadata = _field(template, "metadata", dict, "the operator's pod template")
    annotations = _field(pod_metadata, "annotations", dict, "the operator's pod template metadata")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict) or any(not isinstance(mount, dict) for mount in mounts):
        raise ValueError("the operator's Deployment has labels or volumeMounts that are not mappings")
    taken = [mount for mount in mounts if mount.get("mountPath") == CONFIG_DIR]
    if taken:
        raise ValueError(
            "the operator's container already mounts %s (volume %s)" % (CONFIG_DIR, taken[0].get("name"))
        )
    namespace = metadata.get("namespace")
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": CONFIGMAP_NAME,
            **({"namespace": namespace} if namespace else {}),
            "labels": dict(labels),
        },
        "data": {TEMPLATE_FILE: init_container_template(cpu, memory)},
    }
    annotations[TEMPLATE_HASH_ANNOTATION] = hashlib.sha256(
        configmap["data"][TEMPLATE_FILE].encode()
    ).hexdigest()[:16]
    volumes.append({"name": VOLUME_NAME, "configMap": {"name": CONFIGMAP_NAME}})
    mounts.append({"name": VOLUME_NAME, "mountPath": CONFIG_DIR, "readOnly": True})
    # Before the Deployment, so that its first pod finds the file.
    objects.insert(position, configmap)
    return objects
