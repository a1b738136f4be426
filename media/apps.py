from __future__ import annotations

from django.apps import AppConfig


def _reset_clients_in_child(**_kwargs) -> None:
    from media.store import reset_clients

    reset_clients()


def _sweep_scratch(**_kwargs) -> None:
    from media.scratch import scratch_sweep

    scratch_sweep()


class MediaConfig(AppConfig):
    name = "media"
    verbose_name = "Media storage"

    def ready(self) -> None:
        from celery.signals import worker_init, worker_process_init

        # boto3 clients hold sockets and locks: a prefork child must never
        # use its parent's. Each child builds its own on first use.
        worker_process_init.connect(_reset_clients_in_child, weak=False, dispatch_uid="media.reset_clients")
        # A worker killed with SIGKILL left its attempts' scratch folders:
        # they are removed when a worker starts on this host again.
        worker_init.connect(_sweep_scratch, weak=False, dispatch_uid="media.scratch_sweep")
