"""demo_setup: the demo user for `make run`, created once, and the URLs and
credentials a person needs to try the system."""
from __future__ import annotations

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token

DEMO_USERNAME = "demo"


class Command(BaseCommand):
    help = "Create the demo user if missing and print URLs and credentials."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--flower-auth", default="", help="user:password shown for Flower.")

    def handle(self, *args, flower_auth: str, **options) -> None:
        cred_file = settings.VAR_DIR / "demo-credentials"
        User = get_user_model()
        user = User.objects.filter(username=DEMO_USERNAME).first()
        if user is None or not cred_file.exists():
            password = secrets.token_urlsafe(9)
            user = user or User(username=DEMO_USERNAME, email="demo@example.com")
            user.is_staff = user.is_superuser = True
            user.set_password(password)
            user.save()
            cred_file.parent.mkdir(parents=True, exist_ok=True)
            cred_file.write_text(password)
            cred_file.chmod(0o600)
        password = cred_file.read_text().strip()
        token, _ = Token.objects.get_or_create(user=user)
        w = self.stdout.write
        w("")
        w("Fairlane is starting:")
        w("  upload page   http://127.0.0.1:8000/        (log in as below)")
        w("  admin         http://127.0.0.1:8000/admin/")
        w("  health        http://127.0.0.1:8000/healthz")
        w(f"  Flower        http://127.0.0.1:5555/        ({flower_auth or 'FLOWER_BASIC_AUTH'})")
        w(f"  demo user     {DEMO_USERNAME} / {password}")
        w(f"  API token     {token.key}")
        w(f"  try:  curl -H 'Authorization: Token {token.key}' -F file=@video.mp4 http://127.0.0.1:8000/api/uploads/")
        w("")
