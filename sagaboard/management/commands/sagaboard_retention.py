"""manage.py sagaboard_retention: delete (or archive, then delete) old finished sagas."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from sagaboard.health.services.retention import MAX_BATCH, RetentionReport, retention_run

AGE = re.compile(r"^\s*(\d+)\s*(d|days?|h|hours?)?\s*$", re.IGNORECASE)


def parse_age(text: str) -> timedelta:
    """``90d``, ``90 days``, ``90`` (days) or ``12h`` -> a positive timedelta; ValueError if not."""
    match = AGE.match(text)
    if match is None:
        raise ValueError(
            f"--older-than {text!r}: give a number of days or hours, e.g. 90d, 90, 12h"
        )
    number, unit = int(match.group(1)), (match.group(2) or "d")[0].lower()
    if number <= 0:
        raise ValueError(f"--older-than {text!r}: the age must be more than 0")
    try:
        return timedelta(hours=number) if unit == "h" else timedelta(days=number)
    except OverflowError as err:
        raise ValueError(f"--older-than {text!r}: too large") from err


class Command(BaseCommand):
    help = (
        "Delete finished sagas (COMPLETED or ROLLED_BACK) last changed longer ago than an age, "
        "with their steps, attempts, approvals and events; optionally archive each one first "
        "as a JSON line in a gzip file. Unresolved sagas (IN_PROGRESS, COMPENSATING, FAILED, "
        "ROLLBACK_FAILED, or anything waiting for an approval or an operator's action) are "
        "never touched, however old. The audit log is kept. Works in batches, each its own "
        "transaction; safe to run while sagaboard is running, and to repeat."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="AGE",
            help="delete sagas last changed longer ago than this: 90d, 90 (days) or 12h "
            f"(default: SAGABOARD_RETENTION_DAYS, now {settings.SAGABOARD_RETENTION_DAYS} days)",
        )
        parser.add_argument(
            "--archive-dir",
            metavar="DIR",
            help="first write the deleted sagas to DIR/sagaboard-retention-<time>.jsonl.gz "
            "(one JSON line per saga; DIR is created if missing)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="count what would be deleted, per project; delete and write nothing",
        )
        parser.add_argument(
            "--batch",
            metavar="N",
            type=int,
            default=500,
            help=f"sagas per transaction (1-{MAX_BATCH}, default %(default)s)",
        )
        parser.add_argument(
            "--max-batches",
            metavar="N",
            type=int,
            default=None,
            help="stop after N batches (default: until none are left)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        older_than = self._age(options["older_than"])
        if not 1 <= options["batch"] <= MAX_BATCH:
            raise CommandError(f"--batch {options['batch']}: give 1 to {MAX_BATCH}")
        if options["max_batches"] is not None and options["max_batches"] < 1:
            raise CommandError(f"--max-batches {options['max_batches']}: give 1 or more")
        archive_dir = Path(options["archive_dir"]) if options["archive_dir"] else None
        if archive_dir is not None and archive_dir.exists() and not archive_dir.is_dir():
            raise CommandError(f"--archive-dir {str(archive_dir)!r} is not a directory")
        try:
            report = retention_run(
                older_than=older_than,
                batch=options["batch"],
                archive_dir=archive_dir,
                dry_run=options["dry_run"],
                max_batches=options["max_batches"],
                actor="cli",
            )
        except ValueError as err:  # an archive directory that cannot be written
            raise CommandError(str(err)) from err
        self._print(report, older_than)

    def _age(self, text: str | None) -> timedelta:
        if text is None:
            days = settings.SAGABOARD_RETENTION_DAYS
            if days <= 0:
                raise CommandError(
                    "retention is off (SAGABOARD_RETENTION_DAYS=0): give --older-than, e.g. 90d"
                )
            return timedelta(days=days)
        try:
            return parse_age(text)
        except ValueError as err:
            raise CommandError(str(err)) from err

    def _print(self, report: RetentionReport, older_than: timedelta) -> None:
        out = self.stdout.write
        verb = "would delete" if report.dry_run else "deleted"
        out(
            f"finished sagas last changed before {report.cutoff:%Y-%m-%d %H:%M} UTC "
            f"(older than {_age_text(older_than)})"
        )
        out(
            f"{verb} {report.sagas} saga(s): {report.steps} step(s), {report.attempts} "
            f"attempt(s), {report.approvals} approval(s) with {report.votes} vote(s), "
            f"{report.events} event(s), {report.api_requests} API request record(s)"
        )
        for slug, count in report.by_project.items():
            out(f"  {slug}\t{count}")
        if report.dry_run and report.examples:
            shown = ", ".join(report.examples)
            more = " ..." if report.sagas > len(report.examples) else ""
            out(f"for example: {shown}{more}")
        if report.skipped:
            out(f"skipped {report.skipped} that changed (or were busy) meanwhile")
        if report.archive_path is not None:
            out(f"archive: {report.archive_path}")
        if report.more:
            out("stopped at --max-batches: more are left (run again)")
        if report.dry_run:
            out("dry run: nothing was deleted")
        else:
            self.stdout.write(self.style.SUCCESS(f"done in {report.batches} batch(es)"))


def _age_text(age: timedelta) -> str:
    if age % timedelta(days=1) == timedelta(0):
        return f"{age.days} day(s)"
    return f"{int(age.total_seconds() // 3600)} hour(s)"
