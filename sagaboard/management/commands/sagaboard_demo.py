"""manage.py sagaboard_demo: demo sagas (and a demo login) for a local dashboard."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.demo.flows import DEMO_COMPENSATIONS, demo_load, demo_user
from sagaboard.domain.tool_rollup import rollup_fold


class Command(BaseCommand):
    help = (
        "Load the demo project: StoreBot and checkout sagas run through the engine "
        "(rolled back, completed, ROLLBACK_FAILED, rejected undo, in progress), and a "
        "'demo'/'demo' login. Safe to run twice. Refused when DEBUG is off unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-user", action="store_true", help="do not create the login")
        parser.add_argument(
            "--force", action="store_true", help="load even when SAGABOARD_DEBUG is off"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG and not options["force"]:
            raise CommandError("demo data is for local use: DEBUG is off (use --force)")
        if DEMO_COMPENSATIONS not in settings.SAGABOARD_COMPENSATION_MODULES:
            # Its server-run sagas have handler undos: without them, they could never undo.
            raise CommandError(
                f"the demo's undos are not registered: add {DEMO_COMPENSATIONS} to "
                "SAGABOARD_COMPENSATION_MODULES (for this command and the worker)"
            )
        project = demo_load()
        count = project.sagas.count()
        rollup_fold()  # the Tools pages show the demo at once, not after the first beat
        self.stdout.write(f"demo project {project.slug!r}: {count} sagas")
        if not options["no_user"]:
            user, created = demo_user()
            if created:
                self.stdout.write(f"demo login: {user.get_username()} / demo")
