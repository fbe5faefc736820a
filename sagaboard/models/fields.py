"""What the tables are made of: JSON kept as text, enum choices, and the check that a
column holds one of its enum's values."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import models

from undo_core import APPROVAL_DECISIONS, CARRIED_OUT, STEP_ACTIONS, DecisionAction


def one_of(
    table: str, field: str, values: Iterable[str], *, null: bool = False
) -> models.CheckConstraint:
    """The column holds one of ``values`` (or NULL, when ``null``): the database itself
    refuses anything else, whatever writes it (an ``update()``, SQL by hand, a bug).

    ``values`` come from the enum the code uses (undo_core's, or the model's choices),
    never from a copy: a new value is a new migration, made by ``makemigrations``.
    """
    allowed = models.Q(**{f"{field}__in": [str(value) for value in values]})
    if null:
        allowed |= models.Q(**{f"{field}__isnull": True})
    return models.CheckConstraint(condition=allowed, name=f"{table}_{field}_valid")


class SagaDriver(models.TextChoices):
    CLIENT = "client", "run by the agent (mirrored)"
    SERVER = "server", "run by sagaboard"


class PolicyOnExpiry(models.TextChoices):
    WAIT = "wait", "escalate and keep waiting"
    REJECT = "reject", "escalate and reject the undo"


class ApprovalStatus(models.TextChoices):
    PENDING = "PENDING"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"
    """Rejected by its policy's timeout (``on_expiry="reject"``)."""
    VOID = "VOID"
    """What would run changed after the approval was asked for: a new one is needed."""


def choices_of(name: str, members: tuple[DecisionAction, ...]) -> type[models.TextChoices]:
    """Model choices made from undo_core's vocabulary, never spelled again here."""
    return models.TextChoices(name, [(m.name, m.value) for m in members])  # type: ignore[return-value]


VoteDecision = choices_of("VoteDecision", APPROVAL_DECISIONS)
"""An approver's vote: undo_core's ``APPROVAL_DECISIONS``."""
StepAction = choices_of("StepAction", STEP_ACTIONS)
"""An operator's answer to a failed undo: undo_core's ``STEP_ACTIONS``."""
CarriedOut = choices_of("CarriedOut", CARRIED_OUT)
"""A step action the engine carries out and an agent acknowledges: undo_core's ``CARRIED_OUT``."""


class JSONTextField(models.TextField):  # type: ignore[type-arg]
    """JSON stored as text, returned as Python values; ``None`` is SQL NULL."""

    if TYPE_CHECKING:
        # Django is untyped here (no django-stubs): without this mypy takes ``step.undo``
        # for the field itself, where an instance holds the stored JSON value.
        def __get__(self, instance: Any, owner: Any) -> Any: ...

    def from_db_value(self, value: str | None, expression: Any, connection: Any) -> Any:
        return None if value is None else json.loads(value)

    def to_python(self, value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    def get_prep_value(self, value: Any) -> str | None:
        if value is None:
            return None
        return json.dumps(value, ensure_ascii=False, allow_nan=False)

    def deconstruct(self) -> Any:
        # The path the migrations name (``sagaboard.models.JSONTextField``), wherever it lives.
        name, _path, args, kwargs = super().deconstruct()
        return name, "sagaboard.models.JSONTextField", args, kwargs
