"""storage_setup: what the store must allow before browsers upload into it
(the bucket's CORS rule for FAIRLANE_UPLOAD_CORS_ORIGINS: media/direct.py).
Run at every deploy, like migrate (make run runs it); idempotent."""
from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand

from media import direct


class Command(BaseCommand):
    help = "Let the site's pages upload into the bucket (CORS); idempotent."

    def handle(self, *args, **options) -> None:
        origins = settings.FAIRLANE_UPLOAD_CORS_ORIGINS
        if direct.configure_cors(origins):
            self.stdout.write(f"object storage: uploads allowed from {', '.join(origins)}")
