"""Run Molecule scenarios one after another, every one of them, and fail naming each that failed.

`make molecule` (and `make test`, beside the integration tests) calls this. The scenarios that
use the Kubernetes test harness share one harness of their own, started once: its state lives
in `.harness-molecule` and its ports are 300 above the default ones, so it runs beside the
harness the integration tests use (`.harness`). `harness_smoke` runs first, while that harness
is still down, because what it tests is the scenarios' create and destroy playbooks starting
and stopping the harness themselves. The harness is brought down at the end only if this run
started it.

Usage: run_molecule.py [SCENARIO ...]   (default: every molecule/*/molecule.yml)
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
MOLECULE_DIR = REPO_ROOT / "molecule"
HARNESS_SCRIPT = REPO_ROOT / "tests" / "harness" / "k8s_harness.py"
HARNESS_CREATE = "resources/harness/create.yml"
# Tests the create/destroy playbooks' own start and stop, so it needs the harness down.
STARTS_ITS_OWN_HARNESS = "harness_smoke"
HARNESS_ENVIRONMENT = {
    "GPUOPS_HARNESS_DIR": str(REPO_ROOT / ".harness-molecule"),
    "GPUOPS_HARNESS_PORT_OFFSET": "300",
}


def all_scenarios() -> list[str]:
    return sorted(path.parent.name for path in MOLECULE_DIR.glob("*/molecule.yml"))


def uses_harness(scenario: str) -> bool:
    return HARNESS_CREATE in (MOLECULE_DIR / scenario / "molecule.yml").read_text()


def ordered(scenarios: list[str]) -> list[str]:
    """harness_smoke first, then the node scenarios, then those on the shared harness."""
    return sorted(scenarios, key=lambda name: (name != STARTS_ITS_OWN_HARNESS, uses_harness(name), name))


def harness(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HARNESS_SCRIPT), command], env=env, capture_output=True, text=True, check=False
    )


def reaped_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str]) -> int:
    known = all_scenarios()
    unknown = [name for name in argv if name not in known]
    if unknown:
        print(f"no such Molecule scenario: {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    env = {**os.environ, **{key: os.environ.get(key, value) for key, value in HARNESS_ENVIRONMENT.items()}}
    molecule = str(Path(sys.executable).with_name("molecule"))
    started_here = False
    failed: list[str] = []
    # Each scenario's wall-clock and CPU seconds (Molecule and the ansible-playbook runs it reaped;
    # the containers' own processes belong to podman's conmon and are not counted).
    timings: list[tuple[str, float, float, bool]] = []
    try:
        for scenario in ordered(argv or known):
            if uses_harness(scenario) and scenario != STARTS_ITS_OWN_HARNESS and not started_here:
                up = harness("up", env)
                if up.returncode != 0:
                    print(up.stdout + up.stderr, file=sys.stderr)
                    print("the Molecule scenarios' harness did not start (output above)", file=sys.stderr)
                    return 1
                started_here = "already up" not in up.stderr
            began, cpu_before = time.monotonic(), reaped_cpu_seconds()
            result = subprocess.run([molecule, "test", "-s", scenario], cwd=REPO_ROOT, env=env, check=False)
            cpu = reaped_cpu_seconds() - cpu_before
            timings.append((scenario, time.monotonic() - began, cpu, result.returncode == 0))
            if result.returncode != 0:
                failed.append(scenario)
    finally:
        if started_here and not os.environ.get("GPUOPS_HARNESS_KEEP"):
            down = harness("down", env)
            if down.returncode != 0:
                print(down.stdout + down.stderr, file=sys.stderr)
                failed.append("(the harness did not come down)")
    for scenario, seconds, cpu, passed in timings:
        print(
            f"molecule {scenario:<24} {'passed' if passed else 'FAILED'} in {seconds:.0f} s ({cpu:.0f} CPU s)"
        )
    if failed:
        print(f"Molecule failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    total = sum(seconds for _scenario, seconds, _cpu, _passed in timings)
    print(f"Molecule: {len(timings)} scenarios passed in {total:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
