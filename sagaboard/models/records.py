"""What the system keeps about itself: the operators' audit trail, the notification
outbox, and the workers' heartbeats."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from sagaboard.infra.hash_chain import GENESIS, canonical_time, link_hash
from sagaboard.models.fields import JSONTextField
from sagaboard.models.projects import Project


class AuditChain(models.Model):
    """The head of one project's audit chain: its last sequence number and hash.

    Appending locks this row (``SELECT ... FOR UPDATE``), so the entries of one chain
    are numbered and linked one after the other even from concurrent processes; the
    head also tells the verifier how long the chain must be, so deleting its newest
    entries is caught as well as altering any entry. ``key`` is the project's id when
    the entry was written (0 for entries of no project), kept even if the project is
    deleted later.
    """

    key = models.BigIntegerField(primary_key=True)
    seq = models.BigIntegerField(default=0)
    head = models.CharField(max_length=64, default=GENESIS)

    def __str__(self) -> str:
        return f"audit chain {self.key} at {self.seq}"


class AuditEntryQuerySet(models.QuerySet["AuditEntry"]):
    def bulk_create(  # type: ignore[override]
        self, objs: Iterable[AuditEntry], *args: Any, **kwargs: Any
    ) -> list[AuditEntry]:
        entries = list(objs)
        with transaction.atomic(using=self.db, savepoint=False):
            _link(entries, self.db)
            return super().bulk_create(entries, *args, **kwargs)


class AuditEntry(models.Model):
    """A human (or token) action: who, when, what, why. Never updated.

    Tamper-evident: each entry is numbered within its project's chain and carries
    ``hash``, the SHA-256 of its content and of the previous entry's hash
    (``prev_hash``); ``manage.py sagaboard_verify --audit`` recomputes the chains and
    names the first entry altered or missing. Every way of writing an entry
    (``save``, ``objects.create``, ``objects.bulk_create``) links it, in the writer's
    transaction: an entry rolled back leaves no gap.
    """

    project = models.ForeignKey(
        Project, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target = models.CharField(max_length=200, blank=True, default="")
    reason = models.TextField(blank=True, default="")
    data = JSONTextField(default=dict)
    at = models.DateTimeField(default=timezone.now)
    chain = models.BigIntegerField(null=True, editable=False)
    seq = models.BigIntegerField(null=True, editable=False)
    prev_hash = models.CharField(max_length=64, default="", editable=False)
    hash = models.CharField(max_length=64, default="", editable=False)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["action", "at"], name="audit_action_at"),
            models.Index(fields=["actor", "at"], name="audit_actor_at"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["chain", "seq"], name="audit_chain_seq_unique"),
        ]
        ordering = ["-at"]

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise ValueError("audit entries are never updated")
        using = kwargs.get("using") or "default"
        with transaction.atomic(using=using, savepoint=False):
            _link([self], using)
            super().save(*args, **kwargs)

    def content(self) -> dict[str, Any]:
        """What the hash covers: everything the entry says, as the database gives it back.

        Not the user's id nor the project's (both are set to NULL when the user or the
        project is deleted): ``actor`` names the user, ``chain`` the project.
        """
        return {
            "chain": self.chain,
            "seq": self.seq,
            "at": canonical_time(self.at),
            "actor": self.actor,
            "action": self.action,
            "target": self.target,
            "reason": self.reason,
            "data": self.data,
        }


def _link(entries: Sequence[AuditEntry], using: str) -> None:
    """Number and hash ``entries`` at the end of their chains, holding each head's lock.

    Heads are locked in key order, so two writers appending to the same chains wait
    for each other instead of deadlocking.
    """
    by_chain: dict[int, list[AuditEntry]] = {}
    for entry in entries:
        if entry.at is None:
            entry.at = timezone.now()
        # What the database will give back: JSON round-tripped, time to the microsecond.
        entry.data = json.loads(json.dumps(entry.data, ensure_ascii=False, allow_nan=False))
        by_chain.setdefault(entry.project_id or 0, []).append(entry)
    heads = AuditChain.objects.using(using)
    locked = list(heads.select_for_update().filter(key__in=by_chain).order_by("key"))
    if len(locked) < len(by_chain):  # a chain's first entry: start its head, then lock it
        heads.bulk_create([AuditChain(key=key) for key in by_chain], ignore_conflicts=True)
        locked = list(heads.select_for_update().filter(key__in=by_chain).order_by("key"))
    for head in locked:
        for entry in by_chain[head.key]:
            head.seq += 1
            entry.chain, entry.seq, entry.prev_hash = head.key, head.seq, head.head
            entry.hash = head.head = link_hash(entry.prev_hash, entry.content())
        heads.filter(key=head.key).update(seq=head.seq, head=head.head)


class Notification(models.Model):
    """An outgoing webhook (an outbox row): sent by a worker, signed, retried until delivered."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    payload = JSONTextField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        indexes = [models.Index(fields=["delivered_at", "next_attempt_at"], name="notify_due")]


class Heartbeat(models.Model):
    """A worker's sign of life, written every few seconds (``/healthz`` reads it)."""

    name = models.CharField(max_length=200, unique=True)
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} at {self.at:%H:%M:%S}"
