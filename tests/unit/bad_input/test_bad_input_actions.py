"""The actions, driven with random and adversarial arguments: k8s_apply_report's logic
(module_utils.k8s_manifests.apply_report) returns a report or raises ManifestError naming the
argument, and never changes its input."""

from __future__ import annotations

import copy

from bad_input_values import SETTINGS, TALLY, anything, like, names_one_of
from hypothesis import example, given
from hypothesis import strategies as st

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    ManifestError,
    apply_report,
)

OBJECT = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "training"}}
documents = like(st.lists(like(st.just(OBJECT)), max_size=3))
results = like(
    st.fixed_dictionaries(
        {"changed": anything, "result": like(st.fixed_dictionaries({"results": like(st.lists(anything))}))}
    )
)


@SETTINGS
@given(documents, results, like(st.lists(like(st.just(OBJECT)), max_size=2)), st.booleans())
@example([OBJECT, OBJECT], {"changed": True, "result": {"results": [{"changed": True, "diff": 1}]}}, [], True)
@example([OBJECT], {"error": {"msg": b"\x00"}}, None, False)
def test_apply_report_returns_or_fails_naming_the_argument(objects, registered, deferred, check_mode):
    originals = copy.deepcopy((objects, registered, deferred))
    TALLY["action calls"] += 1
    try:
        report = apply_report(objects, registered, deferred, "the objects", check_mode)
    except ManifestError as error:
        assert names_one_of(str(error), ("documents", "results", "deferred")), str(error)
    else:
        assert isinstance(report["msg"], str) and report["msg"]
        assert report.get("failed", False) == bool(report["rejected_objects"])
        assert all(isinstance(line, str) for line in report["changed_objects"] + report["rejected_objects"])
    assert repr((objects, registered, deferred)) == repr(originals)
