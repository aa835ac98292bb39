# Copyright: (c) 2026, gpuops.training contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

"""The torchrun command of a training run, for every launcher, and the trainer's arguments.

Every launcher runs ``python -m gpuops_trainer.launch`` (torchrun that exits with the failed
rank's own code) with ``-m gpuops_trainer.train`` and the same trainer arguments, in one of
three rendezvous:

- standalone (the ``local`` launcher): ``--standalone --nnodes=1``;
- static multi-node (``ssh``): ``--nnodes=N --node-rank=I`` with c10d on the first node,
  which hosts the store (``is_host``), each node advertising ``--local-addr``;
- c10d (the Kubernetes launchers and Run:ai): ``--nnodes=N`` (``MIN:MAX`` for an elastic
  PyTorchJob) with the endpoint the kind provides, and ``--sync-bn`` across nodes with GPUs.

The settings are the training_job role's variables without their prefix
(:mod:`training_settings`); the caller gives what only it knows: the endpoint, a node's rank
and address, and, on the hosts, the log and output directories.
"""

from __future__ import annotations

from ansible_collections.gpuops.training.plugins.module_utils import training_settings as ts
from ansible_collections.gpuops.training.plugins.module_utils.role_settings import SettingsError
from ansible_collections.gpuops.training.plugins.module_utils.setting_values import as_int as _int

LAUNCH_MODULE = "gpuops_trainer.launch"
TRAIN_MODULE = "gpuops_trainer.train"
# torchrun --redirects=3: every rank's stdout and stderr go to files under --log-dir.
REDIRECT_ALL = "3"


def trainer_args(settings, output_dir):
    """The trainer's arguments, the same under every launcher."""
    s = settings
    args = ["--output-dir=%s" % output_dir, "--model=%s" % s["model"], "--dataset=%s" % s["dataset"]]
    if s["dataset"] != "synthetic":
        args.append("--data-path=%s" % s["dataset_path"])
    else:
        args += [
            "--synthetic-images=%d" % _int(s["synthetic_images"]),
            "--synthetic-classes=%d" % _int(s["synthetic_classes"]),
            "--image-size=%d" % _int(s["image_size"]),
        ]
    args += [
        "--min-size=%d" % _int(s["min_size"]),
        "--max-size=%d" % _int(s["max_size"]),
        "--epochs=%d" % _int(s["epochs"]),
        "--batch-size=%d" % _int(s["batch_size"]),
        "--lr=%s" % float(s["lr"]),
        "--warmup-iters=%d" % _int(s["warmup_iters"]),
        "--workers=%d" % _int(s["workers"]),
        "--dist-backend=%s" % s["backend"],
        "--dist-timeout-s=%d" % _int(s["collective_timeout_s"]),
        "--print-freq=%d" % _int(s["print_freq"]),
    ]
    if (_int(s["threads_per_process"]) or 0) > 0:
        args.append("--threads=%d" % _int(s["threads_per_process"]))
    if s.get("inject_fault"):
        args.append("--inject-fault=%s" % s["inject_fault"])
    args += list(s["extra_args"])
    # SyncBatchNorm across the pods of a Kubernetes run (the local and ssh launchers add none).
    if s["launcher"] in ts.CLUSTER_LAUNCHERS and ts.sync_bn(s) and "--sync-bn" not in args:
        args.append("--sync-bn")
    return args


def torchrun_argv(
    settings,
    endpoint=None,
    nnodes=None,
    node_rank=None,
    local_addr=None,
    python=None,
    log_dir=None,
    output_dir=None,
):
    """The whole command line for valid settings (training_checks.checked).

    Without ``endpoint`` the run is standalone on one node. With ``node_rank`` it is a static
    multi-node run of ``nnodes`` nodes whose first one hosts the c10d store. Otherwise c10d at
    ``endpoint`` over ``nnodes`` (default the settings' own, ``MIN:MAX`` for an elastic run).
    ``python`` defaults to the host's interpreter (``python``) on the local and ssh launchers
    and the image's (``container_python``) in a pod; ``output_dir`` to the run's directory on
    the checkpoint volume in a pod; ``log_dir`` to none (the ranks write to the pod's log).
    """
    s = settings
    on_host = s["launcher"] in ts.HOST_LAUNCHERS
    if python is None:
        python = s["python"] if on_host else s["container_python"]
    if output_dir is None:
        if on_host:
            raise SettingsError(
                "output_dir is required for the %s launcher: the trainer's output directory on the host"
                % s["launcher"]
            )
        output_dir = ts.output_dir(s)
    argv = [str(python), "-m", LAUNCH_MODULE]
    if endpoint is None:
        argv += ["--standalone", "--nnodes=1"]
    else:
        if nnodes is None:
            nnodes = (
                "%d:%d" % (_int(s["elastic_min_nodes"]), _int(s["elastic_max_nodes"]))
                if ts.elastic(s)
                else _int(s["nnodes"])
            )
        argv.append("--nnodes=%s" % nnodes)
        if node_rank is not None:
            argv.append("--node-rank=%d" % _int(node_rank))
    argv += ["--nproc-per-node=%d" % _int(s["nproc_per_node"]), "--max-restarts=%d" % _int(s["max_restarts"])]
    if endpoint is not None:
        timeout = _int(s["rdzv_timeout_s"])
        conf = "join_timeout=%d,read_timeout=%d" % (timeout, timeout)
        if node_rank is not None:
            conf = "is_host=%s,%s" % ("true" if _int(node_rank) == 0 else "false", conf)
        argv += ["--rdzv-backend=c10d", "--rdzv-endpoint=%s" % endpoint, "--rdzv-id=%s" % s["run_id"]]
        if local_addr is not None:
            # The address the other nodes reach this one at: torchrun would otherwise advertise
            # the host name, which node names in an inventory often do not resolve to.
            argv.append("--local-addr=%s" % local_addr)
        argv.append("--rdzv-conf=%s" % conf)
    if log_dir is not None:
        argv += ["--log-dir=%s" % log_dir, "--redirects=%s" % REDIRECT_ALL]
    return argv + ["-m", TRAIN_MODULE] + trainer_args(s, output_dir)
