# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""Write a run directory's directories and files on the controller, in the worker process
(see the module's documentation in plugins/modules/run_files.py). A module per file costs about
0.3 CPU s (two for ansible.builtin.copy); this costs a few milliseconds."""

from __future__ import annotations

from ansible.plugins.action import ActionBase

from ansible_collections.gpuops.training.plugins.module_utils.run_files import (
    RunFilesError,
    write_run_files,
)

# Connections that run on the controller: the files written here are the host's files.
LOCAL_CONNECTIONS = frozenset(("local", "ansible.builtin.local", "ansible.legacy.local"))


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("dest", "directories", "directory_mode", "files"))
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        connection = self._play_context.connection
        if connection not in LOCAL_CONNECTIONS:
            result.update(
                failed=True,
                msg="run_files: writes on the controller only, and host %s connects with %s "
                "(use ansible_connection local for the host that keeps the run directory)"
                % (self._play_context.remote_addr or task_vars.get("inventory_hostname"), connection),
            )
            return result
        args = self._task.args
        # The diff keyword (or --diff), never for a task with no_log: the contents hold secrets.
        show_diff = bool(self._task.diff) and not self._play_context.no_log and not self._task.no_log
        try:
            report = write_run_files(
                args.get("dest"),
                directories=args.get("directories"),
                files=args.get("files"),
                directory_mode=args.get("directory_mode", "0755"),
                check_mode=bool(self._play_context.check_mode),
                diff=show_diff,
            )
        except (RunFilesError, OSError) as error:
            result.update(failed=True, msg="run_files: %s" % error)
            return result
        result.update(report)
        return result
