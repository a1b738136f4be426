"""sweep_resumable [--every S]: remove this web host's abandoned resumable
uploads (uploads/resumable_sweep.py) once, or every S seconds until stopped
(the Procfile's `resumable-sweeper`, one per web host)."""
from __future__ import annotations

import logging
import signal
import threading

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from uploads.resumable_sweep import sweep_expired

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Remove this host's expired resumable uploads and orphaned chunk files."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--every", type=float, default=0.0,
                            help="Sweep every this many seconds until SIGTERM/SIGINT (0: once).")

    def handle(self, *args, every: float, **options) -> None:
        if every <= 0:
            swept = sweep_expired()
            self.stdout.write(f"{swept.uploads} expired uploads and {swept.orphans} orphaned files removed")
            return
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.is_set():
            try:
                sweep_expired()
            except Exception:  # the database or the disk failed this round: the next one retries
                log.exception("resumable sweep failed")
            finally:
                close_old_connections()
            stop.wait(every)
