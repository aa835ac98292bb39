"""Warn when /dev/shm is too small for the DataLoader workers.

Workers hand batches to the trainer through shared memory; containers often get 64 MiB of
/dev/shm, and the loader then dies with "bus error" or "No space left on device" deep in
a worker. The check is a heuristic: about 1 GiB per worker on the node.
"""

from __future__ import annotations

import os
import shutil

SHM_PATH = "/dev/shm"
BYTES_PER_WORKER = 1 << 30
FIX = "mount a memory-backed emptyDir at /dev/shm (the launcher's shm sizing) or lower --workers"


def shm_shortfall(workers: int, processes_on_node: int, shm_path: str = SHM_PATH) -> dict | None:
    """None if /dev/shm looks big enough, else the facts for the warning."""
    if workers <= 0:
        return None
    try:
        total = shutil.disk_usage(shm_path).total
    except OSError:
        total = 0  # no /dev/shm at all
    wanted = workers * processes_on_node * BYTES_PER_WORKER
    if total >= wanted:
        return None
    return {
        "path": shm_path,
        "shm_bytes": total,
        "wanted_bytes": wanted,
        "workers": workers,
        "processes_on_node": processes_on_node,
        "message": (
            f"{shm_path} has {total / 2**20:.0f} MiB for {workers} DataLoader worker(s) x "
            f"{processes_on_node} process(es) on this node (about 1 GiB each wanted); {FIX}"
        ),
    }


def processes_on_node() -> int:
    try:
        return max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)
    except ValueError:
        return 1
