"""Structured logs: JSON lines in production, with the saga and step on every line about them.

Code that works on a saga says so once (``with saga_context(saga_id, step_id):``);
every log line inside, from sagaboard, undo_core or a handler, then carries those
ids, whatever logger wrote it.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.views.debug import SafeExceptionReporterFilter

_saga: contextvars.ContextVar[str | None] = contextvars.ContextVar("saga_id", default=None)
_step: contextvars.ContextVar[str | None] = contextvars.ContextVar("step_id", default=None)

# Attributes every LogRecord has: anything else was passed in ``extra`` and is kept.
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime"}


@contextmanager
def saga_context(saga_id: str | None, step_id: str | None = None) -> Iterator[None]:
    """Log lines inside this block carry ``saga_id`` (and ``step_id``)."""
    saga_token = _saga.set(saga_id)
    step_token = _step.set(step_id)
    try:
        yield
    finally:
        _step.reset(step_token)
        _saga.reset(saga_token)


class SagaContextFilter(logging.Filter):
    """Puts the current saga and step ids on each record (unless the caller set them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "saga_id", None) is None:
            record.saga_id = _saga.get()
        if getattr(record, "step_id", None) is None:
            record.step_id = _step.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, ids, extras, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and value is not None and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


# scheme://user:PASSWORD@host: the password part of a connection URL.
_URL_PASSWORD = re.compile(r"([a-z][\w+.-]*://[^:/@\s]*:)[^@\s]*@", re.IGNORECASE)


class SecretsReporterFilter(SafeExceptionReporterFilter):
    """Django's error reports (the DEBUG page, error e-mails) without connection passwords.

    Django hides settings named like secrets (``*_SECRET``, ``*_TOKEN``, ``*_KEY``...)
    and the ``Authorization`` header, but shows ``DATABASE_URL``, ``REDIS_URL`` and
    the broker's URL whole, password included; here the password is masked and the
    rest (host, database) kept, as it helps debugging.
    """

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        value = super().cleanse_setting(key, value)
        if isinstance(value, str) and "://" in value:
            return _URL_PASSWORD.sub(rf"\g<1>{self.cleansed_substitute}@", value)
        return value
