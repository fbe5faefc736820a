"""DjangoStore passes the same SagaStore contract suite as MemoryStore and SQLiteStore.

The suite lives in tests/undo_core/test_store_contract.py (which must not import
Django); its store-generic tests are collected here again with a DjangoStore.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import pytest

from sagaboard.engine.services.django_store import DjangoStore
from sagaboard.models import Project

_CONTRACT = Path(__file__).resolve().parents[2] / "undo_core" / "test_store_contract.py"
_spec = importlib.util.spec_from_file_location("store_contract_for_django", _CONTRACT)
assert _spec is not None and _spec.loader is not None
contract = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(contract)

for _name, _test in vars(contract).items():
    if _name.startswith("test_") and "store" in inspect.signature(_test).parameters:
        globals()[_name] = _test


@pytest.fixture
def store(db: None) -> DjangoStore:
    return DjangoStore(Project.objects.create(slug="contract", name="Contract"))


def test_the_contract_suite_was_collected() -> None:
    collected = [n for n in globals() if n.startswith("test_it_") or "lease" in n]
    assert len(collected) >= 8


@pytest.mark.django_db
def test_a_store_sees_only_its_own_projects_sagas() -> None:
    from undo_core import Saga, define_tool

    mine = DjangoStore(Project.objects.create(slug="mine", name="Mine"))
    theirs = DjangoStore(Project.objects.create(slug="theirs", name="Theirs"))
    saga = Saga("private", store=mine, saga_id="same-id")
    saga.execute(define_tool("t", lambda x: x), 1)
    assert mine.load("same-id") is not None
    assert theirs.load("same-id") is None
    assert theirs.list_unfinished() == []
