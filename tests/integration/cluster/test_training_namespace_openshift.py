"""training_namespace on OpenShift's APIs: the trainer's SecurityContextConstraints and image pull
Secrets, against the real control plane (kube-apiserver 1.36 with OpenShift's SCC CRD installed
from github.com/openshift/api, RBAC on).

The harness has no SCC admission plugin (that is OpenShift's): the server checks the SCC's schema,
RBAC decides who may ``use`` it, and test_openshift_scc.py judges the pods against it on paper.
"""

from __future__ import annotations

import base64
import json
import re
import secrets

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from test_training_namespace import delete_everything, names, recap_changed, role_vars

pytestmark = pytest.mark.slow

SCC_CRD = "securitycontextconstraints.security.openshift.io"
SCC_API = ("security.openshift.io", "v1", "securitycontextconstraints")


def scc_name(namespace):
    return "gpuops-training-%s" % namespace


def read_scc(k8s_cluster, name):
    return client.CustomObjectsApi(k8s_cluster.api_client()).get_cluster_custom_object(*SCC_API, name)


def can_use(k8s_cluster, namespace, scc, *identity):
    answer = k8s_cluster.kubectl(
        "auth",
        "can-i",
        "use",
        "%s.security.openshift.io/%s" % (SCC_API[2], scc),
        "-n",
        namespace,
        *identity,
        check=False,
    )
    return answer.stdout.strip()


def grants_use_of(rules, scc):
    """Whether RBAC rules grant the verb use on the SCC named scc (by name or by wildcard)."""
    for rule in rules or []:
        groups, resources, verbs = rule.api_groups or [], rule.resources or [], rule.verbs or []
        names = rule.resource_names or []
        if (
            ("security.openshift.io" in groups or "*" in groups)
            and ("securitycontextconstraints" in resources or "*" in resources)
            and ("use" in verbs or "*" in verbs)
            and (not names or scc in names)
        ):
            return True
    return False


@pytest.fixture(scope="module")
def converged(k8s_cluster, run_role):
    namespace, priority_class = names()
    variables = role_vars(k8s_cluster, namespace, priority_class, training_namespace_pod_security="")
    run = run_role("training_namespace", variables)
    assert run.rc == 0, run
    yield namespace, priority_class, variables, run
    delete_everything(k8s_cluster, namespace, priority_class)
    k8s_cluster.kubectl("delete", SCC_CRD, scc_name(namespace), "--ignore-not-found", check=False)


def test_without_openshift_auto_creates_no_scc_and_true_fails_before_any_change(
    k8s_cluster, run_role, monkeypatch, tmp_path
):
    """A cluster that does not serve security.openshift.io: the CRD is taken away for this test
    (first in this file, before any SCC of the module exists) and put back afterwards."""
    # kubernetes.core keeps the server's API discovery in a file under TMPDIR: a cache from an
    # earlier run would still list the API that is about to go.
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    (crd_file,) = [
        path for path in k8s_cluster.harness.builder.crd_files() if "securitycontextconstraints" in path.name
    ]
    namespace, priority_class = names()
    k8s_cluster.kubectl("delete", "crd", SCC_CRD, "--wait=true", timeout=120)
    try:
        variables = role_vars(k8s_cluster, namespace, priority_class, training_namespace_dataset_pvc=False)
        refused = run_role("training_namespace", dict(variables, training_namespace_scc=True))
        assert refused.rc != 0, refused
        assert "training_namespace_scc is true, but the cluster does not serve security.openshift.io/v1" in (
            " ".join(refused.output.split())
        ), refused
        assert k8s_cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0
        run = run_role("training_namespace", variables)
        assert run.rc == 0, run
        assert not [item for item in run.reported("changed_objects") if scc_name(namespace) in item], run
        assert len(run.reported("changed_objects")) == 9, run
        gone = run_role("training_namespace", dict(variables, training_namespace_state="absent"))
        assert gone.rc == 0 and recap_changed(gone) == 2, gone
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)
        k8s_cluster.kubectl("apply", "--server-side", "-f", str(crd_file))
        k8s_cluster.harness.wait_crds_established([SCC_CRD])


def test_the_scc_its_role_and_binding_are_created_and_a_second_converge_changes_nothing(
    converged, k8s_cluster, run_role
):
    namespace, _priority_class, variables, first = converged
    name = scc_name(namespace)
    changed = first.reported("changed_objects")
    assert changed[-3:] == [
        "SecurityContextConstraints %s" % name,
        "Role %s/%s" % (namespace, name),
        "RoleBinding %s/%s" % (namespace, name),
    ], first
    scc = read_scc(k8s_cluster, name)
    assert scc["allowedCapabilities"] == ["IPC_LOCK"]
    assert scc["requiredDropCapabilities"] == ["ALL"]
    assert scc["defaultAddCapabilities"] == []
    for flag in ("allowPrivilegedContainer", "allowPrivilegeEscalation", "allowHostNetwork", "allowHostPID"):
        assert scc[flag] is False, flag
    assert scc["allowHostIPC"] is scc["allowHostPorts"] is scc["allowHostDirVolumePlugin"] is False
    assert scc["runAsUser"] == {"type": "MustRunAsRange"}
    assert scc["seLinuxContext"] == {"type": "MustRunAs"}
    assert scc["seccompProfiles"] == ["runtime/default"]
    assert "hostPath" not in scc["volumes"]
    second = run_role("training_namespace", variables)
    assert second.rc == 0, second
    assert recap_changed(second) == 0, second
    assert second.reported("changed_objects") == [], second


def test_the_trainer_account_alone_may_use_the_scc(converged, k8s_cluster):
    namespace = converged[0]
    name = scc_name(namespace)
    api = k8s_cluster.api_client()
    rbac = client.RbacAuthorizationV1Api(api)
    scc = read_scc(k8s_cluster, name)
    assert scc.get("users") in ([], None) and scc.get("groups") in ([], None)

    # Every binding in the cluster whose role grants use of this SCC, and whom it binds.
    bound = []
    for binding in rbac.list_role_binding_for_all_namespaces().items:
        ref = binding.role_ref
        if ref.kind == "Role":
            rules = rbac.read_namespaced_role(ref.name, binding.metadata.namespace).rules
        else:
            rules = rbac.read_cluster_role(ref.name).rules
        if grants_use_of(rules, name):
            bound += [
                (binding.metadata.namespace, s.kind, s.name, s.namespace) for s in binding.subjects or []
            ]
    for binding in rbac.list_cluster_role_binding().items:
        rules = rbac.read_cluster_role(binding.role_ref.name).rules
        if grants_use_of(rules, name) and binding.role_ref.name != "cluster-admin":
            bound += [("cluster", s.kind, s.name, s.namespace) for s in binding.subjects or []]
    assert bound == [(namespace, "ServiceAccount", "trainer", namespace)]

    # What the API server's authorizer answers, wildcards included.
    assert can_use(k8s_cluster, namespace, name, "--as=system:serviceaccount:%s:trainer" % namespace) == "yes"
    for identity in (
        ("--as=system:serviceaccount:%s:default" % namespace,),
        ("--as=someone", "--as-group=system:authenticated"),
        ("--as=system:serviceaccount:kube-system:default", "--as-group=system:serviceaccounts"),
    ):
        assert can_use(k8s_cluster, namespace, name, *identity) == "no", identity
    # The trainer account of another namespace gets nothing from this one's Role.
    assert can_use(k8s_cluster, "default", name, "--as=system:serviceaccount:default:trainer") == "no"


def test_two_namespaces_get_their_own_scc_and_absent_removes_it(k8s_cluster, run_role, converged):
    namespace, priority_class = names()
    variables = role_vars(
        k8s_cluster,
        namespace,
        priority_class,
        training_namespace_dataset_pvc=False,
        training_namespace_scc_uid_range="5000/10",
        training_namespace_scc_gid_range="5000-5009",
    )
    try:
        assert run_role("training_namespace", variables).rc == 0
        mine = read_scc(k8s_cluster, scc_name(namespace))
        assert mine["runAsUser"] == {"type": "MustRunAsRange", "uidRangeMin": 5000, "uidRangeMax": 5009}
        assert mine["fsGroup"] == {"type": "MustRunAs", "ranges": [{"min": 5000, "max": 5009}]}
        # The other namespace's SCC is untouched.
        assert read_scc(k8s_cluster, scc_name(converged[0]))["runAsUser"] == {"type": "MustRunAsRange"}

        run = run_role("training_namespace", dict(variables, training_namespace_state="absent"))
        assert run.rc == 0, run
        assert recap_changed(run) == 3, run  # the namespace, the PriorityClass and the SCC
        with pytest.raises(ApiException) as gone:
            read_scc(k8s_cluster, scc_name(namespace))
        assert gone.value.status == 404
        assert read_scc(k8s_cluster, scc_name(converged[0]))
        again = run_role("training_namespace", dict(variables, training_namespace_state="absent"))
        assert again.rc == 0 and recap_changed(again) == 0, again
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)
        k8s_cluster.kubectl("delete", SCC_CRD, scc_name(namespace), "--ignore-not-found", check=False)


def test_scc_false_creates_none(k8s_cluster, run_role):
    namespace, priority_class = names()
    variables = role_vars(
        k8s_cluster,
        namespace,
        priority_class,
        training_namespace_dataset_pvc=False,
        training_namespace_scc=False,
    )
    try:
        run = run_role("training_namespace", variables)
        assert run.rc == 0, run
        assert not [item for item in run.reported("changed_objects") if "gpuops-training-" in item], run
        with pytest.raises(ApiException) as missing:
            read_scc(k8s_cluster, scc_name(namespace))
        assert missing.value.status == 404
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)


def pull_secret(name, namespace, password, kind="kubernetes.io/dockerconfigjson"):
    config = {"auths": {"registry.example": {"username": "robot", "password": password}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": kind,
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def test_the_service_account_carries_existing_pull_secrets_and_a_missing_one_stops_the_role(
    k8s_cluster, run_role
):
    namespace, priority_class = names()
    password = "pull-%s" % secrets.token_hex(8)
    core = client.CoreV1Api(k8s_cluster.api_client())
    k8s_cluster.kubectl("create", "namespace", namespace)
    try:
        k8s_cluster.apply(pull_secret("regcred", namespace, password))
        k8s_cluster.apply(dict(pull_secret("opaque", namespace, password, "Opaque")))
        variables = role_vars(k8s_cluster, namespace, priority_class, training_namespace_dataset_pvc=False)

        missing = run_role(
            "training_namespace",
            dict(variables, training_namespace_image_pull_secrets=["regcred", "nope", "opaque"]),
        )
        assert missing.rc != 0, missing
        text = " ".join(missing.output.split())
        assert (
            "Secret nope, named in training_namespace_image_pull_secrets, does not exist in namespace %s"
            % namespace
        ) in text, missing
        assert "Secret opaque, named in training_namespace_image_pull_secrets, is of type Opaque" in text, (
            missing
        )
        assert "regcred," not in text  # the one that is fine is not named
        assert password not in missing.output
        with pytest.raises(ApiException):  # stopped before the apply
            core.read_namespaced_service_account("trainer", namespace)

        run = run_role(
            "training_namespace", dict(variables, training_namespace_image_pull_secrets=["regcred"])
        )
        assert run.rc == 0, run
        assert password not in run.output
        account = core.read_namespaced_service_account("trainer", namespace)
        assert [ref.name for ref in account.image_pull_secrets] == ["regcred"]
        # The ServiceAccount admission gives them to a pod of the account that names none itself.
        pod = core.create_namespaced_pod(
            namespace,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "pulls"},
                "spec": {
                    "serviceAccountName": "trainer",
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "registry.example/trainer:1",
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi"},
                                "limits": {"cpu": "1", "memory": "1Gi"},
                            },
                        }
                    ],
                },
            },
        )
        assert [ref.name for ref in pod.spec.image_pull_secrets] == ["regcred"]
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)
        k8s_cluster.kubectl("delete", SCC_CRD, scc_name(namespace), "--ignore-not-found", check=False)


def test_a_new_namespace_names_the_pull_secrets_to_create(k8s_cluster, run_role):
    namespace, priority_class = names()
    try:
        run = run_role(
            "training_namespace",
            role_vars(
                k8s_cluster,
                namespace,
                priority_class,
                training_namespace_dataset_pvc=False,
                training_namespace_image_pull_secrets=["regcred"],
            ),
        )
        assert run.rc == 0, run
        assert "Namespace %s is new: create the Secrets regcred" % namespace in " ".join(
            run.output.split()
        ), run
        account = client.CoreV1Api(k8s_cluster.api_client()).read_namespaced_service_account(
            "trainer", namespace
        )
        assert [ref.name for ref in account.image_pull_secrets] == ["regcred"]
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)
        k8s_cluster.kubectl("delete", SCC_CRD, scc_name(namespace), "--ignore-not-found", check=False)


# OpenShift's ServiceAccount controller (openshift-controller-manager) gives every account a
# dockercfg Secret for the internal registry, named <account>-dockercfg-<5 characters>.
OPENSHIFT_MANAGER = "openshift-controller-manager"
DOCKERCFG = "trainer-dockercfg-abcde"
OPENSHIFT_PULL_ANNOTATION = "openshift.io/internal-registry-pull-secret-ref"


def append_like_openshift(core, namespace):
    """What that controller does (create_dockercfg_secrets.go): read the account, append its
    Secret to ``secrets`` and ``imagePullSecrets``, name it in its annotation (OpenShift 4.16 on)
    and write the whole object back with an update (PUT) under its own field manager, which then
    owns the whole list: ``imagePullSecrets`` is an atomic list, one owner for all its items."""
    account = core.read_namespaced_service_account("trainer", namespace)
    account.secrets = list(account.secrets or []) + [client.V1ObjectReference(name=DOCKERCFG)]
    account.image_pull_secrets = list(account.image_pull_secrets or []) + [
        client.V1LocalObjectReference(name=DOCKERCFG)
    ]
    account.metadata.annotations = dict(
        account.metadata.annotations or {}, **{OPENSHIFT_PULL_ANNOTATION: DOCKERCFG}
    )
    core.replace_namespaced_service_account("trainer", namespace, account, field_manager=OPENSHIFT_MANAGER)


def account_state(core, namespace):
    """The account's image pull Secrets, the controller's own fields, and the field managers
    that own the list."""
    account = core.read_namespaced_service_account("trainer", namespace)
    return {
        "pull": [ref.name for ref in account.image_pull_secrets or []],
        "secrets": [ref.name for ref in account.secrets or []],
        "annotation": (account.metadata.annotations or {}).get(OPENSHIFT_PULL_ANNOTATION),
        "list owners": sorted(
            (entry.manager, entry.operation)
            for entry in account.metadata.managed_fields or []
            if "f:imagePullSecrets" in (entry.fields_v1 or {})
        ),
    }


@pytest.fixture(scope="module")
def openshift_reruns(k8s_cluster, run_role):
    """The role with two pull Secrets; OpenShift's controller appends its own; the role again with
    the same Secrets, then a changed list in check mode, for real, and once more. One run a step;
    the account as the server stores it after each."""
    namespace, priority_class = names()
    core = client.CoreV1Api(k8s_cluster.api_client())
    k8s_cluster.kubectl("create", "namespace", namespace)
    steps = {}
    try:
        for name in ("regcred", "mirror", "other"):
            k8s_cluster.apply(pull_secret(name, namespace, "pull-%s" % secrets.token_hex(8)))
        variables = role_vars(k8s_cluster, namespace, priority_class, training_namespace_dataset_pvc=False)
        first = dict(variables, training_namespace_image_pull_secrets=["regcred", "mirror"])
        changed = dict(variables, training_namespace_image_pull_secrets=["other", "regcred"])
        run = run_role("training_namespace", first)
        assert run.rc == 0, run
        steps["first"] = (run, account_state(core, namespace))
        append_like_openshift(core, namespace)
        steps["openshift"] = (None, account_state(core, namespace))
        for step, step_vars, options in (
            ("same", first, ()),
            ("check", changed, ("--check", "--diff")),
            ("changed", changed, ()),
            ("again", changed, ()),
        ):
            run = run_role("training_namespace", step_vars, *options)
            steps[step] = (run, account_state(core, namespace))
        yield namespace, steps
    finally:
        delete_everything(k8s_cluster, namespace, priority_class)


def test_openshifts_update_owns_the_pull_secret_list(openshift_reruns):
    """The premise: after the controller's update its field manager alone owns the list, so an
    apply of any other list by the collection's field manager conflicts with it."""
    _namespace, steps = openshift_reruns
    assert steps["first"][1]["pull"] == ["regcred", "mirror"]
    assert steps["first"][1]["list owners"] == [("gpuops-training", "Apply")]
    assert steps["openshift"][1]["pull"] == ["regcred", "mirror", DOCKERCFG]
    assert steps["openshift"][1]["list owners"] == [(OPENSHIFT_MANAGER, "Update")]


def test_a_rerun_with_the_same_secrets_keeps_openshifts_entry_and_changes_nothing(openshift_reruns):
    _namespace, steps = openshift_reruns
    run, account = steps["same"]
    assert run.rc == 0, run
    assert "conflict" not in run.output.lower(), run
    assert recap_changed(run) == 0, run
    assert run.reported("changed_objects") == [], run
    assert account == steps["openshift"][1]  # the list, the controller's fields and who owns the list


def test_check_mode_reports_the_changed_list_and_the_server_keeps_it(openshift_reruns):
    namespace, steps = openshift_reruns
    run, account = steps["check"]
    assert run.rc == 0, run
    assert "conflict" not in run.output.lower(), run
    assert run.reported("changed_objects") == ["ServiceAccount %s/trainer" % namespace], run
    assert re.search(r"^-\s+-\s+name: mirror$", run.output, re.MULTILINE), run  # the diff
    assert re.search(r"^\+\s+-\s+name: other$", run.output, re.MULTILINE), run
    assert account == steps["openshift"][1]


def test_a_changed_list_replaces_the_collections_entries_and_keeps_openshifts(openshift_reruns):
    namespace, steps = openshift_reruns
    run, account = steps["changed"]
    assert run.rc == 0, run
    assert "conflict" not in run.output.lower(), run
    assert run.reported("changed_objects") == ["ServiceAccount %s/trainer" % namespace], run
    # mirror, which the collection added, is gone; the controller's entry stays, after the
    # collection's in the order asked.
    assert account["pull"] == ["other", "regcred", DOCKERCFG]
    assert account["secrets"] == [DOCKERCFG]
    assert account["annotation"] == DOCKERCFG


def test_the_run_after_the_change_changes_nothing(openshift_reruns):
    _namespace, steps = openshift_reruns
    run, account = steps["again"]
    assert run.rc == 0, run
    assert recap_changed(run) == 0, run
    assert run.reported("changed_objects") == [], run
    assert account == steps["changed"][1]
