"""A simulated training fleet: N kwok nodes of 8 GPUs and the log each pod of an N x 8 rank job
would print, for the scale tests and benchmarks/scale.

Nothing here shrinks what the collection does: the job is a real PyTorchJob or Indexed Job of N
pods with 8 ranks each, created by playbooks/train.yml through the real API server and the real
Training Operator, scheduled by the real scheduler onto kwok nodes; kwok serves each pod's log
from a file written here. A pod's log is what 8 ranks of a job of ``pods * 8`` ranks print:

- NCCL's init at INFO (:func:`rank_init_lines`, also behind benchmarks/parse_speed),
  interleaved line by line across the pod's ranks as their processes write it: NCCL 2.21 on an
  8-GPU node with 8 InfiniBand HCAs, in the shapes of the real logs in
  tests/unit/fixtures/nccl/published (``NET/IB : Using [0]mlx5_0:1/IB ...``, ``Using network
  IB``, intra-node ``via P2P/CUMEM``, ``via NET/IB/N/GDRDMA``, ``Connected all rings``, one
  ``Init COMPLETE`` per rank of ``nranks N``);
- the trainer's JSON lines of 8 ranks, made from a real run's records (``template``: each
  rank's output of a real two-rank torchrun run; rank 0's for global rank 0, rank 1's for the
  others) with rank, local rank, world size, host and node rewritten, and each step record
  repeated (steps renumbered) until the log reaches the size the test chooses.

Faults: ``missing_init`` ranks never print their ``Init COMPLETE`` and stop after ``run_start``;
a pod in ``killed_pods`` stops part way through (no ``run_end``), as an OOM-killed container's log
does; the caller annotates that pod to fail with exit code 137 and reason OOMKilled.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path

GPUS_PER_NODE = RANKS_PER_POD = 8
CHANNELS = 16
NICS = 8
# Which node a pod lands on is the scheduler's choice, and its host name the controller's: a
# pod's log is written with these in their place and filled in once the pod is scheduled
# (:func:`placed`).
HOST, NODE = "@@HOST@@", "@@NODE@@"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# A fleet node's taint and label: only the fleet job (which tolerates and selects them) lands
# on these nodes, and nothing else of the suite lands there.
FLEET_KEY = "gpuops.test/fleet"


def fleet_nodes(count: int, prefix: str = "fleet-node") -> list[str]:
    return ["%s-%03d" % (prefix, index) for index in range(count)]


def trainer_records(text: str) -> list[dict]:
    """The JSON-lines records of one rank's output (other lines are dropped)."""
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def rank_init_lines(rank, nranks, round_index, rng, host=None, complete=True):
    """The NCCL INFO lines one rank prints while one communicator initialises, as NCCL 2.21
    prints them at INFO on an 8-GPU node with 8 InfiniBand HCAs and GPUDirect RDMA; ``host``
    is its host name (``trainer-worker-<node>`` by default), and without ``complete`` the init
    stops before ``Init COMPLETE`` (a rank that hung in it)."""
    node, device = divmod(rank, GPUS_PER_NODE)
    host = host or "trainer-worker-%d" % node
    pid = 200 + device
    prefix = "%s:%d:%d [%d] NCCL INFO " % (host, pid, pid, device)
    init = "%s:%d:%d [%d] NCCL INFO " % (host, pid, 3000 + 10 * round_index + device, device)
    comm = "0x%x" % (0x55D5F5000000 + (round_index << 20) + rank * 0x1000)
    comm_id = "0x%016x" % (0x9D4C8C70B6800A00 + round_index)
    bus = "%x000" % (0x18 + 0x10 * device)
    nnodes = max(1, nranks // GPUS_PER_NODE)
    hcas = " ".join("[%d]mlx5_%d:1/IB" % (nic, nic) for nic in range(NICS))
    lines = [
        prefix + "cudaDriverVersion 12040",
        prefix + "Bootstrap : Using eth0:10.%d.%d.%d<0>" % (node >> 8, node & 255, 10 + device),
        prefix + "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.",
        prefix + "NCCL_IB_HCA set to mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
        init + "NET/IB : Using %s [RO]; OOB eth0:10.%d.%d.%d<0>" % (hcas, node >> 8, node & 255, 10 + device),
        init + "Using non-device net plugin version 0",
        init + "Using network IB",
        init + "DMA-BUF is available on GPU device %d" % device,
        init
        + "ncclCommInitRank comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId %s - Init START"
        % (comm, rank, nranks, device, device, bus, comm_id),
        init + "Setting affinity for GPU %d to ffffffff,00000000,ffffffff" % device,
        init + "NVLS multicast support is available on dev %d" % device,
        init
        + "comm %s rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0"
        % (comm, rank, nranks, nnodes, GPUS_PER_NODE, device),
        init + "NVLS Head  %d: %s" % (device, " ".join(str(device + GPUS_PER_NODE * n) for n in range(8))),
        init
        + "Trees "
        + " ".join("[%d] %d/-1/-1->%d->%d" % (c, rank + 8, rank, max(rank - 8, -1)) for c in range(8)),
        init + "P2P Chunksize set to 131072",
        init + "=== System : maxBw 48.0 totalBw 370.0 ===",
        init + "CPU/0 (1/1/2)",
        init + "+ PCI[48.0] - PCI/%s (1000c01010000000)" % bus,
        init + "              + PCI[48.0] - GPU/%s (%d)" % (bus, device),
        init + "                            + NVL[370.0] - NVS/0",
        init + "Pattern 4, crossNic 0, nChannels 16, bw 40.000000/40.000000, type NVL/PIX, sameChannels 0",
    ]
    for channel in range(CHANNELS):
        peer = rank - device + (device + 1) % GPUS_PER_NODE
        lines.append(
            init
            + "Channel %02d/0 : %d[%d] -> %d[%d] via P2P/CUMEM/read" % (channel, rank, device, peer, peer % 8)
        )
    for channel in range(CHANNELS):
        nic = channel % NICS
        remote = (rank + GPUS_PER_NODE) % nranks
        lines.append(
            init
            + "Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/IB/%d/GDRDMA"
            % (channel, rank, device, remote, device, nic)
        )
        lines.append(
            init
            + "Channel %02d/0 : %d[%d] -> %d[%d] [receive] via NET/IB/%d/GDRDMA"
            % (channel, remote, device, rank, device, nic)
        )
    lines += [
        init + "Connected all rings, use ring PXN 0 GDR 1",
        init + "Connected all trees",
        init + "Connected NVLS tree",
        init + "threadThresholds 8/8/64 | 8192/8/64 | 512 | 512",
        init
        + "16 coll channels, 16 collnet channels, 16 nvls channels, 16 p2p channels, 2 p2p channels per peer",
        init + "CC Off, workFifoBytes 1048576",
        init + "TUNER/Plugin: Could not find: libnccl-tuner.so libnccl-net.so. Using internal tuner plugin.",
        init + "ncclCommInitRank comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %s commId %s"
        " - Init COMPLETE" % (comm, rank, nranks, device, device, bus, comm_id),
        init + "Init timings - ncclCommInitRank: rank %d nranks %d total %.2f (kernels 0.21, alloc 0.02, "
        "bootstrap 1.10, allgathers 0.20, topo 0.30, graphs 0.05, connections 0.40, rest 0.03)"
        % (rank, nranks, rng.uniform(1, 3)),
    ]
    if not complete:
        del lines[-2:]
    if rank == 0:
        lines.insert(1, prefix + "NCCL version 2.21.5+cuda12.4")
    return lines


# A small real run of the trainer on CPU that still shows a falling loss and writes checkpoints
# (about 20 s on 2 cores): its records are the template of every simulated rank's.
TRAINER_ARGS = [
    "--model=retinanet_resnet18_fpn",
    "--dataset=synthetic",
    "--synthetic-images=16",
    "--synthetic-classes=3",
    "--image-size=96",
    "--min-size=96",
    "--max-size=96",
    "--epochs=3",
    "--batch-size=2",
    "--lr=0.01",
    "--warmup-iters=2",
    "--workers=0",
    "--dist-backend=gloo",
    "--print-freq=2",
    "--threads=1",
]


def run_trainer_ranks(workdir: Path, timeout: int = 600, preexec_fn=None) -> dict[int, str]:
    """Each rank's stdout and stderr of a real two-rank gloo torchrun run of the trainer with
    TRAINER_ARGS in WORKDIR (the output rank logs and simulated fleets are made of)."""
    repo_root = Path(__file__).resolve().parents[2]
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        "--nproc-per-node=2",
    ]
    command += ["--log-dir=%s" % (workdir / "logs"), "--redirects=3", "-m", "gpuops_trainer.train"]
    command += ["--output-dir=%s" % (workdir / "output"), *TRAINER_ARGS]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(repo_root / "training" / "src"), env.get("PYTHONPATH")])
    )
    completed = subprocess.run(
        command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout, check=False,
        preexec_fn=preexec_fn,
    )  # fmt: skip
    if completed.returncode != 0:
        raise RuntimeError(
            "the trainer's torchrun run failed: " + completed.stdout[-3000:] + completed.stderr[-3000:]
        )
    logs = {}
    for rank in (0, 1):
        (attempt,) = sorted(workdir.glob("logs/*/attempt_0/%d" % rank))
        logs[rank] = (attempt / "stdout.log").read_text() + (attempt / "stderr.log").read_text()
        if '"event":"run_end"' not in logs[rank]:
            raise RuntimeError("rank %d of the trainer's run did not end: %s" % (rank, logs[rank][-3000:]))
    return logs


def fleet_job_vars(kubeconfig, namespace, runs_dir, launcher, pods, run_duration_s, **extra):
    """train.yml's variables for a job of ``pods`` pods x 8 ranks on the fleet nodes (8 GPUs,
    IB, the nodes' taint tolerated and their label selected), running ``run_duration_s``."""
    settings = {
        "training_job_launcher": launcher,
        "training_job_name": "fl",
        "training_job_runs_dir": str(runs_dir),
        "training_job_namespace": namespace,
        "training_job_kubeconfig": str(kubeconfig),
        "training_job_image": "registry.example/gpuops-trainer:test",
        "training_job_nnodes": pods,
        "training_job_nproc_per_node": RANKS_PER_POD,
        "training_job_gpus_per_node": GPUS_PER_NODE,
        "training_job_backend": "auto",
        "training_job_cpu": "32",
        "training_job_memory": "512Gi",
        "training_job_fabric": "ib",
        "training_job_network": "rdma-net",
        "training_job_node_selector": {FLEET_KEY: "true"},
        "training_job_tolerations": [{"key": FLEET_KEY, "operator": "Exists", "effect": "NoSchedule"}],
        "training_job_timeout_s": 3600,
        "training_job_progress_interval_s": 5,
        "training_job_poll_interval_s": 1,
        # Room to serve every pod's log while it runs (the early copies read them then).
        "training_job_pod_annotations": {"gpuops.test/run-duration": "%ds" % run_duration_s},
        # The template run's ranks report this machine's locked-memory limit.
        "training_verify_memlock_unlimited": False,
    }
    settings.update(extra)
    return settings


def node_index(pod):
    """The node (pod) index of a training pod, whoever created it; None when unknown."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    labels = metadata.get("labels") or {}
    if COMPLETION_INDEX in annotations:
        return int(annotations[COMPLETION_INDEX])
    replica_type = labels.get("training.kubeflow.org/replica-type")
    replica_index = int(labels.get("training.kubeflow.org/replica-index", "0"))
    if replica_type == "master":
        return 0
    if replica_type == "worker":
        # Worker i is node i + 1 beside a Master, node i in a job of Workers only.
        return replica_index + (1 if labels.get("gpuops.test/with-master") else 0)
    return None


def fleet_node_specs(names, gpus=GPUS_PER_NODE):
    """kwok GPU nodes (k8s_harness.gpu_node) that only the fleet job lands on."""
    from k8s_harness import gpu_node

    nodes = []
    for name in names:
        node = gpu_node(name, gpus)
        node.labels[FLEET_KEY] = "true"
        node.taints.append({"key": FLEET_KEY, "value": "true", "effect": "NoSchedule"})
        nodes.append(node)
    return nodes


class FleetJob:
    """The logs of a job of ``pods`` pods with 8 ranks each."""

    def __init__(
        self,
        pods: int,
        template: dict[int, str],
        missing_init: Iterable[int] = (),
        killed_pods: Iterable[int] = (),
    ):
        self.pods = pods
        self.world = pods * RANKS_PER_POD
        self.template = {rank: trainer_records(text) for rank, text in template.items()}
        self.missing_init = set(missing_init)
        self.killed_pods = set(killed_pods)

    # ---- NCCL

    def _nccl_text(self, pod: int) -> str:
        """The pod's ranks' init lines, interleaved line by line as their processes write them."""
        ranks = range(pod * GPUS_PER_NODE, (pod + 1) * GPUS_PER_NODE)
        per_rank = [
            rank_init_lines(rank, self.world, 0, random.Random(rank), HOST, rank not in self.missing_init)
            for rank in ranks
        ]
        lines = []
        for index in range(max(len(rank_lines) for rank_lines in per_rank)):
            lines.extend(rank_lines[index] for rank_lines in per_rank if index < len(rank_lines))
        return "\n".join(lines) + "\n"

    # ---- the trainer's records

    def _records(self, pod: int, local: int, step_copies: int) -> list[str]:
        rank = pod * RANKS_PER_POD + local
        template = self.template[0 if rank == 0 else max(self.template)]
        where = {
            "rank": rank,
            "local_rank": local,
            "world_size": self.world,
            "host": HOST,
            "node": NODE,
        }
        lines = []
        step_number = 0
        for record in template:
            if record.get("event") == "step":
                for copy in range(step_copies):
                    step_number += 1
                    lines.append(self._line(record, where, step_copies, step=step_number, copy=copy))
            else:
                lines.append(self._line(record, where, step_copies))
        if rank in self.missing_init:
            # The rank never got past NCCL's init: what it printed before it.
            starts = [index for index, line in enumerate(lines) if '"event":"run_start"' in line]
            lines = lines[: starts[0] + 1] if starts else lines[:1]
        elif pod in self.killed_pods:
            lines = lines[: max(1, int(len(lines) * 0.6))]
        return lines

    @staticmethod
    def _line(record: dict, where: dict, step_copies: int, step: int | None = None, copy: int = 0) -> str:
        record = dict(record, **where)
        for key in ("iters_per_epoch", "steps_per_epoch"):
            if key in record:
                record[key] = record[key] * step_copies
        if step is not None:
            record["step"] = step
            record["iter"] = record.get("iter", 0) * step_copies + copy
        elif isinstance(record.get("step"), int):
            record["step"] = record["step"] * step_copies
        if isinstance(record.get("global_step"), int):
            record["global_step"] = record["global_step"] * step_copies
        return json.dumps(record, separators=(",", ":"))

    # ---- a pod's log

    def pod_log(self, pod: int, target_bytes: int = 0) -> str:
        """Pod ``pod``'s log, its step records repeated until it is about ``target_bytes``."""
        nccl = self._nccl_text(pod)
        one = self._records_text(pod, 1)
        copies = 1
        if target_bytes > len(nccl) + len(one):
            per_copy = len(self._records_text(pod, 2)) - len(one)
            copies = 1 + math.ceil((target_bytes - len(nccl) - len(one)) / max(per_copy, 1))
        return nccl + (one if copies == 1 else self._records_text(pod, copies))

    def _records_text(self, pod: int, step_copies: int) -> str:
        per_rank = [self._records(pod, local, step_copies) for local in range(RANKS_PER_POD)]
        lines = []
        for index in range(max(len(rank) for rank in per_rank)):
            lines.extend(rank[index] for rank in per_rank if index < len(rank))
        return "\n".join(lines) + "\n"

    def write_logs(self, directory: Path, target_bytes: int = 0) -> dict[int, Path]:
        """Every pod's log in ``directory`` (``<pod index>.log``), by pod index."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = {}
        for pod in range(self.pods):
            path = directory / ("%d.log" % pod)
            path.write_text(self.pod_log(pod, target_bytes))
            paths[pod] = path
        return paths


def pod_node(pod):
    """The node a pod is bound to (a FleetLogServer key); None before it is."""
    return (pod.get("spec") or {}).get("nodeName")


def placed(log: str, host: str, node: str) -> str:
    """A pod's log as the pod printed it on ``node`` with host name ``host``."""
    return log.replace(HOST, host).replace(NODE, node)


def to_cri(text: str, start: dt.datetime, step: dt.timedelta = dt.timedelta(microseconds=100)) -> str:
    """``text`` as the CRI log kwok reads (``<RFC 3339> stdout F <line>``), one stamp a line."""
    out = []
    moment = start
    for line in text.splitlines():
        out.append("%s stdout F %s\n" % (moment.strftime("%Y-%m-%dT%H:%M:%S.%f000Z"), line))
        moment += step
    return "".join(out)


class FleetLogServer(threading.Thread):
    """Serve every pod of the namespace its log (``logs[key(pod)]``, a file of
    :meth:`FleetJob.write_logs`, in CRI form) once the scheduler has placed it, with its host
    name and node filled in, through a kwok ``Logs`` object; pods of ``annotate`` (by key) get
    those annotations at the same time (``gpuops.test/fail`` and its exit code and reason make
    kwok end that pod so). ``key`` is :func:`node_index` unless given (``pod_node`` serves each
    node's pod its own log, whatever created it)."""

    def __init__(self, api_client, state_dir, namespace, logs, annotate=None, interval=0.5, key=None):
        super().__init__(daemon=True)
        self.key = key or node_index
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.state_dir = Path(state_dir)
        self.namespace = namespace
        self.logs = logs
        self.annotate = {} if annotate is None else annotate
        self.interval = interval
        self.served = {}
        self.errors = []
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            try:
                listing = self.core.list_namespaced_pod(self.namespace, _preload_content=False)
                for pod in json.loads(listing.data)["items"]:
                    name, node = pod["metadata"]["name"], pod["spec"].get("nodeName")
                    index = self.key(pod)
                    if name not in self.served and index in self.logs and node:
                        self._serve(pod, index)
                        self.served[name] = node
            except Exception as error:  # keep serving; the test reports what went wrong
                self.errors.append(repr(error))
            self._halt.wait(self.interval)

    def _serve(self, pod, index):
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        host = pod["spec"].get("hostname") or name
        target = self.state_dir / "pod-logs" / self.namespace / name / "_all.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        text = self.logs[index].read_text()
        target.write_text(to_cri(placed(text, host, node), dt.datetime.now(dt.timezone.utc)))
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"logs": [{"logsFile": str(target)}]},
        }
        self.custom.create_namespaced_custom_object("kwok.x-k8s.io", "v1alpha1", self.namespace, "logs", body)
        if index in self.annotate:
            patch = {"metadata": {"annotations": self.annotate[index]}}
            self.core.patch_namespaced_pod(name, self.namespace, patch)

    def stop(self):
        self._halt.set()
        self.join(timeout=30)
