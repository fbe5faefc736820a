"""The audit log is tamper-evident: every entry is chained to the one before it in its
project, and ``manage.py sagaboard_verify --audit`` names the first entry altered,
removed or added behind sagaboard's back."""

from __future__ import annotations

import io
import itertools
import threading
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction

from sagaboard.audit.services.audit import export_recorded
from sagaboard.audit.services.audit_chain import verify_audit
from sagaboard.infra.hash_chain import GENESIS, link_hash
from sagaboard.models import AuditChain, AuditEntry, Project
from tests.support import racing

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def write(project: Project | None, n: int, action: str = "policy.update") -> list[AuditEntry]:
    return [
        AuditEntry.objects.create(
            project=project, actor="user:ann", action=action, reason=f"why {i}",
            data={"i": i, "nested": {"b": [1, 2], "a": "é"}},
        )
        for i in range(n)
    ]  # fmt: skip


def sql(statement: str, params: list[Any]) -> None:
    """Change a row the way an intruder with database access would: no model code."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def verify_command(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("sagaboard_verify", "--audit", *args, stdout=out)
    except CommandError as err:
        return err.returncode, out.getvalue() + str(err)
    return 0, out.getvalue()


def test_every_way_of_writing_an_entry_links_it_in_its_projects_chain(shop: Project) -> None:
    other = Project.objects.create(slug="other", name="Other")
    write(shop, 2)
    AuditEntry(project=shop, actor="system", action="retention.run").save()
    export_recorded(user=None, projects=[shop, other], what="csv", data={"filter": {}})
    write(None, 1, action="token.create")

    chain = list(AuditEntry.objects.filter(project=shop).order_by("seq"))
    assert [e.seq for e in chain] == [1, 2, 3, 4]
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(chain))
    assert AuditChain.objects.get(key=shop.pk).head == chain[-1].hash
    assert list(AuditEntry.objects.filter(project=other).values_list("seq", flat=True)) == [1]
    assert AuditEntry.objects.get(project=None).chain == 0
    report = verify_audit()
    assert report.ok and report.entries == 6
    assert {c.name: c.entries for c in report.chains} == {"shop": 4, "other": 1, "(no project)": 1}


def test_the_command_prints_each_chains_head_and_exits_0_when_unbroken(shop: Project) -> None:
    entries = write(shop, 3)
    code, out = verify_command()
    assert code == 0
    assert f"audit chain shop: 3 entries verified, head {entries[-1].hash} [ok]" in out
    assert "0 break(s)" in out


def test_an_entry_altered_in_the_database_is_named(shop: Project) -> None:
    entries = write(shop, 5)
    sql("UPDATE sagaboard_auditentry SET reason = %s WHERE id = %s", ["nothing", entries[2].pk])

    report = verify_audit()
    assert not report.ok
    [broken] = report.breaks
    assert (broken.entry_id, broken.seq) == (entries[2].pk, 3)
    assert "altered" in broken.problem
    code, out = verify_command("--project", "shop")
    assert code == 1
    assert f"entry #{entries[2].pk} (seq 3): altered" in out


def test_an_altered_entry_rehashed_to_hide_it_is_caught_by_the_next(shop: Project) -> None:
    entries = write(shop, 4)
    victim = AuditEntry.objects.get(pk=entries[1].pk)
    victim.reason = "covered up"
    forged = link_hash(victim.prev_hash, victim.content())
    sql(
        "UPDATE sagaboard_auditentry SET reason = %s, hash = %s WHERE id = %s",
        ["covered up", forged, victim.pk],
    )
    [broken] = verify_audit().breaks
    assert (broken.entry_id, broken.seq) == (entries[2].pk, 3)
    assert "prev_hash" in broken.problem


def test_a_removed_entry_is_named_by_its_number(shop: Project) -> None:
    entries = write(shop, 4)
    sql("DELETE FROM sagaboard_auditentry WHERE id = %s", [entries[1].pk])
    [broken] = verify_audit().breaks
    assert broken.seq == 2 and broken.problem.startswith("missing")
    assert f"#{entries[2].pk}, seq 3" in broken.problem


def test_removing_the_newest_entries_is_caught_by_the_head(shop: Project) -> None:
    entries = write(shop, 4)
    sql("DELETE FROM sagaboard_auditentry WHERE id >= %s", [entries[2].pk])
    [broken] = verify_audit().breaks
    assert broken.seq == 3
    assert "head says 4" in broken.problem


def test_a_row_inserted_by_hand_is_in_no_chain(shop: Project) -> None:
    write(shop, 1)
    sql(
        "INSERT INTO sagaboard_auditentry (project_id, actor, action, target, reason, data, at,"
        " prev_hash, hash) VALUES (%s, 'user:mallory', 'policy.update', '', '', '{}', %s, '', '')",
        [shop.pk, "2026-01-01 00:00:00+00:00"],
    )
    [broken] = verify_audit().breaks
    assert "in no chain" in broken.problem


def test_an_entry_rolled_back_leaves_no_gap(shop: Project) -> None:
    write(shop, 1)
    with pytest.raises(RuntimeError), transaction.atomic():
        write(shop, 1)
        raise RuntimeError("the action failed")
    write(shop, 1)
    assert list(AuditEntry.objects.order_by("seq").values_list("seq", flat=True)) == [1, 2]
    assert verify_audit().ok


def test_entries_are_never_updated(shop: Project) -> None:
    [entry] = write(shop, 1)
    entry.reason = "rewritten"
    with pytest.raises(ValueError, match="never updated"):
        entry.save()


def test_a_deleted_projects_and_users_entries_still_verify(shop: Project) -> None:
    ann = get_user_model().objects.create_user("ann")
    AuditEntry.objects.create(project=shop, user=ann, actor="user:ann", action="note.add")
    ann.delete()
    shop.delete()
    report = verify_audit()
    assert report.ok and report.entries == 1
    assert report.chains[0].name.startswith("(deleted")


def test_an_unknown_project_is_a_clear_error() -> None:
    code, out = verify_command("--project", "nope")
    assert code == 1 and "no project with the slug 'nope'" in out


@pytest.mark.slow  # threads racing on real transactions
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_number_one_chain_without_gaps_or_forks() -> None:
    project = Project.objects.create(slug="busy", name="Busy")
    errors: list[BaseException] = []
    start = racing.Start(4)

    def writer(n: int) -> None:
        try:
            start.wait(n)
            for _ in range(15):
                with transaction.atomic():
                    write(project, 1)
        except BaseException as err:
            errors.append(err)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    seqs = list(AuditEntry.objects.filter(project=project).values_list("seq", flat=True))
    assert sorted(seqs) == list(range(1, 61))
    assert verify_audit().ok
