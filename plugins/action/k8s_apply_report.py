# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Report one kubernetes.core.k8s call over many objects object by object (see the module's
documentation in plugins/modules/k8s_apply_report.py). Runs on the controller only."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import (
    ManifestError,
    apply_report,
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("objects", "results", "deferred", "what"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            report = apply_report(
                args.get("objects"),
                args.get("results"),
                args.get("deferred") or [],
                str(args.get("what") or "the objects"),
                check_mode=bool(self._play_context.check_mode),
            )
        except ManifestError as error:
            result.update(failed=True, msg="k8s_apply_report: %s" % error)
            return result
        # The task's diff keyword (diff: false where the objects hold secrets), else --diff.
        if not self._task.diff:
            report.pop("diff")
        result.update(report)
        # Shown without -v, as debug is: which objects changed, or were rejected and why.
        result["_ansible_verbose_always"] = True
        return result
