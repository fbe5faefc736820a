"""The overview's rollup (``models.overview``): counted afresh, rebuilt, checked, its triggers kept.

The triggers keep the rollup on every write (the model's doc says why triggers); this
module is for what they cannot do themselves:

* :func:`scan`: the counts as a scan of the sagas gives them, in the ORM, independently
  of the triggers' SQL: the truth the rollup must equal;
* :func:`rebuild`: replace the rollup by a scan (``manage.py sagaboard_overview_rollup
  --rebuild``), with the sagas' writers held off meanwhile, so no change falls between;
* :func:`check`: the rollup against a scan, in one snapshot (``--check``);
* :func:`ensure_triggers`: a SQLite migration that rebuilds ``sagaboard_saga`` (an
  ``AlterField``, some ``AddField``\\ s) drops its triggers with the old table; after every
  ``migrate`` they are put back, and the rollup rebuilt, if any is missing.
"""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction
from django.db.models import Count, Q
from django.db.models.functions import TruncMinute

from sagaboard.models import Saga, SagaCount, SagaCountChange
from sagaboard.models.overview import (
    CLEAN,
    EPOCH,
    FIVE_MINUTES,
    FOLD_LOCK,
    TOTALS,
    WAITING,
    WITH_EXCEPTIONS,
    fold_changes,
)
from undo_core import RollbackOutcome, SagaStatus

__all__ = [
    "TRIGGERS",
    "Difference",
    "after_migrate",
    "check",
    "ensure_triggers",
    "fold_changes",
    "missing_triggers",
    "rebuild",
    "scan",
    "series_key",
    "stored",
]

log = logging.getLogger(__name__)

Key = tuple[int, int, datetime, str]
"""(project pk, span, bucket start, key): one ``SagaCount`` row."""

RESTING = (
    SagaStatus.COMPLETED,
    SagaStatus.ROLLED_BACK,
    SagaStatus.FAILED,
    SagaStatus.ROLLBACK_FAILED,
)
TRIGGERS = {
    "sqlite": (
        "sagaboard_saga_count_insert",
        "sagaboard_saga_count_delete",
        "sagaboard_saga_count_update",
        "sagaboard_project_count_delete",
    ),
}
TRIGGERS["postgresql"] = TRIGGERS["sqlite"]
MIGRATION = "sagaboard.migrations.0020_overview_rollup"
"""The migration whose SQL the triggers are (re)installed from: a migration that changes
them names itself here."""


def scan() -> Counter[Key]:
    """Every rollup row's count, read from the sagas themselves (two grouped scans)."""
    counts: Counter[Key] = Counter()
    totals = Saga.objects.values("project_id", "status", "outcome").annotate(
        n=Count("pk"), waiting=Count("pk", filter=Q(waiting_for__isnull=False))
    )
    for row in totals.order_by():
        project, status, outcome = row["project_id"], row["status"], row["outcome"]
        counts[(project, TOTALS, EPOCH, status)] += row["n"]
        if outcome == RollbackOutcome.CLEAN:
            counts[(project, TOTALS, EPOCH, CLEAN)] += row["n"]
        if status == SagaStatus.ROLLED_BACK and outcome == RollbackOutcome.WITH_EXCEPTIONS:
            counts[(project, TOTALS, EPOCH, WITH_EXCEPTIONS)] += row["n"]
        counts[(project, TOTALS, EPOCH, WAITING)] += row["waiting"]
    resting = (
        Saga.objects.filter(status__in=RESTING)
        .annotate(minute=TruncMinute("changed_at", tzinfo=UTC))
        .values("project_id", "status", "outcome", "minute")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in resting:
        key = series_key(row["status"], row["outcome"])
        counts[(row["project_id"], FIVE_MINUTES, _five_minutes(row["minute"]), key)] += row["n"]
    return +counts  # without the zeros


def series_key(status: str, outcome: str | None) -> str:
    """The chart series a saga at rest counts in (``health.reads.overview.series``'s rule)."""
    if status == SagaStatus.ROLLED_BACK and outcome == RollbackOutcome.WITH_EXCEPTIONS:
        return WITH_EXCEPTIONS
    return status


def stored() -> Counter[Key]:
    """Every rollup row's count as stored: its ``SagaCount`` and its pending changes."""
    counts: Counter[Key] = Counter()
    for model in (SagaCount, SagaCountChange):
        rows = model.objects.values_list("project_id", "span", "bucket_start", "key", "n")
        for project, span, start, key, n in rows.iterator():
            counts[(project, span, start.astimezone(UTC), key)] += n
    return +counts


@dataclass(frozen=True)
class Difference:
    """One rollup row whose count is not what a scan of the sagas gives."""

    key: Key
    stored: int
    scanned: int

    def __str__(self) -> str:
        project, span, start, key = self.key
        where = "totals" if span == TOTALS else f"{start.isoformat()} ({span} s)"
        return f"project {project}: {key} in {where}: {self.stored} stored, {self.scanned} by scan"


def check() -> list[Difference]:
    """The rollup against a fresh scan, read in one snapshot (empty: they agree)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        have, want = stored(), scan()
    return [
        Difference(key, have.get(key, 0), want.get(key, 0))
        for key in sorted(have.keys() | want.keys())
        if have.get(key, 0) != want.get(key, 0)
    ]


def rebuild() -> int:
    """Replace the rollup by a scan of the sagas; returns the number of rows written.

    Writers of sagas wait meanwhile (a SHARE lock on PostgreSQL, which lets readers on and
    waits for the writers already under way; SQLite's write lock), so the scan and the
    rows written are one state. Safe while sagaboard runs.
    """
    with transaction.atomic():
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("LOCK TABLE sagaboard_saga IN SHARE MODE")
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [FOLD_LOCK])
        SagaCountChange.objects.all().delete()  # first: on SQLite it takes the write lock
        SagaCount.objects.all().delete()
        rows = [
            SagaCount(project_id=project, span=span, bucket_start=start, key=key, n=n)
            for (project, span, start, key), n in scan().items()
        ]
        SagaCount.objects.bulk_create(rows, batch_size=1000)
    return len(rows)


def missing_triggers() -> list[str]:
    """The rollup's triggers that the database does not have (none: all in place)."""
    names = TRIGGERS.get(connection.vendor, ())
    if not names:
        return []
    sql = {
        "sqlite": "SELECT name FROM sqlite_master WHERE type = 'trigger'",
        "postgresql": "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal",
    }[connection.vendor]
    with connection.cursor() as cursor:
        cursor.execute(sql)
        present = {name for (name,) in cursor.fetchall()}
    return [name for name in names if name not in present]


def after_migrate(using: str = "default", **kwargs: object) -> None:
    """``post_migrate``: the triggers back if a migration dropped them (once the rollup's
    tables exist: not when migrating back past them)."""
    if using != "default" or SagaCount._meta.db_table not in connection.introspection.table_names():
        return
    ensure_triggers()


def ensure_triggers() -> list[str]:
    """Put back any missing trigger and rebuild the rollup if one was; returns their names.

    Between the drop and now the rollup missed whatever changed, so it is recounted."""
    missing = missing_triggers()
    if not missing:
        return []
    migration = importlib.import_module(MIGRATION)
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in migration.INSTALL.get(connection.vendor, []):
            cursor.execute(sql)
    log.warning("overview rollup: triggers %s were missing; put back", ", ".join(missing))
    rebuild()
    return missing


def _five_minutes(moment: datetime) -> datetime:
    epoch = int(moment.timestamp())
    return datetime.fromtimestamp(epoch - epoch % FIVE_MINUTES, tz=UTC)
