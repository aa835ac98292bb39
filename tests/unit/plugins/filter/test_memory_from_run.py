"""memory_from_run: an earlier run's summary sizes the next run's pods (train.yml -e
training_job_memory_from_run=RUN_ID), or says why it cannot, naming the variable."""

from __future__ import annotations

import json
import pathlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.memory_from_run import FilterModule

SUMMARIES = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "summaries"
memory_from_run = FilterModule().filters()["memory_from_run"]


def text(name):
    return (SUMMARIES / name).read_text()


def test_the_recommended_limit_becomes_the_pods_memory_and_no_shm_is_set_without_one():
    sized = memory_from_run(text("local-2rank-summary.json"), "r1", memory="64Gi", shm_size="")
    assert sized["memory"] == "2415Mi" == sized["limit"]
    assert sized["request"] == "2136Mi"
    assert sized["shm_size"] is None and sized["shm_bytes"] is None
    assert (sized["basis"], sized["host"], sized["ranks"]) == ("host_rss", "vm", [0, 1])
    assert sized["lines"] == [
        "training_job_memory: 2415Mi, requested and limited alike (Guaranteed QoS): the limit run r1 "
        "recommends (peak 2196Mi plus its buffer; its request, the median, was 2136Mi)",
        "training_job_shm_size: left as it is (the recommendation of run r1 carries no /dev/shm size)",
        "measured on vm with 2 ranks per container, from the ranks' resident sets",
    ]


def test_a_recommendation_with_shm_sets_it_rounded_up_to_whole_gi():
    sized = memory_from_run(json.loads(text("workers-summary.json")), "r2")
    assert sized["memory"] == "3081Mi"
    assert sized["shm_bytes"] == 3145728 and sized["shm_size"] == "1Gi"
    assert (
        sized["lines"][1] == "training_job_shm_size: 1Gi, the /dev/shm size in the recommendation of run r2"
    )


@pytest.mark.parametrize(
    ("memory", "shm_size"),
    [
        ("64Gi", ""),  # the defaults: not set explicitly
        (None, None),
        ("3081Mi", "1Gi"),  # set to what the run recommends: no conflict
        ("3230662656", "1024Mi"),  # the same quantities written otherwise
    ],
)
def test_defaults_and_equal_values_are_no_conflict(memory, shm_size):
    sized = memory_from_run(text("workers-summary.json"), "r2", memory=memory, shm_size=shm_size)
    assert (sized["memory"], sized["shm_size"]) == ("3081Mi", "1Gi")


@pytest.mark.parametrize(
    ("memory", "shm_size", "conflict"),
    [
        ("8Gi", "", "training_job_memory is 8Gi, the run recommends 3081Mi (its limit: peak plus buffer)"),
        ("64Gi", "4Gi", "training_job_shm_size is 4Gi, the run recommends 1Gi"),
    ],
)
def test_an_explicit_value_that_differs_is_a_conflict_naming_both(memory, shm_size, conflict):
    with pytest.raises(AnsibleFilterError) as error:
        memory_from_run(text("workers-summary.json"), "r2", memory=memory, shm_size=shm_size)
    message = str(error.value)
    assert message.startswith(
        "training_job_memory_from_run=r2 conflicts with values set explicitly: " + conflict
    )
    assert "expected either the recommendation or an explicit value, not both" in message
    assert '(training_job_memory 64Gi, training_job_shm_size "")' in message


def test_an_explicit_shm_size_is_kept_when_the_recommendation_has_none():
    sized = memory_from_run(text("local-2rank-summary.json"), "r1", shm_size="4Gi")
    assert sized["shm_size"] is None  # the role leaves training_job_shm_size (4Gi) as it is


@pytest.mark.parametrize(
    ("summary", "message"),
    [
        (
            text("no-memory-summary.json"),
            "training_job_memory_from_run: run r0's summary.json has no memory recommendation "
            "(memory.recommendation is null): its ranks recorded no memory",
        ),
        ("{not json", "training_job_memory_from_run: run r0's summary.json is not JSON"),
        ('{"verdict": "passed"}', "training_job_memory_from_run: run r0's summary.json is not a run summary"),
        ([1, 2], "training_job_memory_from_run: run r0's summary.json is not a run summary"),
        (
            json.dumps({"schema": "gpuops.run-summary/v1", "memory": {"recommendation": {"limit": "lots"}}}),
            "training_job_memory_from_run: run r0's summary.json recommends a limit that is not a "
            "memory quantity",
        ),
    ],
)
def test_a_summary_that_cannot_size_the_run_names_the_variable_and_what_was_expected(summary, message):
    with pytest.raises(AnsibleFilterError) as error:
        memory_from_run(summary, "r0")
    assert str(error.value).startswith(message)
    assert "expected" in str(error.value) or "quantity" in str(error.value)


def test_a_bad_explicit_memory_is_named():
    with pytest.raises(AnsibleFilterError, match="training_job_memory must be a quantity"):
        memory_from_run(text("local-2rank-summary.json"), "r1", memory=["8Gi"])
