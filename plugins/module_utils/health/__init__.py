# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Node health: judge a GPU node from tools' saved outputs (nvidia-smi XML, kernel logs).

One module per source; each parses without touching the node and returns findings, dicts
with ``device``, ``check``, ``class`` (``isolate``, ``reboot`` or ``monitor``), ``reason``
and ``remedy``:

- ``isolate``: take the node (or the GPU) out of scheduling; it needs a person or an RMA.
- ``reboot``: a GPU reset or a node reboot is expected to clear it.
- ``monitor``: keep the node in service and watch the signal.
"""
