from django.apps import AppConfig


class TranscodingConfig(AppConfig):
    name = "transcoding"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.conf import settings
        from PIL import Image

        # Pillow raises DecompressionBombError above twice this: our limit, not its default.
        Image.MAX_IMAGE_PIXELS = settings.FAIRLANE_MAX_PIXELS // 2
