"""The locked-memory limit a rank runs with, for its run_start record.

Kubernetes never sets RLIMIT_MEMLOCK: a container inherits its runtime's (often 64 KiB under
CRI-O, 8 MiB under containerd), IPC_LOCK does not lift it for a non-root user, and RDMA
memory registration (ibv_reg_mr) then fails while NCCL quietly falls back to sockets. The
node's configuration file says what should apply; only the process itself knows what does.
"""

from __future__ import annotations

import resource

# How the metrics write RLIM_INFINITY, as CRI-O's and containerd's ulimit settings do.
UNLIMITED = -1


def memlock_limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_MEMLOCK of this process in bytes, UNLIMITED for no limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return _bytes(soft), _bytes(hard)


def _bytes(value: int) -> int:
    return UNLIMITED if value == resource.RLIM_INFINITY else int(value)
