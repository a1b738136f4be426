from django.apps import AppConfig


class UploadsConfig(AppConfig):
    name = "uploads"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from uploads import lifecycle, rates

        # Every finished job is measured for the batch estimates, in the
        # process that ended it (uploads/rates.py).
        lifecycle.job_finished.connect(rates.job_measured, many=rates.jobs_measured)
