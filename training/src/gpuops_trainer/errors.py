"""Exit codes and the exceptions that map to them.

Launchers such as Kubeflow's ``restartPolicy: ExitCode`` treat 1-127 as permanent failures and
128+N (signals, OOM kills) as retryable, so deterministic problems get small codes here.

Signals are not codes the trainer chooses: a process killed by signal N (SIGKILL from the
kernel's OOM killer or after a pod's grace period) has no exit status of its own; a shell and
container runtimes report 128+N (137 for SIGKILL), which is what Kubernetes records as the
container's exit code. SIGTERM is the one signal the trainer catches (a pod being deleted,
torchrun's agent shutting its workers down): it writes its ``run_end`` and exits 143, the
code the signal would have given. Under torchrun the agent exits 1 whenever a
worker failed and names the worker's code or signal in its summary. README.md lists the same
table (a test checks they agree).
"""

EXIT_OK = 0
EXIT_FAILURE = 1  # unexpected error (traceback printed), including injected faults
EXIT_CONFIG = 2  # bad arguments or configuration: retrying cannot help
EXIT_DATA = 3  # the dataset is unusable
EXIT_NONFINITE = 4  # too many consecutive steps with a non-finite loss
EXIT_STORAGE = 5  # a checkpoint cannot be written: the volume is full (or over quota)
# Another rank, its node or the rendezvous went away in the middle of a collective: this rank
# is healthy and the run can go on from its checkpoint once all ranks are back, so the code is
# in the range restart policies retry (128 and up), above every signal's 128+N.
EXIT_PEER_LOST = 200
EXIT_TERMINATED = 128 + 15  # SIGTERM, caught so that the rank's run_end is written

# What the collective libraries say when the other end of a connection is gone.
PEER_LOST_MESSAGES = (
    "Connection reset by peer",
    "Connection closed by peer",
    "Broken pipe",
    "remote process exited",
    "Connection refused",
)


def peer_lost(error: BaseException) -> bool:
    """Whether ERROR says a peer rank or the rendezvous store went away (gloo reports it as a
    RuntimeError naming the connection, NCCL and the c10d store with torch's Dist* errors)."""
    import torch.distributed as dist

    if isinstance(error, (dist.DistNetworkError, dist.DistStoreError)):
        return True
    message = str(error)
    return isinstance(error, RuntimeError) and any(text in message for text in PEER_LOST_MESSAGES)


class TrainerError(Exception):
    """Base class for failures that end the run with a specific exit code."""

    exit_code = EXIT_FAILURE


class ConfigError(TrainerError):
    exit_code = EXIT_CONFIG


class DataError(TrainerError):
    exit_code = EXIT_DATA


class NonFiniteLossError(TrainerError):
    exit_code = EXIT_NONFINITE


class StorageError(TrainerError):
    exit_code = EXIT_STORAGE


class Terminated(TrainerError):
    """Raised by the SIGTERM handler: the rank was told to stop (pod deletion, preemption,
    or torchrun's agent shutting its workers down after a failure elsewhere)."""

    exit_code = EXIT_TERMINATED


class InjectedFault(TrainerError):
    """Raised by ``--inject-fault RANK@STEP:exit``: a clean, reported exit with status 1."""

    exit_code = EXIT_FAILURE
