"""manage.py sagaboard_rollup: fold changed sagas into the per-tool health rollups now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.health.services.tool_rollup import CHUNK, rollup_fold


class Command(BaseCommand):
    help = (
        "Fold the sagas changed since the last fold (by the server's clock) into the per-tool "
        "health rollups that /tools/ reads: runs, failures, undo attempts and their duration "
        "histograms per tool and time bucket. The Celery beat task does the same every "
        "SAGABOARD_ROLLUP_SECONDS; this runs it now. Idempotent: a saga folded again is "
        "counted once, as it is now. Safe to run while sagaboard is running, and to repeat."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rebuild",
            action="store_true",
            help="walk every stored saga, not only those changed since the last fold "
            "(sagas unchanged since they were folded are still skipped)",
        )
        parser.add_argument(
            "--chunk",
            metavar="N",
            type=int,
            default=CHUNK,
            help="sagas per transaction (default %(default)s)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["chunk"] < 1:
            raise CommandError(f"--chunk {options['chunk']}: give 1 or more")
        report = rollup_fold(chunk=options["chunk"], rebuild=options["rebuild"])
        self.stdout.write(
            f"folded {report.sagas_folded} of {report.sagas_seen} changed sagas "
            f"({report.steps} steps, {report.attempts} undo attempts) into {report.buckets} "
            f"rollup rows; pruned {report.pruned} old rows; watermark "
            f"{report.watermark.isoformat() if report.watermark else '-'}; "
            f"{report.seconds:.2f} s"
        )
