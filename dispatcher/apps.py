from django.apps import AppConfig


class DispatcherConfig(AppConfig):
    """The dispatcher as a Django app: its staff page's template, and its
    worker signals connected when Django is set up (in a Celery worker, by
    Celery's Django fix-up, before the worker starts consuming)."""

    name = "dispatcher"
    verbose_name = "Fair dispatch"

    def ready(self) -> None:
        from dispatcher import worker  # noqa: F401 (connects the signals, registers project.fair_reconcile)
