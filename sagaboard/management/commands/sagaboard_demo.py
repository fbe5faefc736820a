"""manage.py sagaboard_demo: demo sagas (and demo logins) for a local dashboard."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.demo.flows import (
    DEMO_COMPENSATIONS,
    STOREBOT_TOKEN,
    demo_load,
    demo_people,
    demo_user,
)
from sagaboard.health.services.tool_rollup import rollup_fold
from sagaboard.models import Approval


class Command(BaseCommand):
    help = (
        "Load the demo project: StoreBot and checkout sagas run through the engine "
        "(rolled back, completed, ROLLBACK_FAILED, rejected undo, in progress, undos waiting "
        "for approval, one under a two-approver policy), a 'demo'/'demo' superuser and a "
        "login for each role (printed). Safe to run twice. Refused when DEBUG is off "
        "unless --force."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--no-user", action="store_true", help="do not create the logins")
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
        demo = None if options["no_user"] else demo_user()[0]
        # demo makes StoreBot's token: the undos of the sagas posted with it are not its to
        # decide (four eyes), so the approvers below must.
        project = demo_load(token_maker=demo)
        count = project.sagas.count()
        rollup_fold()  # the Tools pages show the demo at once, not after the first beat
        waiting = Approval.objects.filter(project=project, status=Approval.Status.PENDING).count()
        self.stdout.write(
            f"demo project {project.slug!r}: {count} sagas, {waiting} undos awaiting approval"
        )
        if demo is None:
            return
        self.stdout.write("demo logins (user / password: what to try):")
        self.stdout.write(
            f"  demo / demo        superuser: everything; it made the {STOREBOT_TOKEN!r} token, "
            "so it is refused on the undos of the sagas that token posted"
        )
        for person, _ in demo_people():
            login = f"{person.username} / {person.password}"
            self.stdout.write(f"  {login:<18} {person.role}: {person.tries}")
