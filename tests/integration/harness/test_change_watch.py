"""ChangeWatch, the pause of training_job_wait between two reads, on the harness's API server:
it ends when the object changes (so a wait sees a job end when it ends), and is a plain sleep
when nothing changes or there is nothing to watch."""

from __future__ import annotations

import threading

import pytest
from kubernetes import client

from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import ChangeWatch


@pytest.fixture
def config_map(k8s_cluster, k8s_namespace):
    api = k8s_cluster.api_client()
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": "watched"}, "data": {"state": "Running"}}
    created = core.create_namespaced_config_map(k8s_namespace, body)
    yield core, k8s_namespace, api.sanitize_for_serialization(created)
    api.close()


def test_a_change_after_the_read_ends_the_pause(config_map):
    core, namespace, read = config_map
    pause = ChangeWatch("watched", core.list_namespaced_config_map, namespace)
    pause.seen(read)
    timer = threading.Timer(
        1.0, core.patch_namespaced_config_map, ("watched", namespace, {"data": {"state": "Succeeded"}})
    )
    timer.start()
    try:
        assert pause(300) is True
    finally:
        timer.cancel()
    assert core.read_namespaced_config_map("watched", namespace).data == {"state": "Succeeded"}


def test_a_change_made_between_the_read_and_the_pause_ends_it(config_map):
    core, namespace, read = config_map
    core.patch_namespaced_config_map("watched", namespace, {"data": {"state": "Failed"}})
    pause = ChangeWatch("watched", core.list_namespaced_config_map, namespace)
    pause.seen(read)  # the object as read before the change
    assert pause(300) is True


def test_changes_to_other_objects_do_not_end_it(config_map):
    core, namespace, read = config_map
    pause = ChangeWatch("watched", core.list_namespaced_config_map, namespace)
    pause.seen(read)
    other = {"metadata": {"name": "other"}, "data": {"state": "Running"}}
    timer = threading.Timer(0.5, core.create_namespaced_config_map, (namespace, other))
    timer.start()
    assert pause(3) is False
    timer.join()


def test_without_an_object_it_sleeps():
    pause = ChangeWatch("absent", lambda *args, **kwargs: pytest.fail("nothing to watch: no call"))
    pause.seen(None)
    assert pause(1.5) is False
