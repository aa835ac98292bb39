# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the modules that judge logs share: their source options and their one flow.

Each of them (training_log_info, nccl_log_info, nccl_tests_info) collects its log sources,
parses them into facts, checks the facts against its expectations and ends: with the facts,
or failing with one line per unmet expectation. Only the parser, the check and the subject
of the message differ; :func:`judge_logs` is that flow.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils.log_sources import (
    LogSourceError,
    collect_sources,
)
from ansible_collections.gpuops.training.plugins.module_utils.module_args import build_module

# The options every log-reading module shares (documented in the log_sources doc fragment).
SOURCE_ARGUMENT_SPEC = {
    "paths": {"type": "list", "elements": "path", "default": []},
    "base_dir": {"type": "path"},
    "content": {"type": "str"},
    "pod_logs": {"type": "list", "elements": "raw", "default": []},
}


def build_log_module(argument_spec):
    """The module (check mode supported: it only reads) with its own options and the source options."""
    return build_module(dict(SOURCE_ARGUMENT_SPEC, **argument_spec), supports_check_mode=True)


def sources_from_params(params):
    """Collect sources from a module's parameters; raise LogSourceError with a clear message."""
    if not params.get("paths") and params.get("content") is None and not params.get("pod_logs"):
        raise LogSourceError("one of paths, content or pod_logs is required")
    return collect_sources(
        paths=params.get("paths"),
        content=params.get("content"),
        pod_logs=params.get("pod_logs"),
        base_dir=params.get("base_dir"),
    )


def judge_logs(module, parse, check, subject):
    """End the module with the facts ``parse(sources)`` reads from its sources, judged by ``check``.

    ``check(facts)`` returns one message per unmet expectation. The module returns the facts
    with ``ok`` and ``failures``, and fails with "<subject> check failed:" and the messages,
    one per line, when there is any. A source that cannot be read fails it with the message
    naming the source.
    """
    try:
        facts = parse(sources_from_params(module.params))
    except (LogSourceError, OSError) as exc:
        module.fail_json(msg=str(exc), changed=False)
    failures = check(facts)
    facts.update(changed=False, ok=not failures, failures=failures)
    if failures:
        module.fail_json(msg="%s check failed:\n- %s" % (subject, "\n- ".join(failures)), **facts)
    module.exit_json(**facts)
