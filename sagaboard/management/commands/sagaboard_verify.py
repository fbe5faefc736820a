"""manage.py sagaboard_verify: replay sagas' event logs and report where the record differs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.audit.services.audit_chain import verify_audit
from sagaboard.health.services import overview_rollup
from sagaboard.record.services.verify import verify


class Command(BaseCommand):
    help = (
        "Replay each saga's event log through undo_core's rules and compare the result with "
        "the stored saga and steps, field by field. Prints one line per difference (project/"
        "saga, step, field, stored vs replayed) and exits with status 1 if there is any, 0 "
        "if every saga in range replays to exactly what is stored. Read-only; safe to run "
        "while sagaboard is running. Operators' events, leases and sagaboard's own columns "
        "(server times, pending actions) are not part of the replayed record. Without "
        "--project and --saga it also compares the overview's rollup with a fresh count "
        "of the sagas (sagaboard_overview_rollup --check). With --audit, check the audit "
        "log instead: recompute each project's hash chain from its first entry, print each "
        "chain's length and head hash (keep them elsewhere to compare), name the first "
        "entry altered or missing, and exit 1 if any chain is broken."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", metavar="SLUG", help="only this project's sagas")
        parser.add_argument("--saga", metavar="ID", help="only the saga with this id")
        parser.add_argument(
            "--audit",
            action="store_true",
            help="verify the audit log's hash chains (tamper evidence) instead of the sagas",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["audit"]:
            self._audit(options["project"])
            return
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
            for drift in rollup:
                self.stdout.write(f"overview rollup: {drift}")
            summary += f"; overview rollup: {len(rollup)} difference(s) from a fresh count"
        if not report.ok or rollup:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)

    def _audit(self, project: str | None) -> None:
        try:
            report = verify_audit(project=project)
        except LookupError as err:
            raise CommandError(str(err)) from err
        for chain in report.chains:
            state = "BROKEN" if chain.broken else "ok"
            self.stdout.write(
                f"audit chain {chain.name}: {_entries(chain.entries)} verified, "
                f"head {chain.head} [{state}]"
            )
        for broken in report.breaks:
            self.stdout.write(str(broken))
        summary = (
            f"{len(report.chains)} audit chain(s), {_entries(report.entries)} verified: "
            f"{len(report.breaks)} break(s)"
        )
        if not report.ok:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)


def _entries(n: int) -> str:
    return f"{n} entr{'y' if n == 1 else 'ies'}"
