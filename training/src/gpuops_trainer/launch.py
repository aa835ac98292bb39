"""torchrun that exits with its failed worker's code.

``python -m gpuops_trainer.launch`` takes torchrun's arguments and runs torchrun in this
process. torchrun itself exits 1 whenever a worker failed, whatever the cause; restart
policies read the container's exit code (Kubeflow's ``ExitCode``: 1-127 permanent, 128+
retryable; a Job's ``podFailurePolicy``). Here the first failed worker's code becomes the
launcher's: the trainer's own codes stay (2 configuration, 3 data, 4 non-finite loss, 5
storage: permanent), a worker killed by signal N gives 128+N (137 for SIGKILL and OOM
kills: retryable), as a container running the trainer alone would report. A signal that
stops torchrun's agent itself also gives 128+N. When the rendezvous store is gone (the agent
that hosted it, in another pod, has exited), the agent's own error gives 200, the trainer's
code for a lost peer: retryable, like the rank's failure it follows.
"""

from __future__ import annotations

import sys

from torch.distributed import run as torchrun
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous.api import RendezvousConnectionError

from .errors import EXIT_PEER_LOST


def exit_code_of_failure(exitcode: int) -> int:
    """A worker's status as a shell reports it: -N (killed by signal N) becomes 128+N."""
    if exitcode < 0:
        return 128 + (-exitcode)
    if 0 < exitcode < 256:
        return exitcode
    return 1


def main(argv: list[str] | None = None) -> int:
    try:
        torchrun.main(argv)
    except ChildFailedError as error:
        # torchrun's own summary (each failed worker's rank, exit code or signal, pid).
        print(f"{type(error).__name__}: {error}", file=sys.stderr)
        _rank, failure = error.get_first_failure()
        return exit_code_of_failure(failure.exitcode)
    except SignalException as error:
        return 128 + int(error.sigval)
    except RendezvousConnectionError as error:
        print(f"gpuops_trainer.launch: the rendezvous store is gone: {error}", file=sys.stderr)
        return EXIT_PEER_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main())
