"""create_api_user USERNAME [--staff] [--password PW] [--email E]: create or
reuse a user and print its API token as the last line of stdout (scripts
read it with `tail -n 1`)."""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from rest_framework.authtoken.models import Token


class Command(BaseCommand):
    help = "Create (or reuse) a user and print its API token as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--staff", action="store_true", help="Make the user staff and superuser.")
        parser.add_argument("--password", help="Set this password (otherwise unchanged, or unusable if new).")
        parser.add_argument("--email", help="Email for notifications (default USERNAME@example.com).")

    def handle(self, *args, username: str, staff: bool, password: str | None, email: str | None, **options) -> None:
        user, created = get_user_model().objects.get_or_create(
            username=username, defaults={"email": email or f"{username}@example.com"}
        )
        if email:
            user.email = email
        if staff:
            user.is_staff = user.is_superuser = True
        if password:
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        token, _ = Token.objects.get_or_create(user=user)
        self.stdout.write(f"{'created' if created else 'reused'} user {username}")
        self.stdout.write(token.key)
