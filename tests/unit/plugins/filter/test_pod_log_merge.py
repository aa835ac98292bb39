"""pod_log_merge: a pod's early log copy and its final log joined, as log rotation and deleted
pods leave them."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.training.plugins.filter.pod_log_merge import FilterModule
from ansible_collections.gpuops.training.plugins.module_utils.pod_logs import GAP_LINE

FILTERS = FilterModule().filters()
merge = FILTERS["pod_log_merge"]
past_init = FILTERS["pod_log_past_init"]

INIT = "".join("h0:1:1 [0] NCCL INFO line %d\n" % number for number in range(8))
STEPS = "".join('{"event":"step","step":%d}\n' % step for step in range(1, 30))


def test_a_final_log_that_still_holds_the_head_is_kept_whole():
    final = INIT + STEPS
    assert merge(INIT + STEPS[:50], final) == {"log": final, "source": "final"}


def test_a_pod_gone_by_the_end_keeps_its_early_copy():
    assert merge(INIT, "") == {"log": INIT, "source": "early"}
    assert merge(INIT, None) == {"log": INIT, "source": "early"}


def test_a_rotated_log_is_joined_where_it_overlaps_the_early_copy_without_repeats():
    early = INIT + STEPS[: STEPS.index('"step":10}') + len('"step":10}\n')]
    rotated = STEPS[STEPS.index('{"event":"step","step":7}') :]  # the head is gone
    merged = merge(early, rotated)
    assert merged["source"] == "early+final"
    assert merged["log"] == INIT + STEPS
    assert merged["log"].count('"step":8}') == 1


def test_a_log_rotated_past_the_early_copy_is_joined_with_a_line_that_says_so():
    early = INIT + STEPS[:40]
    tail = STEPS[-60:]
    tail = tail[tail.index("\n") + 1 :]
    merged = merge(early, tail)
    assert merged["source"] == "early+gap+final"
    head = early[: early.rfind("\n") + 1]
    assert merged["log"] == head + GAP_LINE + "\n" + tail


def test_a_half_written_last_line_of_the_early_copy_is_not_kept_twice():
    final = INIT + STEPS
    early = INIT + '{"event":"st'  # read while the rank wrote it
    assert merge(early, final) == {"log": final, "source": "final"}
    assert merge(early, "") == {"log": early, "source": "early"}


def test_an_early_copy_of_the_container_before_a_restart_is_left_to_its_previous_log():
    before_restart = INIT + STEPS[:80]
    after_restart = "h0:2:2 [0] NCCL INFO line 0\n" + '{"event":"resume"}\n'
    merged = merge(INIT, after_restart, before_restart)
    assert merged == {"log": after_restart, "source": "final"}


def test_no_early_copy_leaves_the_final_log():
    assert merge("", INIT) == {"log": INIT, "source": "final"}
    assert merge(None, None) == {"log": "", "source": "final"}


def test_the_first_step_or_the_end_marks_a_log_past_its_init():
    assert past_init(INIT + STEPS) is True
    assert past_init(INIT + '{"event": "run_end"}\n') is True
    assert past_init(INIT) is False
    assert past_init(None) is False


@pytest.mark.parametrize("bad", [3, ["line"], {"log": "x"}])
def test_a_log_that_is_not_text_is_named(bad):
    with pytest.raises(AnsibleFilterError, match="pod_log_merge: final must be a log as a string"):
        merge(INIT, bad)
    with pytest.raises(AnsibleFilterError, match="pod_log_past_init: the log must be a log as a string"):
        past_init(bad)
