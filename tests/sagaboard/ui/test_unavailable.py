"""A database outage is a 503 with Retry-After (a full disk a 507) and a page that needs no
database; a bug is a 500."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import OperationalError, ProgrammingError
from django.test import RequestFactory

from sagaboard.ui.unavailable import server_error


def answer_while_handling(err: Exception) -> object:
    try:
        raise err
    except Exception:  # handler500 runs inside Django's except block
        return server_error(RequestFactory().get("/sagas/"))


@pytest.mark.parametrize(
    "err",
    [
        OperationalError("connection failed: Connection refused"),
        OperationalError("couldn't get a connection after 5.00 sec"),
    ],
)
def test_a_database_outage_is_503_with_retry_after(err: Exception) -> None:
    response = answer_while_handling(err)
    assert response.status_code == 503  # type: ignore[attr-defined]
    assert response["Retry-After"].isdigit()  # type: ignore[index]
    page = response.content.decode()  # type: ignore[attr-defined]
    assert "unavailable for a moment" in page and "may not have been saved" in page


@pytest.mark.parametrize(
    "err",
    [
        OperationalError("database or disk is full"),
        OperationalError('could not extend file "base/16384/2619": No space left on device'),
    ],
)
def test_a_full_disk_is_507_saying_so(err: Exception) -> None:
    response = answer_while_handling(err)
    assert response.status_code == 507  # type: ignore[attr-defined]
    assert response["Retry-After"] == "30"  # type: ignore[index]
    assert "disk is full" in response.content.decode()  # type: ignore[attr-defined]


def test_the_wait_a_full_disk_asks_for_is_the_operators_setting(settings: Any) -> None:
    settings.SAGABOARD_DISK_FULL_RETRY_AFTER = 5
    response = answer_while_handling(OperationalError("database or disk is full"))
    assert response["Retry-After"] == "5"  # type: ignore[index]


def test_an_outage_wrapped_in_another_error_is_still_503() -> None:
    try:
        raise OperationalError("server closed the connection unexpectedly")
    except OperationalError as cause:
        wrapped = RuntimeError("rendering failed")
        wrapped.__cause__ = cause
    assert answer_while_handling(wrapped).status_code == 503  # type: ignore[attr-defined]


def test_a_bug_is_still_a_500() -> None:
    for err in (ProgrammingError('column "nope" does not exist'), KeyError("x")):
        response = answer_while_handling(err)
        assert response.status_code == 500  # type: ignore[attr-defined]
        assert "Retry-After" not in response  # type: ignore[operator]
