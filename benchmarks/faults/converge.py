"""Time a cluster role's first converge against a second run that has nothing to do.

Each role runs three times against the test harness's real kube-apiserver (started if it is
not up): the first converge, a second run that must change nothing, then `state: absent` to
clean up. The figure is the second run's time as a share of the first, measured in the same
invocation (aim: under a third). Prints JSON.

    .venv/bin/python benchmarks/faults/converge.py [--roles training_namespace,...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import secrets
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
for path in ("tests/harness", "tests/integration"):
    sys.path.insert(0, str(REPO / path))

from k8s_harness import Harness  # noqa: E402
from playbook_runner import run_role_locally  # noqa: E402


def training_namespace_vars(kubeconfig, suffix, _workdir):
    return {
        "training_namespace_name": "bench-" + suffix,
        "training_namespace_priority_class": "bench-priority-" + suffix,
        "training_namespace_kubeconfig": kubeconfig,
        "training_namespace_quota_gpus": 8,
    }


def secondary_networks_vars(kubeconfig, suffix, _workdir):
    return {
        "secondary_networks_kubeconfig": kubeconfig,
        "secondary_networks_namespace": "default",
        "secondary_networks_multus_manifest": str(
            REPO / "molecule/secondary_networks/files/multus-standin.yml"
        ),
        "secondary_networks_multus_namespace": "mol-multus",  # the stand-in manifest's own namespace
        "secondary_networks_attachments": [
            {
                "name": "bench-roce-" + suffix,
                "type": "macvlan",
                "master": "ens1f0np0",
                "ipam": {"type": "host-local", "subnet": "192.168.10.0/24"},
            },
        ],  # fmt: skip
    }


def training_operator_vars(kubeconfig, _suffix, workdir):
    from sources import render_file

    manifests = render_file(
        Harness(), "training-operator-v1", pathlib.Path(workdir) / "training-operator-v1.yaml"
    )
    return {
        "training_operator_kubeconfig": kubeconfig,
        "training_operator_flavor": "v1",
        "training_operator_manifests": str(manifests),
        "training_operator_wait_poll_interval": 1,
    }


ROLES = {
    "training_namespace": training_namespace_vars,
    "secondary_networks": secondary_networks_vars,
    "training_operator": training_operator_vars,
}


def timed_run(role, variables):
    started = time.perf_counter()
    run = run_role_locally(role, variables, timeout=900)
    seconds = time.perf_counter() - started
    if run.rc != 0:
        raise SystemExit("%s failed (exit %d):\n%s" % (role, run.rc, run.output[-4000:]))
    changed = int(re.search(r"changed=(\d+)", run.output.rsplit("PLAY RECAP", 1)[1]).group(1))
    return seconds, changed


def measure(role, kubeconfig, workdir):
    variables = ROLES[role](kubeconfig, secrets.token_hex(3), workdir)
    first_s, first_changed = timed_run(role, variables)
    second_s, second_changed = timed_run(role, variables)
    timed_run(role, dict(variables, **{role + "_state": "absent"}))
    return {
        "first_converge_s": round(first_s, 2),
        "first_changed": first_changed,
        "second_run_s": round(second_s, 2),
        "second_changed": second_changed,
        "second_to_first": round(second_s / first_s, 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", default=",".join(ROLES), help="comma-separated, from: " + ", ".join(ROLES))
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    roles = [role for role in args.roles.split(",") if role]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        parser.error("--roles: unknown %s; choose from %s" % (", ".join(unknown), ", ".join(ROLES)))
    if not (REPO / ".build/dev-collections/ansible_collections/gpuops/training").exists():
        raise SystemExit("run `make collection` (or the tests) first: .build/dev-collections is missing")
    harness = Harness()
    harness.up()
    with tempfile.TemporaryDirectory(prefix="converge-bench-") as workdir:
        results = {role: measure(role, str(harness.kubeconfig), workdir) for role in roles}
    summary = {
        "roles": results,
        "aim": "second_to_first < 0.333",
        "roles_meeting_aim": sorted(
            role for role, result in results.items() if result["second_to_first"] < 1 / 3
        ),
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
