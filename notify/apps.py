from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from notify import services
        from uploads import lifecycle

        # A job's owner hears of its ending (uploads announces it after commit).
        lifecycle.job_finished.connect(services.job_finished_receive, many=services.jobs_finished_receive)
        # ... and that a video can be watched before it has finished.
        lifecycle.job_playable.connect(services.job_playable_receive)
