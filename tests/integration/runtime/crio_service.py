"""Service control of the tests' own CRI-O: what systemd is to crio.service on a real node.

`crio_service.py restart --state-dir ... --bin-dir ... --storage-root ... --name ...` is
the `crio_limits_restart_command` the node-role tests give gpuops.training.crio_limits;
`start` and `stop` are the fixture's (tests/integration/runtime/conftest.py).

CRI-O runs without CAP_SYS_RESOURCE on every host (dropped from the bounding set before it
starts, so conmon and runc lack it too): runc then cannot raise a container's limit above
the daemon's hard limit, as on the project's machines, and a limit above it fails the same
way everywhere. Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "harness"))

from crio_runtime import CrioRuntime  # noqa: E402
from k8s_harness import HarnessError  # noqa: E402

PR_CAPBSET_DROP = 24
CAP_SYS_RESOURCE = 24


def drop_cap_sys_resource() -> None:
    """Remove CAP_SYS_RESOURCE from the bounding set: nothing this process starts gets it."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise SystemExit(f"crio_service: cannot drop CAP_SYS_RESOURCE (errno {errno})")


def runtime_from(args: argparse.Namespace) -> CrioRuntime:
    return CrioRuntime.standalone(args.state_dir, args.bin_dir, args.storage_root, args.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("start", "restart", "stop"))
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--bin-dir", type=Path, required=True)
    parser.add_argument("--storage-root", type=Path, required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--memlock", help="the daemon's memlock from now on, soft:hard in bytes")
    args = parser.parse_args(argv)
    runtime = runtime_from(args)
    if args.action == "stop":
        runtime.stop()
        return 0
    drop_cap_sys_resource()
    try:
        if args.action == "start":
            runtime.start(args.memlock)
        else:
            runtime.restart(args.memlock)
    except HarnessError as error:
        print(f"crio_service: {args.action} failed: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
