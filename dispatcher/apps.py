from django.apps import AppConfig


class DispatcherConfig(AppConfig):
    """The dispatcher as a Django app: its staff page's template, and its
    worker signals connected when Django is set up (in a Celery worker, by
    Celery's Django fix-up, before the worker starts consuming)."""

    name = "dispatcher"
    verbose_name = "Fair dispatch"

    def ready(self) -> None:
        from django.contrib import admin

        from dispatcher import worker  # noqa: F401 (connects the signals, registers project.fair_reconcile)

        # The admin's index links the staff page (it is no model, so the app
        # list would not show it).
        admin.site.index_template = "dispatcher/admin_index.html"
