"""Time a cluster role's first converge against a second run that has nothing to do.

Each role runs three times against the test harness's real kube-apiserver (started if it is
not up): the first converge, a second run that must change nothing, then `state: absent` to
clean up. The figures, measured in the same invocation: the second run's time as a share of
the first (aim: under a third) and, for training_namespace and secondary_networks, against
`kubectl apply --server-side` of the same objects with the same field manager, also a no-op
(aim: at most 1.5 times). ansible-playbook's own start (a play with no tasks, timed too) is part
of every run, so the JSON also gives the no-op run less that start against kubectl. Prints JSON.

    .venv/bin/python benchmarks/faults/converge.py [--roles training_namespace,...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import secrets
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
for path in ("tests/harness", "tests/integration"):
    sys.path.insert(0, str(REPO / path))

import yaml  # noqa: E402
from k8s_harness import Harness  # noqa: E402
from playbook_runner import ansible_playbook, run_role_locally  # noqa: E402

DEV_COLLECTIONS = REPO / ".build" / "dev-collections"


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


def _role_defaults(role, variables):
    defaults = yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())
    return {**defaults, **variables}


def training_namespace_objects(variables):
    """The objects the role applies for these variables, built by the collection's own code."""
    from ansible_collections.gpuops.training.plugins.module_utils.training_namespace import (
        PREFIX,
        namespace_objects,
    )

    merged = _role_defaults("training_namespace", variables)
    return namespace_objects({key[len(PREFIX) :]: value for key, value in merged.items()})


def secondary_networks_objects(variables):
    """The Multus manifest's objects labelled as the role labels them, then the networks, as
    the collection's own code builds them from the settings the role passes it."""
    from ansible_collections.gpuops.training.plugins.module_utils.cni import PREFIX, networks_objects
    from ansible_collections.gpuops.training.plugins.module_utils.k8s_manifests import objects

    merged = _role_defaults("secondary_networks", variables)
    role_vars = yaml.safe_load((REPO / "roles/secondary_networks/vars/main.yml").read_text())
    settings = {key: merged[PREFIX + key] for key in role_vars["secondary_networks_settings"]}
    settings["cni_version"] = str(settings["cni_version"])
    labels = {"app.kubernetes.io/managed-by": "gpuops.training", **merged["secondary_networks_labels"]}
    multus = []
    if merged["secondary_networks_multus_manifest"]:
        text = pathlib.Path(merged["secondary_networks_multus_manifest"]).read_text()
        for document in objects(list(yaml.safe_load_all(text))):
            metadata = document.setdefault("metadata", {})
            metadata["labels"] = {**metadata.get("labels", {}), **labels}
            multus.append(document)
    return multus + networks_objects(settings)


ROLE_OBJECTS = {
    "training_namespace": training_namespace_objects,
    "secondary_networks": secondary_networks_objects,
}


def startup_seconds(workdir):
    """ansible-playbook with a play of no tasks: the start every role run pays."""
    playbook = pathlib.Path(workdir) / "empty.yml"
    playbook.write_text(json.dumps([{"hosts": "localhost", "gather_facts": False, "tasks": []}]))
    started = time.perf_counter()
    run = ansible_playbook(
        "-i", "localhost,", "-c", "local", str(playbook), collections_path=DEV_COLLECTIONS, timeout=120
    )
    seconds = time.perf_counter() - started
    if run.rc != 0:
        raise SystemExit("an empty play failed:\n" + run.output[-4000:])
    return seconds


def kubectl_apply_seconds(harness, objects, field_manager, workdir):
    """`kubectl apply --server-side` of the objects, timed; fails unless every one is unchanged."""
    manifest = pathlib.Path(workdir) / "objects.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    command = [str(harness.binary("kubectl")), "apply", "--server-side", "--field-manager", field_manager]
    started = time.perf_counter()
    run = subprocess.run(
        [*command, "-f", str(manifest)],
        env=harness.kubectl_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - started
    lines = run.stdout.splitlines()
    applied = len(lines) == len(objects) and all("serverside-applied" in line for line in lines)
    if run.returncode != 0 or not applied:
        raise SystemExit("kubectl apply --server-side failed:\n%s%s" % (run.stdout, run.stderr))
    return seconds


def measure(role, harness, workdir):
    variables = ROLES[role](str(harness.kubeconfig), secrets.token_hex(3), workdir)
    first_s, first_changed = timed_run(role, variables)
    second_s, second_changed = timed_run(role, variables)
    result = {
        "first_converge_s": round(first_s, 2),
        "first_changed": first_changed,
        "second_run_s": round(second_s, 2),
        "second_changed": second_changed,
        "second_to_first": round(second_s / first_s, 3),
    }
    if role in ROLE_OBJECTS:
        objects = ROLE_OBJECTS[role](variables)
        kubectl_s = kubectl_apply_seconds(harness, objects, "gpuops-training", workdir)
        startup_s = startup_seconds(workdir)
        # Still a no-op for the role: kubectl took nothing over.
        _again_s, again_changed = timed_run(role, variables)
        result.update(
            objects=len(objects),
            kubectl_apply_s=round(kubectl_s, 3),
            second_to_kubectl=round(second_s / kubectl_s, 2),
            playbook_startup_s=round(startup_s, 3),
            second_less_startup_to_kubectl=round((second_s - startup_s) / kubectl_s, 2),
            changed_after_kubectl=again_changed,
        )
    timed_run(role, dict(variables, **{role + "_state": "absent"}))
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roles", default=",".join(ROLES), help="comma-separated, from: " + ", ".join(ROLES))
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    roles = [role for role in args.roles.split(",") if role]
    unknown = sorted(set(roles) - set(ROLES))
    if unknown:
        parser.error("--roles: unknown %s; choose from %s" % (", ".join(unknown), ", ".join(ROLES)))
    if not (DEV_COLLECTIONS / "ansible_collections/gpuops/training").exists():
        raise SystemExit("run `make collection` (or the tests) first: .build/dev-collections is missing")
    sys.path.insert(0, str(DEV_COLLECTIONS))
    harness = Harness()
    harness.up()
    with tempfile.TemporaryDirectory(prefix="converge-bench-") as workdir:
        results = {role: measure(role, harness, workdir) for role in roles}
    summary = {
        "roles": results,
        "aim": "second_to_first < 0.333",
        "roles_meeting_aim": sorted(
            role for role, result in results.items() if result["second_to_first"] < 1 / 3
        ),
        "kubectl_aim": "second_to_kubectl <= 1.5",
        "load_average": [round(value, 2) for value in os.getloadavg()],
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        pathlib.Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
