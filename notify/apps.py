from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "notify"
    verbose_name = "notifications"
    default_auto_field = "django.db.models.BigAutoField"
