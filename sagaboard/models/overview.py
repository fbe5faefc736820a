"""The overview's numbers, rolled up: sagas per status now, and sagas that came to rest per
5 minutes, per project. The overview reads these rows, never a scan of the sagas.

**What a row counts.** Every saga counts once under its status in the project's totals
(``span`` 0, ``bucket_start`` the Unix epoch), and also under ``CLEAN`` when its rollback
outcome is clean, ``ROLLED_BACK_WITH_EXCEPTIONS`` when it rolled back with exceptions and
``WAITING`` while its rollback waits for a person: the overview's chips, each exactly what a
count of the sagas would give. A saga at rest (completed, rolled back, failed, rollback
failed) also counts under its chart series (``health.reads.overview.series``) in the 5-minute
bucket of its ``changed_at`` (``span`` 300): the throughput charts sum those buckets (12 for
the last hour, 288 for the day).

**Who keeps them: database triggers on ``sagaboard_saga``** (migration 0020), not Python.
Sagas are written by API ingestion (one event, and batches through ``ingest_bulk``'s
multi-row INSERTs), DjangoStore (workers, the engine, the manual-flow API), queryset
``update()`` calls and retention's bulk deletes; a model hook (``save()`` or signals) would
miss the bulk paths, and a call in each writer would be one more thing every new writer
must remember. A trigger sees every row change in the writer's own transaction, so the
counts commit (or roll back) with the change they count. The triggers fire only when a
saga's contribution can change (status, outcome, waiting, or a resting saga's
``changed_at``): the many events of a running saga cost them nothing.

**SQLite** serialises writers, so its triggers add to the rows directly (``INSERT ... ON
CONFLICT DO UPDATE SET n = n + excluded.n``). **PostgreSQL** runs writers side by side: an
upsert on a shared counter row would hold that row's lock until the writer commits (every
writer of a project would queue behind it) and two writers taking the same two rows in
opposite orders (one saga going ROLLBACK_FAILED -> COMPENSATING, another the other way)
would deadlock. So its triggers only append :class:`SagaCountChange` rows, which no two
writers share; the overview adds the pending changes to the counts in the same statement
(exact), and folds them into :class:`SagaCount` now and then, one folder at a time
(``fold_changes`` below). Bulk inserts and deletes are counted once per
statement there (statement-level triggers with transition tables).

``manage.py sagaboard_overview_rollup --rebuild`` recounts every row from the sagas;
``--check`` compares them with a fresh count.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import connection, models, transaction

from sagaboard.models.projects import Project

TOTALS = 0
"""``span`` of the totals: sagas per status now, whenever they last changed."""
FIVE_MINUTES = 300
"""``span`` of the throughput buckets, in seconds."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""``bucket_start`` of the totals."""
CLEAN = "CLEAN"
WITH_EXCEPTIONS = "ROLLED_BACK_WITH_EXCEPTIONS"
WAITING = "WAITING"


class SagaCount(models.Model):
    """How many of a project's sagas count under ``key`` in one bucket (see the module doc).

    ``n`` is exact, never an estimate; it may be 0 once the sagas it counted moved on.
    """

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    """No constraint in the database: the project's deletion removes its rows by trigger, and
    a fold never waits for a project row's lock (``fold_changes``)."""
    span = models.PositiveIntegerField()
    """``TOTALS`` (0) or the bucket's length in seconds (``FIVE_MINUTES``)."""
    bucket_start = models.DateTimeField()
    """The bucket's start (``changed_at`` floored to ``span``); ``EPOCH`` for the totals."""
    key = models.CharField(max_length=40)
    """A saga status, ``CLEAN``, ``ROLLED_BACK_WITH_EXCEPTIONS`` or ``WAITING``."""
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "span", "bucket_start", "key"], name="saga_count_unique"
            )
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.bucket_start} ({self.span} s): {self.n}"


class SagaCountChange(models.Model):
    """A change to a :class:`SagaCount` not folded in yet (PostgreSQL only, see the module doc).

    Appended by the triggers, never updated: writers share no row. The count of a key is
    its ``SagaCount.n`` plus the ``n`` of its pending changes.
    """

    project_id = models.BigIntegerField()
    """The project (no foreign key: a project's deletion removes its rows by trigger)."""
    span = models.PositiveIntegerField()
    bucket_start = models.DateTimeField()
    key = models.CharField(max_length=40)
    n = models.BigIntegerField()


FOLD_LOCK = 0x5A6A_C0DE
"""The advisory lock a fold holds (PostgreSQL): one folder at a time, the others skip."""

_FOLD = """WITH moved AS (
        DELETE FROM sagaboard_sagacountchange RETURNING project_id, span, bucket_start, "key", n)
    INSERT INTO sagaboard_sagacount (project_id, span, bucket_start, "key", n)
    SELECT m.project_id, m.span, m.bucket_start, m."key", sum(m.n) FROM moved m
    WHERE EXISTS (SELECT 1 FROM sagaboard_project p WHERE p.id = m.project_id)
    GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
    ON CONFLICT (project_id, span, bucket_start, "key")
    DO UPDATE SET n = sagaboard_sagacount.n + excluded.n"""


def fold_changes(*, wait: bool = False) -> int:
    """Fold the pending :class:`SagaCountChange` rows into :class:`SagaCount` (PostgreSQL;
    nothing to do on SQLite). Returns the number of count rows written.

    One statement moves every committed change (deleted and added in one transaction, so
    each is counted once: a second folder's DELETE skips the rows the first took). Only
    folders write ``SagaCount`` rows and they take turns (``FOLD_LOCK``); a folder that
    finds the lock taken returns at once unless ``wait``. Writers never wait for a fold.
    """
    if connection.vendor != "postgresql":
        return 0
    # No savepoint inside a caller's transaction: the lock is the transaction's anyway.
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        lock = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
        cursor.execute(f"SELECT {lock}(%s)", [FOLD_LOCK])
        if not wait and not cursor.fetchone()[0]:
            return 0
        cursor.execute(_FOLD)
        return max(cursor.rowcount, 0)
