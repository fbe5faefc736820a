"""manage.py sagaboard_overview_rollup: check, rebuild or fold the overview's rollup."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.health.services import overview_rollup


class Command(BaseCommand):
    help = (
        "The overview's counts and throughput charts read a rollup (sagas per status, and "
        "sagas that came to rest per 5 minutes, per project) that database triggers keep "
        "on every write. --check compares it with a fresh count of the sagas and exits 1 "
        "on any difference; --rebuild recounts it from the sagas (writers of sagas wait "
        "meanwhile; safe while sagaboard runs); --fold folds PostgreSQL's pending changes "
        "now (the overview does it as it reads). Without an option: --check."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild", action="store_true", help="recount the rollup from the sagas"
        )
        parser.add_argument(
            "--check", action="store_true", help="compare the rollup with a fresh count"
        )
        parser.add_argument("--fold", action="store_true", help="fold pending changes (PostgreSQL)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["fold"]:
            written = overview_rollup.fold_changes(wait=True)
            self.stdout.write(f"folded pending changes into {written} rows")
        if options["rebuild"]:
            missing = overview_rollup.ensure_triggers()  # rebuilds too when one was missing
            written = overview_rollup.rebuild()
            put_back = f"; triggers put back: {', '.join(missing)}" if missing else ""
            self.stdout.write(f"rebuilt the overview rollup: {written} rows{put_back}")
        if options["check"] or not (options["rebuild"] or options["fold"]):
            self._check()

    def _check(self) -> None:
        missing = overview_rollup.missing_triggers()
        differences = overview_rollup.check()
        for difference in differences:
            self.stdout.write(str(difference))
        if missing:
            self.stdout.write(f"missing triggers: {', '.join(missing)} (run --rebuild)")
        summary = f"overview rollup: {len(differences)} difference(s) from a fresh count"
        if differences or missing:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)
