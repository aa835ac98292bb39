"""pod_log_collect: pod logs streamed to files, early copies appended from where they stopped,
joined to the final read on the way to disk, and unreadable pods named.

The API is a stand-in for the kubernetes client's CoreV1Api that serves logs from bytes and
answers the way the client does (ApiException with a status, a response read in chunks); the
same code runs against the harness's real API server in tests/integration/launch.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils import pod_log_collect as collect
from ansible_collections.gpuops.training.plugins.module_utils.k8s_client import ApiException
from ansible_collections.gpuops.training.plugins.module_utils.pod_logs import (
    GAP_LINE,
    merge_pod_log,
    write_joined,
)

STEP = '{"event": "step", "rank": 0}'


class Response:
    """What read_namespaced_pod_log(_preload_content=False) returns: read in chunks; it can
    break off after ``fail_after`` bytes, as a connection that times out does."""

    def __init__(self, data, chunk=7, fail_after=None):
        self.data, self.chunk, self.fail_after, self.at = data, chunk, fail_after, 0
        self.released = False

    def read(self, _amount):
        if self.fail_after is not None and self.at >= self.fail_after:
            raise TimeoutError("read timed out")
        piece = self.data[self.at : self.at + self.chunk]
        self.at += len(piece)
        return piece

    def release_conn(self):
        self.released = True


class FakeCore:
    """Logs by (pod, previous): bytes, or an ApiException to raise; CRI-style timestamped
    lines when asked with timestamps (each line of ``stamped`` is (ns, text))."""

    def __init__(self):
        self.logs, self.stamped, self.calls, self.responses = {}, {}, [], []
        self.fail_after = {}

    def read_namespaced_pod_log(self, name, namespace, **options):
        self.calls.append((name, dict(options)))
        previous = options.get("previous", False)
        if options.get("timestamps"):
            lines = self.stamped[name]
            data = (
                lines
                if isinstance(lines, Exception)
                else b"".join(b"%s %s\n" % (stamp_of(ns), text) for ns, text in lines)
            )
        else:
            data = self.logs[(name, previous)]
        if isinstance(data, Exception):
            raise data
        response = Response(data, fail_after=self.fail_after.get(name))
        self.responses.append(response)
        return response


def stamp_of(ns):
    import datetime as dt

    seconds, fraction = divmod(ns, 10**9)
    moment = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    return (moment + ".%09dZ" % fraction).encode()


def pod(name, node="gpu-01", restarts=0, running=True, container_id="cri-o://a"):
    state = {"running": {}} if running else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node, "containers": [{"name": "trainer"}]},
        "status": {
            "phase": "Running" if running else "Pending",
            "containerStatuses": [
                {"name": "trainer", "restartCount": restarts, "state": state, "containerID": container_id}
            ],
        },
    }


NOW_S = 100.0  # the controller's clock in these tests; the lines below are from 90 s on


def collector(tmp_path, core, parallel=4):
    reader = collect.LogCollector(
        None, "training", str(tmp_path), parallel=parallel, timeout=30, clock=lambda: NOW_S
    )
    reader.core = core
    return reader


@pytest.fixture(autouse=True)
def no_client(monkeypatch):
    class Client:
        @staticmethod
        def CoreV1Api(_api):  # noqa: N802 - the kubernetes client's name
            return None

    monkeypatch.setattr(collect, "client", Client)


# ---- timestamps


@pytest.mark.parametrize(
    "line, expected",
    [
        (b"2026-11-28T10:00:00Z x", 1795860000 * 10**9),
        (b"2026-11-28T10:00:00.5Z x", 1795860000 * 10**9 + 500_000_000),
        (b"2026-11-28T10:00:00.123456789Z x", 1795860000 * 10**9 + 123_456_789),
        (b"2026-11-28T11:00:00.25+01:00 x", 1795860000 * 10**9 + 250_000_000),
        (b"2026-11-28T09:30:00-00:30 x", 1795860000 * 10**9),
    ],
)
def test_timestamps_of_every_rfc3339_shape_the_api_server_gives(line, expected):
    assert collect.timestamp_ns(line) == (expected, line.index(b" x") + 1)


def test_a_line_without_a_timestamp_has_none():
    assert collect.timestamp_ns(b"NCCL INFO Init COMPLETE") == (None, 0)


# ---- early copies


def lines(*pairs):
    """Timestamped lines, at 90 s plus the nanoseconds given."""
    return [(90 * 10**9 + ns, text.encode()) for ns, text in pairs]


def test_an_early_copy_appends_only_the_lines_it_does_not_hold(tmp_path):
    core = FakeCore()
    core.stamped["w-0"] = lines((10, "init a"), (20, "init b"), (20, "init c"))
    reader = collector(tmp_path, core)
    first = reader.collect_early([pod("w-0")])
    assert first[0]["appended"] == len(b"init a\ninit b\ninit c\n")
    # The next read overlaps the last (the margin for the node's clock): the lines it holds
    # already, two of them at the same instant, are not written again.
    core.stamped["w-0"] = lines((20, "init b"), (20, "init c"), (20, "init d"), (30, STEP))
    second = reader.collect_early([pod("w-0")])
    assert (
        tmp_path / "early" / "w-0.log"
    ).read_bytes() == b"init a\ninit b\ninit c\ninit d\n" + STEP.encode() + b"\n"
    assert second[0]["past_init"] is True and second[0]["appended"] == len(
        b"init d\n" + STEP.encode() + b"\n"
    )
    # It asked for the time since its last line plus the margin, not the whole log.
    assert "since_seconds" not in core.calls[0][1]
    # 10 s since the last line saved (at 90 s), and the margin for the node's clock.
    assert core.calls[1][1]["since_seconds"] == 10 + collect.CLOCK_MARGIN_S
    assert core.calls[1][1]["timestamps"] is True


def test_an_early_copy_leaves_a_line_without_its_newline_for_the_next_read(tmp_path):
    core = FakeCore()
    core.stamped["w-0"] = lines((10, "whole"))
    reader = collector(tmp_path, core)
    original = FakeCore.read_namespaced_pod_log

    def half_line(self, name, namespace, **options):
        response = original(self, name, namespace, **options)
        response.data += stamp_of(90 * 10**9 + 11) + b" half wri"
        return response

    FakeCore.read_namespaced_pod_log = half_line
    try:
        reader.collect_early([pod("w-0")])
    finally:
        FakeCore.read_namespaced_pod_log = original
    assert (tmp_path / "early" / "w-0.log").read_bytes() == b"whole\n"
    core.stamped["w-0"] = lines((10, "whole"), (11, "half written"))
    reader.collect_early([pod("w-0")])
    assert (tmp_path / "early" / "w-0.log").read_bytes() == b"whole\nhalf written\n"


def test_a_restarted_container_starts_its_early_copy_again(tmp_path):
    core = FakeCore()
    core.stamped["w-0"] = lines((10, "first container"))
    reader = collector(tmp_path, core)
    reader.collect_early([pod("w-0")])
    core.stamped["w-0"] = lines((5, "second container"))
    reader.collect_early([pod("w-0", restarts=1, container_id="cri-o://b")])
    assert (tmp_path / "early" / "w-0.log").read_bytes() == b"second container\n"
    state = json.loads((tmp_path / "early" / "state.json").read_text())
    assert state["w-0"]["container_id"] == "cri-o://b"


def test_pods_not_started_are_not_read_and_a_refused_read_is_named(tmp_path):
    core = FakeCore()
    core.stamped["w-0"] = ApiException(status=500, reason="Internal Server Error")
    reader = collector(tmp_path, core)
    results = reader.collect_early([pod("w-0"), pod("w-1", running=False)])
    assert [entry["name"] for entry in results] == ["w-0"]
    assert results[0]["status"] == "unreadable"
    assert results[0]["reason"] == "the API server answered 500 Internal Server Error"


# ---- the final pass


def test_the_final_log_is_joined_to_its_early_copy_where_the_node_rotated_the_head_away(tmp_path):
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "w-0.log").write_bytes(b"init\nstep 1\nstep 2\n")
    core = FakeCore()
    core.logs[("w-0", False)] = b"step 2\nstep 3\n"
    [result] = collector(tmp_path, core).collect_final([pod("w-0")])
    assert (tmp_path / "w-0.log").read_bytes() == b"init\nstep 1\nstep 2\nstep 3\n"
    assert (result["status"], result["source"], result["bytes"], result["changed"]) == (
        "ok",
        "early+final",
        26,
        True,
    )
    assert all(response.released for response in core.responses)


def test_a_second_collection_of_the_same_logs_changes_nothing(tmp_path):
    core = FakeCore()
    core.logs[("w-0", False)] = b"a\nb\n"
    reader = collector(tmp_path, core)
    assert reader.collect_final([pod("w-0")])[0]["changed"] is True
    assert reader.collect_final([pod("w-0")])[0]["changed"] is False
    assert sorted(path.name for path in tmp_path.iterdir()) == ["w-0.log"]


def test_a_restarted_pod_keeps_its_previous_containers_log_beside_it(tmp_path):
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "w-0.log").write_bytes(b"old init\n")
    core = FakeCore()
    core.logs[("w-0", True)] = b"old init\nold crash\n"
    core.logs[("w-0", False)] = b"new init\n"
    [result] = collector(tmp_path, core).collect_final([pod("w-0", restarts=1)])
    assert (tmp_path / "w-0.previous.log").read_bytes() == b"old init\nold crash\n"
    # The early copy belongs to the previous container: the current log stands alone.
    assert (tmp_path / "w-0.log").read_bytes() == b"new init\n"
    assert (result["source"], result["previous_bytes"]) == ("final", 19)


def test_a_pod_gone_by_the_end_keeps_its_early_copy_and_says_so(tmp_path):
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "w-1.log").write_bytes(b"init\nstep\n")
    [result] = collector(tmp_path, FakeCore()).collect_final([])
    assert (result["name"], result["status"], result["source"]) == ("w-1", "partial", "early")
    assert result["reason"] == "the pod is gone; its early copy is all there is"
    assert (tmp_path / "w-1.log").read_bytes() == b"init\nstep\n"


def test_unreadable_pods_are_named_and_the_others_still_collected(tmp_path):
    core = FakeCore()
    core.logs[("w-0", False)] = b"fine\n"
    core.logs[("w-1", False)] = ApiException(status=404, reason="Not Found")
    core.logs[("w-2", False)] = b"x" * 100
    core.fail_after["w-2"] = 14
    results = collector(tmp_path, core).collect_final(
        [pod("w-0"), pod("w-1"), pod("w-2"), pod("w-3", running=False)]
    )
    by_name = {entry["name"]: entry for entry in results}
    assert by_name["w-0"]["status"] == "ok"
    assert by_name["w-1"]["reason"] == "the pod or its log is gone (404 Not Found)"
    assert by_name["w-2"]["reason"] == "no answer from the API server within 30 s (TimeoutError)"
    assert by_name["w-3"]["reason"] == "its container trainer never started"
    assert {name for name, entry in by_name.items() if entry["status"] == "unreadable"} == {
        "w-1",
        "w-2",
        "w-3",
    }
    # Nothing half written is left of the stream that broke off.
    assert sorted(path.name for path in tmp_path.iterdir()) == ["w-0.log"]


def test_many_pods_read_in_parallel_give_what_one_at_a_time_gives(tmp_path):
    core = FakeCore()
    pods = [pod("w-%d" % index, node="gpu-%02d" % (index // 2)) for index in range(12)]
    for index in range(12):
        core.logs[("w-%d" % index, False)] = ("rank %d\n" % index).encode() * (index + 1)
    serial = collector(tmp_path / "one", core, parallel=1).collect_final(pods)
    parallel = collector(tmp_path / "many", core, parallel=5).collect_final(pods)
    assert [entry["bytes"] for entry in serial] == [entry["bytes"] for entry in parallel]
    assert [entry["node"] for entry in parallel][:4] == ["gpu-00", "gpu-00", "gpu-01", "gpu-01"]
    for index in range(12):
        name = "w-%d.log" % index
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()


# ---- joining on streams is joining in memory


TEXT = st.lists(st.sampled_from(["init", "step 1", "step 2", "step 3", "", "x" * 9]), max_size=8).map(
    lambda parts: "".join(part + "\n" for part in parts)
)


@settings(max_examples=300, deadline=None)
@given(
    early=TEXT,
    final=TEXT,
    previous=TEXT,
    tail=st.sampled_from(["", "half"]),
    chunk=st.integers(min_value=1, max_value=12),
)
def test_a_log_joined_as_it_streams_in_any_chunks_is_the_log_joined_whole(
    early, final, previous, tail, chunk
):
    early += tail
    expected = merge_pod_log(early, final, previous)
    data = final.encode()
    out = io.BytesIO()
    source, written = write_joined(
        early.encode(), [data[at : at + chunk] for at in range(0, len(data), chunk)], out, previous.encode()
    )
    assert (out.getvalue().decode(), source) == (expected["log"], expected["source"])
    assert written == len(out.getvalue())


def test_the_gap_line_marks_lines_the_node_rotated_away():
    assert merge_pod_log("a\nb\n", "y\nz\n")["log"] == "a\nb\n" + GAP_LINE + "\ny\nz\n"
