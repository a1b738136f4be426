"""`make run`'s process manager: honcho over the Procfile, stopping the way
the workers need to be stopped.

honcho, asked to stop (Ctrl-C, SIGTERM) or when one process exits, sends
SIGTERM to each process's whole process group and SIGKILLs whatever is left
KILL_WAIT (5 s) after the first one exits. Both lose work: a prefork
worker's pool children reset SIGTERM to its default, so a group-wide SIGTERM
kills every running transcode at once (a crash, counted against the job's
attempts), and 5 s is shorter than the grace period in which a worker
finishes or hands back its running jobs (FAIRLANE_SHUTDOWN_GRACE_S) before
it exits. So here the polite stop goes to each process only (the Procfile
`exec`s every command, so that process is the program itself, not a shell),
as systemd, Kubernetes and supervisord signal a worker, and the forced one
waits for the grace period plus a margin for the worker's own shutdown.

    python -m project.procfile      # what bin/run starts: honcho start
"""
from __future__ import annotations

import errno
import os
import signal

from honcho import compat, manager
from honcho.command import main

# After the grace period a worker hands its running jobs back and Celery
# shuts down its pool; 20 s covers that on a loaded machine.
STOP_MARGIN_S = 20.0


def _terminate_process(self, pid: int) -> None:
    """SIGTERM to the process, not its group: its children are its own to stop."""
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ESRCH):
            raise


def run() -> None:
    from project.settings import FAIRLANE_SHUTDOWN_GRACE_S as grace_s  # the one place that reads it

    manager.KILL_WAIT = grace_s + STOP_MARGIN_S
    compat.ProcessManager.terminate = _terminate_process
    main(["start"])


if __name__ == "__main__":
    run()
