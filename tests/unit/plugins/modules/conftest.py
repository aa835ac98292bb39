"""Run a module's main() in-process and return what it printed as JSON."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args


class ModuleRun:
    def __init__(self, result, exit_code):
        self.result = result
        self.exit_code = exit_code

    @property
    def failed(self):
        return bool(self.result.get("failed"))


@pytest.fixture
def run_module(capsys):
    def run(main, args, check_mode=False):
        args = dict(args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(SystemExit) as exit_info:
            main()
        return ModuleRun(json.loads(capsys.readouterr().out), exit_info.value.code)

    return run
