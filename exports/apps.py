from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "exports"
    verbose_name = "Exports"

    def ready(self) -> None:
        from exports import services
        from uploads import lifecycle

        # A retried export starts from a new manifest: its old upload goes.
        lifecycle.job_restarted.connect(services.export_restarted_receive)
