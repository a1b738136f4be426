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
        parser.add_argument("--web", default="127.0.0.1:8000", help="host:port the web process listens on.")
        parser.add_argument("--flower", default="127.0.0.1:5555", help="host:port Flower listens on.")

    def handle(self, *args, flower_auth: str, web: str, flower: str, **options) -> None:
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
        site, flower_site = _url(web), _url(flower)
        w = self.stdout.write
        w("")
        w("Fairlane is starting:")
        w(f"  upload page   {site}/        (log in as below)")
        w(f"  admin         {site}/admin/")
        w(f"  health        {site}/healthz")
        w(f"  Flower        {flower_site}/        ({flower_auth or 'FLOWER_BASIC_AUTH'})")
        w(f"  demo user     {DEMO_USERNAME} / {password}")
        w(f"  API token     {token.key}")
        w(f"  try:  curl -H 'Authorization: Token {token.key}' -F file=@video.mp4 {site}/api/uploads/")
        w("")


def _url(bind: str) -> str:
    """A listening address as a browser on this machine opens it (all
    interfaces: by loopback)."""
    host, _, port = bind.rpartition(":")
    return f"http://{'127.0.0.1' if host in ('', '0.0.0.0', '[::]') else host}:{port}"
