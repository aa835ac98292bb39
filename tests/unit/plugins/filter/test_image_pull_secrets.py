"""image_pull_secret_problems: each missing or unusable Secret named with its variable, and
nothing of a Secret's data in any message."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.training.plugins.filter.image_pull_secrets import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.image_pull_secrets import name_problems

PROBLEMS = FilterModule().filters()["image_pull_secret_problems"]
DATA = "c2VjcmV0LXZhbHVl"  # what a Secret read returns beside its name and type


def found(name, kind="kubernetes.io/dockerconfigjson"):
    return {
        "item": name,
        "resources": [{"metadata": {"name": name}, "type": kind, "data": {".dockerconfigjson": DATA}}],
    }


def test_usable_secrets_give_no_problem():
    results = [found("regcred"), found("legacy", "kubernetes.io/dockercfg"), {"item": "x", "skipped": True}]
    assert PROBLEMS(results, "training_job_image_pull_secrets", "training") == []


def test_a_missing_and_a_wrong_type_secret_are_named_with_the_variable_and_no_data():
    results = [found("regcred"), {"item": "nope", "resources": []}, found("opaque", "Opaque")]
    problems = PROBLEMS(results, "nccl_tests_image_pull_secrets", "vision")
    assert problems == [
        "Secret nope, named in nccl_tests_image_pull_secrets, does not exist in namespace vision: create it"
        " first (for example with kubectl create secret docker-registry nope -n vision ...) or remove it from"
        " nccl_tests_image_pull_secrets",
        "Secret opaque, named in nccl_tests_image_pull_secrets, is of type Opaque; the kubelet reads registry"
        " credentials only from kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg",
    ]
    assert not any(DATA in problem for problem in problems)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("regcred", "v must be a list of Secret names, got 'regcred'"),
        (["ok", 3], "v[1] is not a Secret name: must be a string, got 3"),
        (["UPPER"], "v[0] is not a Secret name: must be a DNS-1123 subdomain"),
        (["a", "b", "a"], "v[2] repeats 'a'"),
    ],
)
def test_names_are_checked_before_anything_is_read(value, message):
    (problem,) = name_problems(value, "v")
    assert problem.startswith(message), problem
    assert name_problems(["regcred", "mirror.example"], "v") == []


def test_results_that_are_not_a_loops_are_named():
    assert PROBLEMS({"results": []}, "training_job_image_pull_secrets", "training") == [
        "the results of reading training_job_image_pull_secrets must be a list (a loop's results), got dict"
    ]
    # An entry whose resources are not a list counts as not found.
    (problem,) = PROBLEMS([{"item": "regcred", "resources": 5}], "v", "training")
    assert problem.startswith("Secret regcred, named in v, does not exist")
