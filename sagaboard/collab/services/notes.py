"""Operators' notes on a saga or a step: written, edited (the old text kept), deleted.

Anyone with the ``collaborate`` permission (operators and approvers) may write a note on a
saga of their projects; only its author may edit or delete it (an admin may delete any:
a note that should not be there must be removable). Each write is audited (``note.add``,
``note.edit``, ``note.delete``) and put on the saga's timeline, where the live feed sees it.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from sagaboard.access.reads import visible
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.audit.services import audit
from sagaboard.infra import text_policy
from sagaboard.models import NOTE_MAX, Note, NoteRevision, Step, User

PERMISSION = "sagaboard.collaborate"


def _checked_body(body: str) -> str:
    body = (body or "").strip()
    if not body:
        raise DecisionRefused("validation_error", "a note needs some text", "body")
    if len(body) > NOTE_MAX:
        raise DecisionRefused("validation_error", f"at most {NOTE_MAX} characters", "body")
    problem = text_policy.text_problem(body)
    if problem is not None:
        raise DecisionRefused("validation_error", problem, "body")
    return body


def _may_write(user: User) -> None:
    if not user.has_perm(PERMISSION):
        raise DecisionRefused("forbidden", "notes need the operator or approver role")


def note_add(*, user: User, saga_pk: int, body: str, step_id: str | None = None) -> Note:
    """A new note on a saga (or, with ``step_id``, on one of its steps)."""
    _may_write(user)
    body = _checked_body(body)
    with transaction.atomic():
        saga = visible.saga_for_user(user, saga_pk)
        if saga is None:
            raise DecisionRefused("not_found", "no such saga in your projects")
        step = None
        if step_id:
            step = Step.objects.filter(saga=saga, step_id=step_id).first()
            if step is None:
                raise DecisionRefused("not_found", "no such step in this saga", "step")
        note = Note.objects.create(
            project_id=saga.project_id, saga=saga, step=step, body=body,
            author=user, author_name=audit.actor_of(user),
        )  # fmt: skip
        audit.record(
            user=user, action="note.add", saga=saga, step=step, reason=_summary(body),
            to_state="NOTE", data={"note": note.pk},
        )  # fmt: skip
    return note


def note_edit(*, user: User, note_pk: int, body: str) -> Note:
    """The note's new text; the one it replaces becomes a revision. Authors only."""
    _may_write(user)
    body = _checked_body(body)
    with transaction.atomic():
        note = _note_for(user, note_pk, lock=True)
        if note.author_id != user.pk:
            raise DecisionRefused("forbidden", "only its author may edit a note")
        if body == note.body:
            return note
        now = timezone.now()
        NoteRevision.objects.create(
            note=note, body=note.body, written_by=note.author_name,
            written_at=note.edited_at or note.created_at,
            replaced_by=audit.actor_of(user), replaced_at=now,
        )  # fmt: skip
        note.body, note.edited_at = body, now
        note.save(update_fields=["body", "edited_at"])
        audit.record(
            user=user, action="note.edit", saga=note.saga, step=note.step,
            reason=_summary(body), to_state="NOTE", data={"note": note.pk},
        )  # fmt: skip
    return note


def note_delete(*, user: User, note_pk: int, reason: str = "") -> Note:
    """Take a note off the saga (its text and history stay for the audit trail)."""
    _may_write(user)
    with transaction.atomic():
        note = _note_for(user, note_pk, lock=True)
        if note.author_id != user.pk and not user.has_perm("sagaboard.manage_policies"):
            raise DecisionRefused("forbidden", "only its author or an admin may delete a note")
        note.deleted_at, note.deleted_by = timezone.now(), audit.actor_of(user)
        note.save(update_fields=["deleted_at", "deleted_by"])
        audit.record(
            user=user, action="note.delete", saga=note.saga, step=note.step,
            reason=(reason or "").strip()[:2000], to_state="NOTE_DELETED", data={"note": note.pk},
        )  # fmt: skip
    return note


def _note_for(user: User, note_pk: int, *, lock: bool = False) -> Note:
    """A live note on a saga the user may see; ``not_found`` otherwise (never whose it is)."""
    notes = Note.objects.select_related("saga__project", "step").filter(
        pk=note_pk, deleted_at__isnull=True, project__in=visible.projects_visible(user)
    )
    note = (notes.select_for_update(of=("self",)) if lock else notes).first()
    if note is None:
        raise DecisionRefused("not_found", "no such note in your projects")
    return note


def _summary(body: str) -> str:
    """What the audit trail and the timeline say of a note: its first line, shortened."""
    line = body.splitlines()[0] if body else ""
    return line if len(line) <= 200 else line[:199] + "…"
