"""The Training Operator v1's init container template: requests equal to limits, mounted where
the operator reads it, and bad values named before anything is applied."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.training_operator_init_container import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils import operator_init_container

FILTERS = FilterModule().filters()
INIT_CONTAINER = FILTERS["training_operator_init_container"]
PROBLEMS = FILTERS["training_operator_init_container_problems"]

# The shape of upstream's v1.9.2 Deployment (manifests/base/deployment.yaml, namespaced by the
# standalone overlay).
UPSTREAM = yaml.safe_load_all("""
apiVersion: v1
kind: Namespace
metadata: {name: kubeflow}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: training-operator
  namespace: kubeflow
  labels: {control-plane: kubeflow-training-operator, app.kubernetes.io/managed-by: gpuops-training}
spec:
  selector: {matchLabels: {control-plane: kubeflow-training-operator}}
  template:
    metadata:
      labels: {control-plane: kubeflow-training-operator}
      annotations: {sidecar.istio.io/inject: "false"}
    spec:
      containers:
        - name: training-operator
          command: [/manager]
          image: kubeflow/training-operator
          volumeMounts:
            - {mountPath: /tmp/k8s-webhook-server/serving-certs, name: cert, readOnly: true}
      volumes:
        - {name: cert, secret: {secretName: training-operator-webhook-cert}}
""")
OBJECTS = list(UPSTREAM)


def fill_go_placeholders(template: str) -> str:
    """What the operator's text/template does with its three fields for one job."""
    values = {"InitContainerImage": "busybox:1", "MaxTries": "100", "MasterAddr": "job-master-0"}
    return re.sub(r"\{\{\.(\w+)\}\}", lambda match: values[match.group(1)], template)


def test_the_configmap_holds_a_template_with_requests_equal_to_limits_before_the_deployment():
    objects = INIT_CONTAINER(OBJECTS, cpu="200m", memory="32Mi")
    kinds = [item["kind"] for item in objects]
    assert kinds == ["Namespace", "ConfigMap", "Deployment"]
    configmap = objects[1]
    assert configmap["metadata"]["name"] == "training-operator-init-container"
    assert configmap["metadata"]["namespace"] == "kubeflow"
    assert configmap["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops-training"
    template = configmap["data"]["initContainer.yaml"]
    # The operator's own placeholders stay for it to fill in.
    assert {"{{.InitContainerImage}}", "{{.MaxTries}}", "{{.MasterAddr}}"} <= set(
        re.findall(r"\{\{\.\w+\}\}", template)
    )
    (container,) = yaml.safe_load(fill_go_placeholders(template))
    assert container["name"] == "init-pytorch" and container["image"] == "busybox:1"
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "32Mi"},
        "limits": {"cpu": "200m", "memory": "32Mi"},
    }
    assert "nslookup job-master-0" in container["command"][2]


# nslookup's output for the Master's short name, from the namespace rn-1 with the search list
# rn-1.svc.cluster.local svc.cluster.local cluster.local: busybox 1.29 and later (as on the
# real node of the harness, 2026-11-26) print the answer of the first domain and exit 1 for the
# NXDOMAIN of the others; busybox 1.28 prints one answer and exits 0.
NSLOOKUP_OUTPUTS = {
    "busybox 1.37, resolved": (
        1,
        "Server:\t\t10.245.0.1\nAddress:\t10.245.0.1:53\n\nName:\tjob-master-0.rn-1.svc.cluster.local\n"
        "Address: 10.245.0.207\n\n** server can't find job-master-0.svc.cluster.local: NXDOMAIN\n\n"
        "** server can't find job-master-0.cluster.local: NXDOMAIN\n",
    ),
    "busybox 1.28, resolved": (
        0,
        "Server:    10.96.0.10\nAddress 1: 10.96.0.10 kube-dns.kube-system.svc.cluster.local\n\n"
        "Name:      job-master-0\nAddress 1: 10.244.0.7 job-master-0.rn-1.svc.cluster.local\n",
    ),
    "busybox 1.37, not yet": (
        1,
        "Server:\t\t10.245.0.1\nAddress:\t10.245.0.1:53\n\n"
        "** server can't find job-master-0.rn-1.svc.cluster.local: NXDOMAIN\n\n",
    ),
    "busybox 1.28, not yet": (1, "Server:    10.96.0.10\n\nnslookup: can't resolve 'job-master-0'\n"),
}


@pytest.mark.parametrize("answer", sorted(NSLOOKUP_OUTPUTS))
def test_the_wait_for_the_master_ends_when_its_name_resolves_whatever_nslookup_exits_with(tmp_path, answer):
    status, output = NSLOOKUP_OUTPUTS[answer]
    (tmp_path / "nslookup.out").write_text(output)
    fakes = {
        "nslookup": '[ "$1" = job-master-0 ] || exit 2; cat "%s"; exit %d'
        % (tmp_path / "nslookup.out", status),
        "sleep": "exit 0",
    }
    for name, body in fakes.items():
        (tmp_path / name).write_text("#!/bin/sh\n" + body + "\n")
        (tmp_path / name).chmod(0o755)
    template = operator_init_container.init_container_template("100m", "20Mi")
    (container,) = yaml.safe_load(fill_go_placeholders(template).replace("seq 100", "seq 3"))
    shell, flag, script = container["command"]
    run = subprocess.run(
        [shell, flag, script],
        env={"PATH": "%s:/usr/bin:/bin" % tmp_path},
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    resolved = answer.endswith("resolved")
    assert run.returncode == (0 if resolved else 1), run
    assert run.stdout.count("waiting for master") == (0 if resolved else 3), run.stdout


def test_the_deployment_mounts_it_where_the_operator_reads_and_a_new_template_rolls_the_pod():
    objects = INIT_CONTAINER(OBJECTS)
    pod = objects[2]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert {"name": "init-container-template", "mountPath": "/etc/config", "readOnly": True} in container[
        "volumeMounts"
    ]
    assert {
        "name": "init-container-template",
        "configMap": {"name": "training-operator-init-container"},
    } in pod["spec"]["volumes"]
    # Upstream's own mount and annotations are kept; the input is not changed.
    assert (
        len(container["volumeMounts"]) == 2
        and pod["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    )
    assert len(OBJECTS[1]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]) == 1
    digest = pod["metadata"]["annotations"]["gpuops.training/init-container-template"]
    assert (
        digest
        == INIT_CONTAINER(OBJECTS)[2]["spec"]["template"]["metadata"]["annotations"][
            "gpuops.training/init-container-template"
        ]
    )
    changed = INIT_CONTAINER(OBJECTS, cpu="150m")[2]["spec"]["template"]["metadata"]["annotations"]
    assert changed["gpuops.training/init-container-template"] != digest


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            {"cpu": "lots", "memory": "20Mi"},
            "training_operator_init_container_resources.cpu 'lots' is not a Kubernetes quantity",
        ),
        ({"cpu": "100m"}, "training_operator_init_container_resources.memory is required"),
        (
            {"cpu": 0, "memory": "20Mi"},
            "training_operator_init_container_resources.cpu must be more than 0, got 0",
        ),
        (
            {"cpu": "100m", "memory": "20Mi", "gpu": 1},
            "training_operator_init_container_resources takes cpu and memory only, got gpu",
        ),
    ],
)
def test_bad_resources_are_named_with_the_variable(resources, message):
    problems = PROBLEMS(resources, "training_operator_init_container_resources")
    assert len(problems) == 1 and problems[0].startswith(message), problems


def test_valid_resources_have_no_problems_and_the_filter_refuses_what_it_cannot_do():
    assert PROBLEMS({"cpu": "100m", "memory": "20Mi"}, "x") == []
    with pytest.raises(AnsibleFilterError, match="training_operator_init_container.memory '20 Mi'"):
        INIT_CONTAINER(OBJECTS, memory="20 Mi")
    with pytest.raises(AnsibleFilterError, match="no Deployment with a container named training-operator"):
        INIT_CONTAINER(OBJECTS[:1])
    # A rendered file of one's own with one Deployment of one container: that is the operator.
    renamed = yaml.safe_load(yaml.safe_dump(OBJECTS[1]))
    renamed["spec"]["template"]["spec"]["containers"][0]["name"] = "manager"
    (container,) = INIT_CONTAINER([renamed])[1]["spec"]["template"]["spec"]["containers"]
    assert container["volumeMounts"][-1]["mountPath"] == "/etc/config"
    with pytest.raises(AnsibleFilterError, match="nor a single Deployment with a single container"):
        INIT_CONTAINER([renamed, {**renamed, "metadata": {"name": "other", "namespace": "kubeflow"}}])
    mounted = INIT_CONTAINER(OBJECTS)
    with pytest.raises(AnsibleFilterError, match="already mounts /etc/config"):
        INIT_CONTAINER([mounted[0], mounted[2]])


def test_the_template_text_is_the_one_the_harness_gives_its_operator():
    assert (
        operator_init_container.init_container_template("100m", "20Mi")
        in INIT_CONTAINER(OBJECTS)[1]["data"]["initContainer.yaml"]
    )


def test_only_the_deployment_is_copied_and_the_input_is_left_as_it_was():
    """The CRDs are most of the manifests: the filter passes the other objects through (a deep
    copy of them all cost Ansible over a minute a run), and changes only its own copies."""
    before = yaml.safe_dump_all(OBJECTS)
    objects = INIT_CONTAINER(OBJECTS, cpu="100m", memory="20Mi")
    assert objects[0] is OBJECTS[0]
    assert objects[2] is not OBJECTS[1] and objects[2]["metadata"] == OBJECTS[1]["metadata"]
    assert yaml.safe_dump_all(OBJECTS) == before


def test_the_objects_as_json_text_come_back_as_json_text_with_the_same_objects():
    from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
        as_objects,
        objects_json,
    )

    text = INIT_CONTAINER(objects_json(OBJECTS), cpu="200m", memory="32Mi")
    assert isinstance(text, str)
    assert as_objects(text) == INIT_CONTAINER(OBJECTS, cpu="200m", memory="32Mi")
    with pytest.raises(AnsibleFilterError, match="^training_operator_init_container: the objects must be"):
        INIT_CONTAINER("kind: Deployment")
