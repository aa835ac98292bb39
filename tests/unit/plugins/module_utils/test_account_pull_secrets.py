"""What the trainer ServiceAccount's imagePullSecrets become when training_namespace applies it
again beside OpenShift's ServiceAccount controller, which appends its own dockercfg entry with an
update and then owns the whole (atomic) list; and the filter that puts that on the account.

The accounts are written as the API server returns them, managedFields included: which field
manager owns ``f:imagePullSecrets`` is what the server reported on the harness's kube-apiserver
(tests/integration/cluster/test_training_namespace_openshift.py checks it there).
"""

from __future__ import annotations

import copy
import re

import pytest
from ansible.errors import AnsibleFilterError
from test_training_namespace import settings as role_settings

from ansible_collections.gpuops.training.plugins.filter.training_namespace import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.image_pull_secrets import (
    OPENSHIFT_PULL_ANNOTATION,
    RECORD_ANNOTATION,
    account_plan,
    list_owners,
)
from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import namespace_objects

PULL_SECRETS = FilterModule().filters()["training_namespace_pull_secrets"]
MANAGER = "gpuops-training"
OURS = (MANAGER, "Apply")
OPENSHIFT = ("openshift-controller-manager", "Update")
DOCKERCFG = "trainer-dockercfg-abcde"


def account(names, owners=(OURS,), record=None, openshift_ref=None, version="42"):
    """A ServiceAccount as the server returns it: its list, the managers that own the list (each
    also owning its own annotation), the collection's record and OpenShift's annotation."""
    annotations = {}
    if record is not None:
        annotations[RECORD_ANNOTATION] = ",".join(record)
    if openshift_ref:
        annotations[OPENSHIFT_PULL_ANNOTATION] = openshift_ref
    managed = [
        {"manager": manager, "operation": operation, "fieldsV1": {"f:imagePullSecrets": {}, "f:metadata": {}}}
        for manager, operation in owners
    ]
    # A manager that owns something else, not the list.
    managed.append({"manager": "kubectl-label", "operation": "Update", "fieldsV1": {"f:metadata": {}}})
    item = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainer",
            "namespace": "vision",
            "resourceVersion": version,
            "annotations": annotations,
            "managedFields": managed,
        },
    }
    if names is not None:
        item["imagePullSecrets"] = [{"name": name} for name in names]
    return item


def after_openshift(names, record=None):
    """The account once OpenShift's controller appended its entry: its update owns the list."""
    return account(
        list(names) + [DOCKERCFG],
        owners=(OPENSHIFT,),
        record=names if record is None else record,
        openshift_ref=DOCKERCFG,
    )


def plan(wanted, current):
    return account_plan(wanted, current, MANAGER)


def test_a_new_account_gets_the_wanted_secrets_and_their_record():
    assert plan(["regcred", "mirror"], None) == {
        "names": ["regcred", "mirror"],
        "record": "regcred,mirror",
        "kept": [],
        "removed": [],
        "force": False,
        "resource_version": None,
    }
    # None wanted: neither the list nor the record (the account as the role made it before).
    assert plan([], None)["names"] is None
    assert plan([], None)["record"] is None


def test_the_collections_own_list_is_applied_again_unchanged():
    result = plan(["regcred", "mirror"], account(["regcred", "mirror"], record=["regcred", "mirror"]))
    # Still carried: an apply that left out a list its manager alone owns would remove it.
    assert result["names"] == ["regcred", "mirror"]
    assert result["record"] == "regcred,mirror"
    assert result["force"] is False and result["removed"] == result["kept"] == []


def test_openshifts_entry_is_kept_and_the_list_it_owns_is_left_out_when_nothing_changes():
    result = plan(["regcred", "mirror"], after_openshift(["regcred", "mirror"]))
    # Applying the same list would only make the collection a co-owner: a managedFields change.
    assert result["names"] is None
    assert result["record"] == "regcred,mirror"
    assert result["kept"] == [DOCKERCFG]
    assert result["removed"] == []
    assert result["force"] is False and result["resource_version"] is None


def test_a_changed_list_drops_the_collections_old_entry_keeps_openshifts_and_is_forced_at_its_version():
    result = plan(["other", "regcred"], after_openshift(["regcred", "mirror"]))
    assert result == {
        "names": ["other", "regcred", DOCKERCFG],
        "record": "other,regcred",
        "kept": [DOCKERCFG],
        "removed": ["mirror"],
        "force": True,  # the controller's update owns the list: an unforced apply conflicts
        "resource_version": "42",
    }


def test_after_the_forced_apply_the_next_run_changes_nothing():
    forced = account(["other", "regcred", DOCKERCFG], record=["other", "regcred"], openshift_ref=DOCKERCFG)
    result = plan(["other", "regcred"], forced)
    assert result["names"] == ["other", "regcred", DOCKERCFG]
    assert result["force"] is False and result["removed"] == []


def test_only_a_reorder_of_the_wanted_secrets_is_a_change():
    result = plan(["mirror", "regcred"], after_openshift(["regcred", "mirror"]))
    assert result["names"] == ["mirror", "regcred", DOCKERCFG]
    assert result["removed"] == [] and result["force"] is True


def test_no_secrets_wanted_any_more_removes_the_collections_and_keeps_openshifts():
    result = plan([], after_openshift(["regcred", "mirror"]))
    assert result["names"] == [DOCKERCFG]
    assert result["record"] == ""  # recorded as none: the list the collection now owns is not its own
    assert result["removed"] == ["regcred", "mirror"]
    assert result["force"] is True
    # The run after: the collection's apply owns the list, which is applied again as it is.
    then = plan([], account([DOCKERCFG], record=[], openshift_ref=DOCKERCFG))
    assert then["names"] == [DOCKERCFG] and then["record"] == ""
    assert then["removed"] == [] and then["force"] is False


def test_an_account_the_collection_never_gave_secrets_is_left_to_openshift():
    fresh = account([DOCKERCFG], owners=(OPENSHIFT,), openshift_ref=DOCKERCFG)
    result = plan([], fresh)
    assert result["names"] is None and result["record"] is None and result["force"] is False
    assert result["kept"] == [DOCKERCFG]


def test_entries_others_added_are_kept_in_their_order_after_the_wanted_ones():
    current = account(
        ["user-added", "regcred", "mirror", DOCKERCFG],
        owners=(("kubectl-patch", "Update"),),
        record=["regcred", "mirror"],
        openshift_ref=DOCKERCFG,
    )
    result = plan(["regcred"], current)
    assert result["names"] == ["regcred", "user-added", DOCKERCFG]
    assert result["kept"] == ["user-added", DOCKERCFG]
    assert result["removed"] == ["mirror"]
    assert result["force"] is True


def test_without_a_record_an_owned_list_is_the_collections_less_what_looks_like_openshifts():
    """An account applied by a release before the record: its apply owned the whole list."""
    current = account(["regcred", "mirror", "builder-dockercfg-x1y2z"], owners=(OURS,))
    result = plan(["regcred"], current)
    assert result["names"] == ["regcred", "builder-dockercfg-x1y2z"]
    assert result["removed"] == ["mirror"]
    assert result["record"] == "regcred"
    assert result["force"] is False  # its apply alone owns the list


def test_without_a_record_a_list_another_writer_took_keeps_every_entry():
    """Nothing tells which entries were the collection's: none is removed."""
    current = after_openshift(["regcred", "mirror"])
    del current["metadata"]["annotations"][RECORD_ANNOTATION]
    result = plan(["other"], current)
    assert result["names"] == ["other", "regcred", "mirror", DOCKERCFG]
    assert result["removed"] == []
    assert result["force"] is True


def test_the_entry_openshifts_annotation_names_is_never_removed():
    current = account(
        ["regcred", "legacy-pull"],
        owners=(OPENSHIFT,),
        record=["regcred", "legacy-pull"],
        openshift_ref="legacy-pull",
    )
    result = plan(["regcred"], current)
    assert result["names"] is None  # nothing to change
    assert result["kept"] == ["legacy-pull"] and result["removed"] == []


def test_repeated_entries_are_written_once():
    result = plan(["regcred"], account(["regcred", "regcred"], record=["regcred"]))
    assert result["names"] == ["regcred"]
    assert result["force"] is False


@pytest.mark.parametrize(
    ("owners", "force"),
    [
        ((), False),  # no owner at all: nothing to conflict with
        ((OURS,), False),
        ((OURS, OPENSHIFT), True),
        (((MANAGER, "Update"),), True),  # the same name, another operation: another manager
        ((("another-tool", "Apply"),), True),
    ],
)
def test_a_change_is_forced_when_anyone_but_the_collections_apply_owns_the_list(owners, force):
    current = account(["regcred"], owners=owners, record=["regcred"])
    assert plan(["other"], current)["force"] is force


def test_the_list_owners_are_read_from_managed_fields():
    assert list_owners(after_openshift(["regcred"])) == [OPENSHIFT]
    assert list_owners({"metadata": {}}) == []
    assert list_owners({"metadata": {"managedFields": [{"manager": "x", "fieldsV1": None}, "odd"]}}) == []


def test_an_account_without_a_list_or_with_nameless_entries():
    assert plan(["regcred"], account(None, owners=()))["names"] == ["regcred"]
    current = account(["regcred"], owners=(OPENSHIFT,), record=["regcred"])
    current["imagePullSecrets"].append({})
    result = plan(["regcred"], current)
    assert result["kept"] == [""] and result["names"] is None


def settings(secrets):
    return role_settings(image_pull_secrets=secrets)


def test_the_filter_puts_the_plan_on_the_account_and_leaves_the_other_objects():
    objects = namespace_objects(settings(["other", "regcred"]))
    before = copy.deepcopy(objects)
    result = PULL_SECRETS(objects, [after_openshift(["regcred", "mirror"])], MANAGER)
    assert objects == before  # the input is not changed
    (index,) = [i for i, item in enumerate(result) if item["kind"] == "ServiceAccount"]
    assert [item for i, item in enumerate(result) if i != index] == [
        item for i, item in enumerate(objects) if i != index
    ]
    forced = result[index]
    assert forced["imagePullSecrets"] == [{"name": "other"}, {"name": "regcred"}, {"name": DOCKERCFG}]
    assert forced["metadata"]["annotations"] == {RECORD_ANNOTATION: "other,regcred"}
    assert forced["metadata"]["resourceVersion"] == "42"
    assert forced["metadata"]["labels"] == objects[index]["metadata"]["labels"]


def test_the_filter_leaves_out_a_list_openshift_owns_when_nothing_changes():
    (account_object,) = [
        item
        for item in PULL_SECRETS(
            namespace_objects(settings(["regcred", "mirror"])),
            [after_openshift(["regcred", "mirror"])],
            MANAGER,
        )
        if item["kind"] == "ServiceAccount"
    ]
    assert "imagePullSecrets" not in account_object
    assert "resourceVersion" not in account_object["metadata"]
    assert account_object["metadata"]["annotations"] == {RECORD_ANNOTATION: "regcred,mirror"}


def test_the_filter_without_secrets_or_an_account_keeps_the_account_as_built():
    objects = namespace_objects(settings([]))
    assert PULL_SECRETS(objects, [], MANAGER) == objects
    created = PULL_SECRETS(namespace_objects(settings(["regcred"])), [], MANAGER)
    (account_object,) = [item for item in created if item["kind"] == "ServiceAccount"]
    assert account_object["imagePullSecrets"] == [{"name": "regcred"}]
    assert account_object["metadata"]["annotations"] == {RECORD_ANNOTATION: "regcred"}
    # A single account as a dict reads as a list of one.
    assert PULL_SECRETS(objects, account([], owners=()), MANAGER) == objects


@pytest.mark.parametrize(
    ("objects", "accounts", "manager", "message"),
    [
        ({}, [], MANAGER, "takes the objects (a list)"),
        ([], [account([]), account([])], MANAGER, "a list of at most one"),
        ([], "trainer", MANAGER, "a list of at most one"),
        ([], [], "", "needs the field manager"),
    ],
)
def test_the_filter_refuses_what_is_not_a_read(objects, accounts, manager, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        PULL_SECRETS(objects, accounts, manager)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda item: item.update(metadata=None), "the ServiceAccount read has no metadata mapping"),
        (
            lambda item: item["metadata"].update(annotations=["a"]),
            "its metadata.annotations must be a mapping",
        ),
        (
            lambda item: item["metadata"]["annotations"].update({RECORD_ANNOTATION: ["regcred"]}),
            "its annotation gpuops.training/image-pull-secrets must be a string",
        ),
        (
            lambda item: item["metadata"].update(resourceVersion=42),
            "its metadata.resourceVersion must be a string",
        ),
        (lambda item: item["metadata"].update(managedFields={}), "its metadata.managedFields must be a list"),
        (
            lambda item: item["metadata"]["managedFields"][0].update(fieldsV1=[1]),
            "managedFields must be a list",
        ),
        (
            lambda item: item.update(imagePullSecrets=[{"name": 5}]),
            "its imagePullSecrets must be a list of {name}",
        ),
        (
            lambda item: item.update(imagePullSecrets="regcred"),
            "its imagePullSecrets must be a list of {name}",
        ),
    ],
)
def test_a_read_that_is_not_a_service_account_is_refused_naming_the_field(change, message):
    current = after_openshift(["regcred"])
    change(current)
    objects = namespace_objects(settings(["regcred"]))
    with pytest.raises(AnsibleFilterError, match=re.escape("training_namespace_pull_secrets: ")) as refused:
        PULL_SECRETS(objects, [current], MANAGER)
    assert message in str(refused.value)


def test_objects_whose_account_is_not_one_are_refused():
    objects = namespace_objects(settings(["regcred"]))
    (index,) = [i for i, item in enumerate(objects) if item["kind"] == "ServiceAccount"]
    broken = copy.deepcopy(objects)
    broken[index]["imagePullSecrets"] = ["regcred"]
    with pytest.raises(AnsibleFilterError, match="the ServiceAccount's imagePullSecrets must be a list of"):
        PULL_SECRETS(broken, [], MANAGER)
    with pytest.raises(AnsibleFilterError, match="the objects must be a list of mappings"):
        PULL_SECRETS(objects + ["x"], [], MANAGER)
