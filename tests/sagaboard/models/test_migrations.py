"""The schema's history: migrations standing on their own; columns holding only their enums."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from sagaboard.models import (
    Approval,
    ApprovalPolicy,
    ApprovalVote,
    CompensationAttempt,
    Project,
    Saga,
    Step,
)
from tests.support.live_server import ROOT, manage, temp_database

MIGRATIONS = Path(ROOT) / "sagaboard" / "migrations"
KIND = "postgres" if os.environ.get("DATABASE_URL", "").startswith("postgres") else "sqlite"

GROUPS = (
    "import json; from django.contrib.auth.models import Group; "
    "print(json.dumps({g.name: sorted(g.permissions.values_list('codename', flat=True)) "
    "for g in Group.objects.order_by('name')}))"
)


def groups_after(database_url: str, code: str) -> dict[str, list[str]]:
    out = manage(database_url, "shell", "-c", code)
    return json.loads(out.strip().splitlines()[-1])


def test_no_data_migration_imports_sagaboard_code() -> None:
    """Schema migrations may name sagaboard's field classes; data migrations carry their own
    frozen data, so a later change to live code never changes what history did."""
    for path in sorted(MIGRATIONS.glob("0*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert not (node.module or "").startswith("sagaboard"), (path.name, node.module)
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "import_module":
                pytest.fail(f"{path.name} imports a module at run time")


@pytest.mark.slow  # migrates a fresh database in a subprocess
def test_migrating_from_zero_gives_the_roles_that_roles_sync_gives(tmp_path: Path) -> None:
    with temp_database(KIND, tmp_path) as url:
        manage(url, "migrate", "--no-input", "-v0")
        migrated = groups_after(url, GROUPS)
        synced = groups_after(
            url,
            "from django.contrib.auth.models import Group, Permission; "
            "from sagaboard.access.services.roles import roles_sync; "
            "roles_sync(Group, Permission); " + GROUPS,
        )
    assert sorted(migrated) == ["admin", "approver", "operator", "viewer"]
    assert "view_approval" in migrated["viewer"] and "decide_approval" in migrated["approver"]
    assert migrated == synced


@pytest.mark.django_db
def test_the_models_and_their_migrations_agree() -> None:
    """A new enum value (a new status, state or outcome) is a new migration, made here."""
    call_command("makemigrations", "sagaboard", "--check", "--dry-run", verbosity=0)


@pytest.fixture
def rows(db: Any) -> dict[str, Any]:
    shop = Project.objects.create(slug="shop", name="Shop")
    now = timezone.now()
    saga = Saga.objects.create(project=shop, saga_id="s-1", name="s", status="IN_PROGRESS",
                               created_at=now, updated_at=now)  # fmt: skip
    step = Step.objects.create(saga=saga, step_id="a", tool_name="t", state="COMPLETED",
                               position=0, idempotency_key="k")  # fmt: skip
    attempt = CompensationAttempt.objects.create(step=step, number=1, started_at=now)
    policy = ApprovalPolicy.objects.create(project=shop, name="p")
    approval = Approval.objects.create(project=shop, saga=saga, step=step, why="w", plan_hash="h")
    user = get_user_model().objects.create_user("ann")
    vote = ApprovalVote.objects.create(approval=approval, user=user, decision="approve", reason="r")
    return {"saga": saga, "step": step, "attempt": attempt, "policy": policy,
            "approval": approval, "vote": vote}  # fmt: skip


COLUMNS = [
    ("saga", "status", "DONE"),
    ("saga", "status", "in_progress"),
    ("saga", "driver", "robot"),
    ("saga", "outcome", "MOSTLY"),
    ("saga", "outcome", ""),
    ("saga", "waiting_for", "GODOT"),
    ("step", "state", "SUCCEEDED"),
    ("step", "reversibility", "sometimes"),
    ("attempt", "outcome", "ok"),
    ("policy", "on_expiry", "ignore"),
    ("approval", "status", "MAYBE"),
    ("vote", "decision", "abstain"),
]


@pytest.mark.parametrize(("row", "field", "value"), COLUMNS)
def test_the_database_refuses_a_value_outside_the_columns_enum(
    rows: dict[str, Any], row: str, field: str, value: str
) -> None:
    obj = rows[row]
    model = type(obj)
    with pytest.raises(IntegrityError), transaction.atomic():
        model.objects.filter(pk=obj.pk).update(**{field: value})  # past every Python check


@pytest.mark.parametrize(("row", "field", "value"), [
    ("saga", "status", "ROLLBACK_FAILED"), ("saga", "outcome", None), ("saga", "outcome", "CLEAN"),
    ("saga", "waiting_for", "OPERATOR"), ("step", "state", "IN_DOUBT"),
    ("attempt", "outcome", "timed_out"), ("approval", "status", "VOID"),
])  # fmt: skip
def test_the_database_takes_every_value_of_the_enum(
    rows: dict[str, Any], row: str, field: str, value: str | None
) -> None:
    obj = rows[row]
    assert type(obj).objects.filter(pk=obj.pk).update(**{field: value}) == 1


OLD_AUDIT = (
    "from django.db import connection; c = connection.cursor(); "
    "c.execute(\"INSERT INTO sagaboard_project (slug, name, created_at) VALUES ('shop', 'Shop', "
    '\'2026-01-01 00:00:00+00:00\')"); c.execute("SELECT id FROM sagaboard_project"); '
    "p = c.fetchone()[0]; "
    '[c.execute("INSERT INTO sagaboard_auditentry (project_id, actor, action, target, reason, '
    "data, at) VALUES (%s, 'user:ann', 'policy.update', '', %s, '{\\\"n\\\": 1}', %s)\", "
    "[pk, f'why {n}', f'2026-01-0{n} 12:00:00.12345{n}+00:00']) "
    "for n, pk in enumerate([p, p, None, p], start=1)]"
)


@pytest.mark.slow  # migrates a fresh database in a subprocess
def test_entries_written_before_the_audit_chain_are_chained_by_its_migration(
    tmp_path: Path,
) -> None:
    with temp_database(KIND, tmp_path) as url:
        manage(url, "migrate", "--no-input", "-v0", "sagaboard", "0019_batch_jobs")
        manage(url, "shell", "-c", OLD_AUDIT)
        manage(url, "migrate", "--no-input", "-v0")
        out = manage(url, "sagaboard_verify", "--audit")
    assert "audit chain shop: 3 entries verified" in out
    assert "audit chain (no project): 1 entry verified" in out
    assert out.endswith("2 audit chain(s), 4 entries verified: 0 break(s)")
