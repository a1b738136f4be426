"""run_setup: everything `make run` does before its processes start, in one
process: migrate, storage_setup, collectstatic, then demo_setup's user and
the lines a person needs. Four commands in four processes each paid
Django's start (~1.5 s) again, and a restart waited for all four before
its processes began (bin/run)."""
from __future__ import annotations

from django.core.management import call_command

from uploads.management.commands import demo_setup


class Command(demo_setup.Command):
    help = "Migrate, set up the store and static files, create the demo user; what make run does first."

    def handle(self, *args, **options) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        call_command("storage_setup", stdout=self.stdout)
        call_command("collectstatic", interactive=False, verbosity=0)
        super().handle(*args, **options)
