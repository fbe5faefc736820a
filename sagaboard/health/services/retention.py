"""Data retention: delete (optionally archive first) finished sagas older than an age.

**Which sagas go.** A saga is *finished* when its status is ``COMPLETED`` or
``ROLLED_BACK``: the engine accepts nothing more from it and nothing is left for a
person to do. ``ROLLED_BACK`` is only reached once every step is settled, so a
rolled-back saga whose steps include ``REJECTED`` (an approver refused the undo)
or ``RESOLVED`` (handled by hand) counts as finished: the saga is at rest, and
those decisions stay in the audit log. Never touched, however old:

- ``IN_PROGRESS`` and ``COMPENSATING`` (running, or its process died mid-way);
- ``ROLLBACK_FAILED``: unresolved, even when an operator chose "leave failed";
- ``FAILED``: the forward run failed and nobody has rolled it back yet;
- a finished saga that still has a ``PENDING`` approval, a step with an operator's
  ``pending_action``, or a live lease (a worker holds it). These should not exist
  for a finished saga; the guard covers the moment a race leaves one behind.

"Older than" reads ``Saga.changed_at``: when this server last stored a change to
the saga, by its own clock. Never the time the agent reported (``updated_at``): an
agent whose clock says 1970 must not get a saga it just posted deleted, and one
whose clock says 9999 must not keep its sagas for ever.

**How.** In batches (``batch`` sagas, oldest first, walking ``(changed_at, id)``
so a skipped saga is not picked again in the same run), each batch in its own
transaction: the candidates are read again inside the transaction under row
locks (``SELECT ... FOR UPDATE SKIP LOCKED`` on PostgreSQL; SQLite serialises
writers, sagaboard opens its transactions IMMEDIATE) with the same "finished
and old" condition, so a saga that changed (or is locked by a writer) since it
was picked is skipped and counted as such. A saga goes with its steps,
compensation attempts, approvals and their votes, event log rows and its
manual-flow API request records (``ApiRequest``). ``AuditEntry`` rows are kept:
they name their target by string (``saga:<id>/<step>``), and who did what must
outlive the saga. Event ids are never reused (the live feed's cursor only moves
forward), so deleting old events disturbs no reader.

**Archive.** With ``archive_dir``, each deleted saga is first written as one
JSON line (the saga, its steps each with its attempts, approvals each with its
votes, events, API requests: every column as stored, timestamps in ISO 8601) to
``sagaboard-retention-<UTC timestamp>.jsonl.gz``, one file per run. Each batch
is a complete gzip member, flushed to disk before its deletions commit, so a
run that dies half-way leaves a readable file holding at least every saga it
deleted (``gzip.open`` reads the members as one stream). If a commit fails after
its batch was written, those sagas are still in the database and will be
archived again by the next run: key archive lines on ``(project, saga.saga_id)``.

Each run that is not a dry run writes an ``AuditEntry`` (action ``retention.run``)
with the counts.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, models, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from sagaboard.models import (
    ApiRequest,
    Approval,
    ApprovalVote,
    AuditEntry,
    CompensationAttempt,
    Event,
    Saga,
    Step,
)
from undo_core import SagaStatus

__all__ = [
    "ARCHIVE_FORMAT",
    "FINISHED",
    "MAX_BATCH",
    "RetentionReport",
    "archive_read",
    "retention_run",
    "sagas_expired",
]

FINISHED = (SagaStatus.COMPLETED.value, SagaStatus.ROLLED_BACK.value)
"""Saga statuses that may be deleted once old; every other status is left alone."""

MAX_BATCH = 5000
"""Largest batch: keeps each transaction (and its ``IN (...)`` lists) short."""

ARCHIVE_FORMAT = "sagaboard.domain.retention/1"
EXAMPLES = 20


@dataclass
class RetentionReport:
    """What a run deleted (or, for a dry run, would delete)."""

    cutoff: datetime
    """Sagas last changed before this went."""
    dry_run: bool = False
    sagas: int = 0
    steps: int = 0
    attempts: int = 0
    approvals: int = 0
    votes: int = 0
    events: int = 0
    api_requests: int = 0
    skipped: int = 0
    """Picked, then found changed (or locked by another writer) inside the transaction."""
    batches: int = 0
    more: bool = False
    """Stopped by ``max_batches`` with old finished sagas still left."""
    archive_path: Path | None = None
    by_project: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    """The first few sagas (``project/saga_id``) in the order they went."""

    def counts(self) -> dict[str, Any]:
        """The numbers, JSON-ready (the audit entry's data)."""
        return {
            "cutoff": self.cutoff.isoformat(),
            "dry_run": self.dry_run,
            "sagas": self.sagas,
            "steps": self.steps,
            "attempts": self.attempts,
            "approvals": self.approvals,
            "votes": self.votes,
            "events": self.events,
            "api_requests": self.api_requests,
            "skipped": self.skipped,
            "batches": self.batches,
            "more": self.more,
            "archive": str(self.archive_path) if self.archive_path else None,
            "by_project": dict(self.by_project),
        }


def sagas_expired(now: datetime, older_than: timedelta) -> QuerySet[Saga]:
    """Finished sagas last changed more than ``older_than`` before ``now`` (see the module doc)."""
    return _expired(now - older_than, now)


def _expired(cutoff: datetime, now: datetime) -> QuerySet[Saga]:
    pending_approval = Approval.objects.filter(saga=OuterRef("pk"), status=Approval.Status.PENDING)
    pending_action = Step.objects.filter(saga=OuterRef("pk"), pending_action__isnull=False)
    return Saga.objects.filter(
        Q(lease_owner__isnull=True) | Q(lease_expires_at__lte=now),
        ~Exists(pending_approval),
        ~Exists(pending_action),
        status__in=FINISHED,
        changed_at__lt=cutoff,
    )


def retention_run(
    *,
    older_than: timedelta,
    batch: int = 500,
    archive_dir: Path | None = None,
    dry_run: bool = False,
    max_batches: int | None = None,
    actor: str = "system:retention",
    now: datetime | None = None,
) -> RetentionReport:
    """Delete finished sagas older than ``older_than``, ``batch`` at a time.

    ``dry_run`` counts what would go and changes nothing (no archive, no audit
    entry). ``max_batches`` stops early (``report.more`` says whether any were
    left). Raises ``ValueError`` for a non-positive age or batch, or an archive
    directory that cannot be used, before anything is deleted.
    """
    _arguments_check(older_than, batch, max_batches)
    now = now or timezone.now()
    report = RetentionReport(cutoff=now - older_than, dry_run=dry_run)
    by_project: Counter[str] = Counter()
    archive = None if dry_run or archive_dir is None else _archive_open(Path(archive_dir), now)
    if archive is not None:
        report.archive_path = Path(archive.name)
    try:
        cursor: tuple[datetime, int] | None = None
        while max_batches is None or report.batches < max_batches:
            picked = _candidates(report.cutoff, now, cursor, batch)
            if not picked:
                break
            cursor = picked[-1]
            _batch_run(report, by_project, [pk for _, pk in picked], now=now, archive=archive)
        else:
            report.more = bool(_candidates(report.cutoff, now, cursor, 1))
    except Exception as err:
        report.by_project = dict(by_project)
        if not dry_run and report.sagas:
            with contextlib.suppress(Exception):
                _audit(report, actor, error=f"{type(err).__name__}: {err}")
        raise
    finally:
        if archive is not None:
            archive.close()
    report.by_project = dict(sorted(by_project.items()))
    if not dry_run:
        _audit(report, actor)
    return report


# ``retention_run``'s parts: the checks made before anything is deleted, and one batch
# (re-checked, then counted or archived and deleted in its own transaction).


def _arguments_check(older_than: timedelta, batch: int, max_batches: int | None) -> None:
    """``ValueError`` for a non-positive age, a batch out of range, or ``max_batches`` < 1."""
    if older_than <= timedelta(0):
        raise ValueError("older_than must be a positive age")
    if not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"batch must be between 1 and {MAX_BATCH}")
    if max_batches is not None and max_batches < 1:
        raise ValueError("max_batches must be at least 1")


def _batch_run(
    report: RetentionReport,
    by_project: Counter[str],
    pks: list[int],
    *,
    now: datetime,
    archive: IO[bytes] | None,
) -> None:
    """One batch of ``pks`` (picked as expired): those still expired now are counted (a dry
    run) or archived and deleted, in one transaction; the rest are skipped."""
    report.batches += 1
    again = _expired(report.cutoff, now).filter(pk__in=pks)
    if report.dry_run:
        gone = _rows(again)
        _count(report, [row[0] for row in gone])
    else:
        with transaction.atomic():
            gone = _rows(_locked(again))
            if gone and archive is not None:
                _archive_write(archive, [row[0] for row in gone], now)
            if gone:
                _delete(report, gone)
    report.skipped += len(pks) - len(gone)
    for _, slug, saga_id in gone:
        by_project[slug] += 1
        if len(report.examples) < EXAMPLES:
            report.examples.append(f"{slug}/{saga_id}")


def _candidates(
    cutoff: datetime, now: datetime, after: tuple[datetime, int] | None, limit: int
) -> list[tuple[datetime, int]]:
    """The next ``limit`` old finished sagas after ``after``, oldest first: (changed_at, pk)."""
    qs = _expired(cutoff, now)
    if after is not None:
        at, pk = after
        qs = qs.filter(Q(changed_at__gt=at) | Q(changed_at=at, pk__gt=pk))
    return list(qs.order_by("changed_at", "pk").values_list("changed_at", "pk")[:limit])


def _locked(qs: QuerySet[Saga]) -> QuerySet[Saga]:
    """``qs`` under row locks, skipping rows another transaction holds (where supported)."""
    features = connection.features
    if not features.has_select_for_update:
        return qs  # SQLite: the IMMEDIATE transaction already excludes other writers
    options: dict[str, Any] = {}
    if features.has_select_for_update_skip_locked:
        options["skip_locked"] = True
    if features.has_select_for_update_of:
        options["of"] = ("self",)  # the saga rows only, not their projects
    return qs.select_for_update(**options)


def _rows(qs: QuerySet[Saga]) -> list[tuple[int, str, str]]:
    """(pk, project slug, saga_id) of each saga, oldest first."""
    return list(qs.order_by("changed_at", "pk").values_list("pk", "project__slug", "saga_id"))


def _count(report: RetentionReport, pks: list[int]) -> None:
    report.sagas += len(pks)
    report.steps += Step.objects.filter(saga_id__in=pks).count()
    report.attempts += CompensationAttempt.objects.filter(step__saga_id__in=pks).count()
    report.approvals += Approval.objects.filter(saga_id__in=pks).count()
    report.votes += ApprovalVote.objects.filter(approval__saga_id__in=pks).count()
    report.events += Event.objects.filter(saga_id__in=pks).count()
    report.api_requests += _api_requests(_keys(pks)).count()


def _keys(pks: Iterable[int]) -> dict[int, list[str]]:
    """saga_ids by project pk, for the rows that name a saga by its string id."""
    keys: dict[int, list[str]] = defaultdict(list)
    for project_id, saga_id in Saga.objects.filter(pk__in=list(pks)).values_list(
        "project_id", "saga_id"
    ):
        keys[project_id].append(saga_id)
    return keys


def _api_requests(keys: dict[int, list[str]]) -> QuerySet[ApiRequest]:
    match = Q(pk__in=[])
    for project_id, saga_ids in keys.items():
        match |= Q(project_id=project_id, saga_id__in=saga_ids)
    return ApiRequest.objects.filter(match)


def _delete(report: RetentionReport, gone: list[tuple[int, str, str]]) -> None:
    pks = [row[0] for row in gone]
    _, requests = _api_requests(_keys(pks)).delete()
    report.api_requests += requests.get(ApiRequest._meta.label, 0)
    _, deleted = Saga.objects.filter(pk__in=pks).delete()  # cascades to everything below
    report.sagas += deleted.get(Saga._meta.label, 0)
    report.steps += deleted.get(Step._meta.label, 0)
    report.attempts += deleted.get(CompensationAttempt._meta.label, 0)
    report.approvals += deleted.get(Approval._meta.label, 0)
    report.votes += deleted.get(ApprovalVote._meta.label, 0)
    report.events += deleted.get(Event._meta.label, 0)


def _audit(report: RetentionReport, actor: str, error: str | None = None) -> None:
    data = report.counts()
    if error is not None:
        data["error"] = error
    AuditEntry.objects.create(
        actor=actor,
        action="retention.run",
        target="retention",
        reason=f"finished sagas last changed before {report.cutoff.isoformat()}",
        data=data,
    )


# ------------------------------------------------------------------ archive


def _archive_open(directory: Path, now: datetime) -> IO[bytes]:
    """A new file for this run; refuses (``ValueError``) a directory it cannot write."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"archive directory {str(directory)!r}: {err.strerror or err}") from err
    stamp = now.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        suffix = "" if n == 1 else f"-{n}"
        path = directory / f"sagaboard-retention-{stamp}{suffix}.jsonl.gz"
        try:
            # Closed by retention_run when the run ends.
            return open(path, "xb")
        except FileExistsError:
            continue
        except OSError as err:
            raise ValueError(f"archive file {str(path)!r}: {err.strerror or err}") from err
    raise ValueError(f"archive directory {str(directory)!r}: too many files for {stamp}")


def _archive_write(out: IO[bytes], pks: list[int], now: datetime) -> None:
    """One complete gzip member with a JSON line per saga, on disk before the delete commits."""
    lines = _archive_lines(pks, now)
    start = out.tell()
    try:
        with gzip.GzipFile(fileobj=out, mode="wb", mtime=int(now.timestamp())) as member:
            for line in lines:
                member.write(line.encode() + b"\n")
        out.flush()
        os.fsync(out.fileno())
    except BaseException:
        # Nothing of this batch is deleted: drop its half-written member, keep the file readable.
        with contextlib.suppress(OSError):
            out.truncate(start)
        raise


def _row(obj: models.Model) -> dict[str, Any]:
    return {f.attname: f.value_from_object(obj) for f in obj._meta.concrete_fields}


def _archive_lines(pks: list[int], now: datetime) -> list[str]:
    sagas = Saga.objects.filter(pk__in=pks).select_related("project").order_by("changed_at", "pk")
    steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    attempts: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for attempt in CompensationAttempt.objects.filter(step__saga_id__in=pks).order_by("pk"):
        attempts[attempt.step_id].append(_row(attempt))
    for step in Step.objects.filter(saga_id__in=pks).order_by("saga_id", "position", "pk"):
        steps[step.saga_id].append({**_row(step), "attempts": attempts.pop(step.pk, [])})
    votes: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for vote in (
        ApprovalVote.objects.filter(approval__saga_id__in=pks).select_related("user").order_by("pk")
    ):
        votes[vote.approval_id].append({**_row(vote), "username": vote.user.get_username()})
    approvals: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for approval in Approval.objects.filter(saga_id__in=pks).order_by("pk"):
        approvals[approval.saga_id].append({**_row(approval), "votes": votes.pop(approval.pk, [])})
    events: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for event in Event.objects.filter(saga_id__in=pks).order_by("pk"):
        events[event.saga_id].append(_row(event))
    requests: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for request in _api_requests(_keys(pks)).order_by("pk"):
        requests[(request.project_id, request.saga_id)].append(_row(request))
    return [
        json.dumps(
            {
                "format": ARCHIVE_FORMAT,
                "archived_at": now,
                "project": saga.project.slug,
                "saga": _row(saga),
                "steps": steps.get(saga.pk, []),
                "approvals": approvals.get(saga.pk, []),
                "events": events.get(saga.pk, []),
                "api_requests": requests.get((saga.project_id, saga.saga_id), []),
            },
            cls=DjangoJSONEncoder,
            ensure_ascii=False,
        )
        for saga in sagas
    ]


def archive_read(path: Path) -> list[dict[str, Any]]:
    """Every saga in an archive file, in the order archived (for restores and checks)."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]
