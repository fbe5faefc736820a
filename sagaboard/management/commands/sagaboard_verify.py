"""manage.py sagaboard_verify: replay sagas' event logs and report where the record differs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.domain import overview_rollup
from sagaboard.domain.verify import verify


class Command(BaseCommand):
    help = (
        "Replay each saga's event log through undo_core's rules and compare the result with "
        "the stored saga and steps, field by field. Prints one line per difference (project/"
        "saga, step, field, stored vs replayed) and exits with status 1 if there is any, 0 "
        "if every saga in range replays to exactly what is stored. Read-only; safe to run "
        "while sagaboard is running. Operators' events, leases and sagaboard's own columns "
        "(server times, pending actions) are not part of the replayed record. Without "
        "--project and --saga it also compares the overview's rollup with a fresh count "
        "of the sagas (sagaboard_overview_rollup --check)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", metavar="SLUG", help="only this project's sagas")
        parser.add_argument("--saga", metavar="ID", help="only the saga with this id")

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify(project=options["project"], saga_id=options["saga"])
        for difference in report.differences:
            self.stdout.write(str(difference))
        summary = (
            f"{report.sagas} saga(s), {report.events} event(s) replayed: "
            f"{len(report.differences)} difference(s)"
        )
        rollup: list[overview_rollup.Difference] = []
        if not (options["project"] or options["saga"]):
            rollup = overview_rollup.check()
            for difference in rollup:
                self.stdout.write(f"overview rollup: {difference}")
            summary += f"; overview rollup: {len(rollup)} difference(s) from a fresh count"
        if not report.ok or rollup:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)
