# gpuops.training: `make demo` trains and verifies on this machine, `make check` is the
# quick loop while editing, `make test` runs every suite. They create what they need (.venv,
# the installed collection, the test harness) on a fresh clone.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
COLLECTIONS := .collections
COLLECTION_DIR := $(COLLECTIONS)/ansible_collections/gpuops/training
VERSION := $(shell sed -n 's/^version: *//p' galaxy.yml)
TARBALL := .build/gpuops-training-$(VERSION).tar.gz
# Everything that goes into the collection artifact.
COLLECTION_SOURCES := galaxy.yml README.md COPYING meta/runtime.yml \
	$(shell find plugins roles playbooks inventories docs/docsite changelogs training/src training/pyproject.toml \
	  training/Containerfile training/.containerignore training/README.md \
	  tests/unit tests/sanity tests/integration tests/podman -type f -not -path '*/__pycache__/*' 2>/dev/null)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/$(COLLECTIONS)
export ANSIBLE_NOCOLOR := 1
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Every part of make test is timed (tests/tools/stopwatch.py) and the table of parts is
# printed at its end; a part run on its own appends its row too.
TIMES := .build/test-times.tsv
TIMED = $(BIN)/python tests/tools/stopwatch.py --log $(TIMES) run

.PHONY: help demo cluster-demo check test bench-scale venv collection system-packages node-image trainer-image registry harness-build \
	execution-environment lint ruff ansible-lint \
	unit unit-collection unit-trainer sanity integration integration-harness integration-harness-real-node \
	integration-harness-simulated integration-host molecule checks checks-then-host molecule-beside release docs docs-check clean

help:
	@echo "make demo            - create .venv, install everything, train RetinaNet on CPU with DDP and verify the run"
	@echo "make check           - the quick loop (under 3 minutes): lint and the unit tests marked neither slow nor distributed"
	@echo "make test            - run every suite: lint, docs-check, unit, sanity, integration, molecule"
	@echo "make cluster-demo    - the job of make demo on real pods: a kubelet and CRI-O on this machine (root)"
	@echo "make bench-scale     - what verifying a 128-pod, 1024-rank run costs the controller (benchmarks/scale)"
	@echo ""
	@echo "suites (make test runs them all; MARKERS='<pytest -m expression>' picks a tier of unit and integration):"
	@echo "make lint            - ruff and ansible-lint"
	@echo "make ruff            - ruff check and ruff format --check"
	@echo "make ansible-lint    - ansible-lint --profile production"
	@echo "make unit            - unit-collection and unit-trainer"
	@echo "make unit-collection - pytest tests/unit: modules, filters, roles, parsers"
	@echo "make unit-trainer    - pytest training/tests (real torchrun runs included)"
	@echo "make sanity          - ansible-test sanity on the built collection"
	@echo "make integration     - end-to-end playbook runs and the Kubernetes harness tests: its three streams side by side"
	@echo "make integration-harness - the tests on the harness: its two lanes side by side"
	@echo "make integration-harness-real-node - the harness tests with the real node (kubelet + CRI-O)"
	@echo "make integration-harness-simulated - the harness tests on kwok's nodes, on .harness-simulated"
	@echo "make integration-host - the tests on this host: torchrun, SSH, podman, a standalone CRI-O"
	@echo "make molecule        - every Molecule scenario (SCENARIOS='a b' picks some), on a harness of its own"
	@echo "make checks          - lint, docs-check, unit and sanity, one after another"
	@echo "make checks-then-host - make test's second stream: checks, then integration-host (under nice)"
	@echo "make molecule-beside - make test's third stream: molecule (under nice)"
	@echo "make docs-check      - fail when docs/collection differs from what make docs generates"
	@echo ""
	@echo "building:"
	@echo "make venv            - create .venv with the pinned tools, torch and the trainer"
	@echo "make collection      - build the collection tarball into .build/ and install it into .collections/"
	@echo "make docs            - regenerate docs/collection from the modules, filters and role argument specs"
	@echo "make release         - check the changelog and build dist/gpuops-training-<version>.tar.gz from tracked files"
	@echo "make system-packages - install the Debian packages the suites need (podman, debootstrap, shellcheck...)"
	@echo "make node-image      - build the systemd podman image the node-role scenarios run in"
	@echo "make harness-build   - build the harness (kube-apiserver, etcd, kwok, kubelet, the Training Operator), the"
	@echo "                       real node's CRI-O, crictl and CoreDNS, and helm into the cache"
	@echo "make trainer-image   - build training/Containerfile on the local test base (tests/podman/trainer_image.py)"
	@echo "make registry        - build the registry the trainer_image role's push tests use"
	@echo "make execution-environment - build execution-environment.yml with ansible-builder and podman on a local"
	@echo "                       Debian base (tests/podman/execution_environment.py)"
	@echo "make clean           - remove .venv, the installed collection and build outputs"

# Debian packages the suites need (podman, runc, debootstrap, shellcheck, openssl).
system-packages:
	tests/tools/ensure-system-packages.sh

# The systemd Debian image the node-role Molecule scenarios run in (built once per machine).
node-image: system-packages $(STAMP)
	$(TIMED) node-image -- tests/podman/build-node-image.sh

# The trainer image the tests run: training/Containerfile built offline on a local Debian base
# that borrows this machine's Python and the venv's torch (tests/podman/trainer_image.py).
# The base's root filesystem is built once per machine (about 2 minutes), the image in
# seconds when nothing changed.
trainer-image: system-packages $(STAMP)
	$(TIMED) trainer-image -- $(BIN)/python tests/podman/trainer_image.py build

# A container registry for the trainer_image role's push tests, built through the Go module
# proxy into the harness's cache (once per machine, a few minutes cold).
registry: $(STAMP)
	$(TIMED) registry -- $(BIN)/python tests/podman/registry.py

# The execution environment of execution-environment.yml, built with ansible-builder and podman
# on a local Debian base, with this checkout's collection, the bundled collections it depends
# on, kubectl and helm from the harness's cache (tests/podman/execution_environment.py). On
# 2 cores at load 8-10: the base 3.5 minutes once per machine, the image 6 to 7.5 minutes cold
# (both 4.4 minutes at load 4), 20-40 seconds after a change to the collection (its own last
# layer), 5 seconds unchanged.
execution-environment: system-packages $(STAMP)
	$(TIMED) execution-environment -- $(BIN)/python tests/podman/execution_environment.py build

# kube-apiserver, etcd, kwok, kubelet and the Training Operator, built through the Go module
# proxy into a cache outside the repository (cold about 10 minutes, warm well under a second),
# the real node's CRI-O, pinns, crictl and CoreDNS (cold about 8 minutes), and helm for the
# gpu_operator tests (about 3 minutes the first time).
harness-build: $(STAMP) system-packages
	$(TIMED) "harness-build: control plane" -- $(BIN)/python tests/harness/k8s_harness.py build
	$(TIMED) "harness-build: real node" -- $(BIN)/python tests/harness/k8s_harness.py real-node build
	$(TIMED) "harness-build: helm" -- $(BIN)/python tests/harness/sources.py helm

# torch with its CUDA libraries makes .venv about 6.3 GiB, and pip needs about 3 GiB more while
# it installs: say so at once rather than with pip's "No space left on device" minutes later.
# pip unpacks its downloads under TMPDIR, which is pointed into .build so that everything it
# writes lands on the filesystem checked here (a small tmpfs /tmp would fail otherwise).
VENV_FREE_GIB := 9
PIP_TMP := .build/pip-tmp
$(STAMP): requirements-dev.txt constraints.txt training/pyproject.toml
	@free_kib=$$(df -Pk . | awk 'NR == 2 {print $$4}'); \
	if (( free_kib < $(VENV_FREE_GIB) * 1024 * 1024 )); then \
	  echo "$(VENV) needs about $(VENV_FREE_GIB) GiB free on the filesystem of $(CURDIR) while it installs;" \
	    "it has $$(( free_kib / 1024 )) MiB free. Free some space (make clean removes this checkout's builds) and rerun." >&2; \
	  exit 1; \
	fi
	$(PYTHON) -m venv $(VENV)
	rm -rf $(PIP_TMP) && mkdir -p $(PIP_TMP)
	TMPDIR=$(CURDIR)/$(PIP_TMP) $(BIN)/python -m pip install --quiet --upgrade pip
	TMPDIR=$(CURDIR)/$(PIP_TMP) $(BIN)/python -m pip install --quiet -r requirements-dev.txt -c constraints.txt -e training
	rm -rf $(PIP_TMP)
	touch $@

venv: $(STAMP)

$(TARBALL): $(STAMP) $(COLLECTION_SOURCES)
	mkdir -p .build
	$(BIN)/ansible-galaxy collection build --force --output-path .build .

$(COLLECTION_DIR)/MANIFEST.json: $(TARBALL)
	# --no-deps: the dependencies come bundled with the `ansible` package.
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(COLLECTIONS) $(TARBALL)

collection: $(COLLECTION_DIR)/MANIFEST.json

# The release artifact: the same tarball, built from a clean copy of the tracked files (so
# nothing local leaks in), with the changelog checked first.
release: $(STAMP)
	$(BIN)/antsibull-changelog lint
	rm -rf .build/release-src dist
	mkdir -p .build/release-src dist
	git ls-files -z | tar --null -T - -cf - | tar -C .build/release-src -xf -
	cd .build/release-src && $(CURDIR)/$(BIN)/ansible-galaxy collection build --force --output-path $(CURDIR)/dist .
	@echo "built dist/gpuops-training-$(VERSION).tar.gz"

# Reference documentation generated from the modules' DOCUMENTATION, the filters' and the
# roles' argument specs, plus the guides in docs/docsite (antsibull-docs). `make test`
# regenerates it and fails when the committed copy in docs/collection is stale.
DOCS_ENV := PATH=$(CURDIR)/$(BIN):$$PATH ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/.build/docs-collections
docs: $(TARBALL)
	rm -rf .build/docs-collections docs/collection && mkdir -p docs/collection
	$(BIN)/ansible-galaxy collection install --force --no-deps -p .build/docs-collections $(TARBALL) >/dev/null
	$(DOCS_ENV) $(BIN)/antsibull-docs collection --use-current --fail-on-error --dest-dir docs/collection gpuops.training

docs-check: $(TARBALL)
	rm -rf .build/docs-collections .build/docs-check && mkdir -p .build/docs-check
	$(BIN)/ansible-galaxy collection install --force --no-deps -p .build/docs-collections $(TARBALL) >/dev/null
	$(DOCS_ENV) $(TIMED) docs-check -- \
	  $(BIN)/antsibull-docs collection --use-current --fail-on-error --dest-dir .build/docs-check gpuops.training
	diff -r docs/collection .build/docs-check || { echo "docs/collection is stale: run make docs and commit it"; exit 1; }

demo: collection
	$(BIN)/ansible-playbook -i inventories/local playbooks/train.yml

# The same job on real pods: the harness with its real node (kubelet + CRI-O), the trainer
# image built from training/Containerfile, then provision_nodes.yml, provision_cluster.yml and
# train.yml (PyTorchJob) against inventories/harness-real-node; everything is brought down at
# the end (GPUOPS_HARNESS_KEEP=1 keeps it). Needs root, like the real node.
cluster-demo: collection harness-build trainer-image
	$(BIN)/python tests/harness/cluster_demo.py

# make test runs four streams side by side from its start, under one make -j4 (output whole per
# part when it ends): the harness's two lanes (with the real node; on simulated nodes alone),
# which mostly wait on the API server, kwok and deadlines; lint, docs-check, unit and sanity
# followed by the tests on this host; and Molecule. The harness lanes are the long poles (45
# minutes as one lane alone, at 0.9 of a core), so the two others run at a lower CPU priority
# (nice) and fill what they leave. Cold, the harness binaries and helm (Go, about 10 minutes),
# the node and trainer images (debootstrap) and the execution environment build in the slots
# while the checks run in one; the lanes start once what they need is built. A failure stops new
# parts; the running ones end first.
NICE := nice -n 10
test: system-packages venv
	@mkdir -p .build && rm -f $(TIMES) $(CPU_LOG)
	@$(MAKE) --no-print-directory collection
	@trap '$(BIN)/python tests/tools/stopwatch.py --log $(TIMES) table' EXIT; \
	$(MAKE) --no-print-directory -j4 --output-sync=target checks-then-host integration-harness-real-node \
	  integration-harness-simulated molecule-beside

# lint, docs-check, unit and sanity one after another (the make above must not run them in
# parallel: -j1), at the lower priority.
checks: collection
	$(NICE) $(MAKE) --no-print-directory -j1 lint docs-check unit sanity

# The host's tests run here, not through a second make, so the collection the harness lane is
# using is not checked (and rebuilt) while it runs.
checks-then-host: checks collection harness-build node-image trainer-image registry execution-environment
	$(NICE) $(INTEGRATION_HOST_RUN)

molecule-beside: collection node-image harness-build
	$(NICE) $(MOLECULE_RUN)

lint: ruff ansible-lint

ruff: $(STAMP)
	$(TIMED) "ruff check" -- $(BIN)/ruff check .
	$(TIMED) "ruff format" -- $(BIN)/ruff format --check .

ansible-lint: collection
	$(TIMED) ansible-lint -- $(BIN)/ansible-lint --profile production

# Test tiers, by the markers declared in pyproject.toml and training/pyproject.toml: `slow`
# needs a real control plane or a real training run, `distributed` runs torchrun. Every test
# runs by default; MARKERS picks a tier, e.g. `make unit MARKERS="not distributed"`.
MARKERS ?=
PYTEST_MARKERS = $(if $(MARKERS),-m "$(MARKERS)")
# Every suite reports the tests that cost the most CPU (tests/tools/cpu_durations.py) and logs
# each test's CPU and wall seconds to CPU_LOG: on 2 cores, CPU is what the suites share.
CPU_LOG := .build/test-cpu.tsv
PYTEST = env PYTHONPATH=$(CURDIR)/tests/tools $(BIN)/python -m pytest -p cpu_durations \
  --cpu-durations-log=$(CURDIR)/$(CPU_LOG) $(PYTEST_MARKERS)

# The quick loop while editing (under 3 minutes on 2 cores): ruff, ansible-lint and the tests
# of the fast tier - no torchrun, no harness, no podman. ansible-lint and the two test suites
# (about 80, 70 and 50 CPU seconds) run side by side; each one's output comes whole when it ends.
check:
	$(MAKE) --no-print-directory -j3 --output-sync=target lint unit MARKERS="not slow and not distributed"

# Two processes: the trainer's tests import torch, which cannot share a process with
# ansible's module_utils patches, and each suite has its own conftest.
unit: unit-collection unit-trainer

unit-collection: collection
	$(TIMED) unit-collection -- $(PYTEST) --cpu-durations=10 tests/unit

unit-trainer: collection
	$(TIMED) unit-trainer -- $(PYTEST) --cpu-durations=15 training/tests

# ansible-test must run outside any git checkout (inside one it only sees tracked files),
# so the built artifact is installed into a directory of its own under /tmp.
SANITY_ROOT := $(or $(TMPDIR),/tmp)/gpuops-training-sanity
sanity: $(TARBALL) system-packages
	$(BIN)/python tests/tools/offline_get_pip.py
	rm -rf $(SANITY_ROOT)
	$(BIN)/ansible-galaxy collection install --force --no-deps -p $(SANITY_ROOT) $(TARBALL) >/dev/null
	cd $(SANITY_ROOT)/ansible_collections/gpuops/training && \
	  $(CURDIR)/$(BIN)/python $(CURDIR)/tests/tools/stopwatch.py --log $(CURDIR)/$(TIMES) run sanity -- \
	  $(CURDIR)/$(BIN)/ansible-test sanity --python 3.11 --venv --color no $(SANITY_ARGS)

# Two streams side by side, each with its output whole when it ends: the tests on the harness's
# control plane and its real node, which mostly wait on the API server, kwok and deadlines, and
# the tests on this host (torchrun, SSH, podman, a standalone CRI-O), which mostly compute.
# Together they take about the longer one's time instead of the sum. A new directory joins the
# host stream unless it is listed here.
# The harness's tests are two lanes on two harnesses of their own, side by side: those with the
# real node (the only lane that may start it: a machine holds one) and those on kwok's simulated
# nodes alone (.harness-simulated, ports 600 above the defaults). Each lane waits more than it
# computes (about 0.9 of a core for both as one lane), so two take about half the time of one.
INTEGRATION_ON_REAL_NODE_HARNESS := tests/integration/real_node tests/integration/nccl_tests \
  tests/integration/harness tests/integration/test_no_secrets_in_logs.py \
  tests/integration/image/test_execution_environment_image.py
INTEGRATION_ON_SIMULATED_HARNESS := tests/integration/cluster tests/integration/launch
INTEGRATION_ON_HARNESS := $(INTEGRATION_ON_REAL_NODE_HARNESS) $(INTEGRATION_ON_SIMULATED_HARNESS)
SIMULATED_HARNESS_ENV := GPUOPS_HARNESS_DIR=$(CURDIR)/.harness-simulated GPUOPS_HARNESS_PORT_OFFSET=600
integration: collection harness-build trainer-image registry execution-environment
	$(MAKE) --no-print-directory -j3 --output-sync=target integration-harness-real-node \
	  integration-harness-simulated integration-host

integration-harness: collection harness-build trainer-image registry execution-environment
	$(MAKE) --no-print-directory -j2 --output-sync=target integration-harness-real-node integration-harness-simulated

integration-harness-real-node: collection harness-build trainer-image registry execution-environment
	$(TIMED) "integration-harness: real node (lane)" -- $(PYTEST) --durations=15 --cpu-durations=15 $(INTEGRATION_ON_REAL_NODE_HARNESS)

integration-harness-simulated: collection harness-build trainer-image registry execution-environment
	$(SIMULATED_HARNESS_ENV) $(TIMED) "integration-harness: simulated nodes (lane)" -- \
	  $(PYTEST) --durations=15 --cpu-durations=15 $(INTEGRATION_ON_SIMULATED_HARNESS)

INTEGRATION_HOST_RUN = $(TIMED) integration-host -- \
  $(PYTEST) --durations=15 --cpu-durations=15 tests/integration $(addprefix --ignore=,$(INTEGRATION_ON_HARNESS))
integration-host: collection harness-build node-image trainer-image registry execution-environment
	$(INTEGRATION_HOST_RUN)

# Every scenario runs, and the target fails naming each one that failed. Those on Kubernetes
# share a harness of their own (.harness-molecule, ports 300 up), so Molecule can run beside
# the integration tests' harness. SCENARIOS picks some, e.g. `make molecule SCENARIOS=crio_limits`.
SCENARIOS ?=
MOLECULE_RUN = $(TIMED) molecule -- $(BIN)/python tests/tools/run_molecule.py $(SCENARIOS)
molecule: collection node-image harness-build
	$(MOLECULE_RUN)

# A simulated job of 16, 64 and 128 pods x 8 ranks with 1 MB and 10 MB logs a pod through
# train.yml on the harness, and the log path it replaced at 16 pods (benchmarks/scale/README.md).
bench-scale: collection harness-build
	$(BIN)/python benchmarks/scale/run.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(COLLECTIONS) .build runs .harness .harness-molecule .harness-simulated
