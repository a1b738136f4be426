from django.apps import AppConfig


class OrganisationsConfig(AppConfig):
    name = "organisations"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from django.db.models.signals import post_save

        from organisations import services

        # Every user belongs to exactly one organisation, however the user
        # was made (the admin, create_api_user, createsuperuser, a test): a
        # new one gets an organisation of one (services.organisation_of_one_ensure).
        post_save.connect(services.user_created, sender=settings.AUTH_USER_MODEL,
                          dispatch_uid="organisations.user_created")
