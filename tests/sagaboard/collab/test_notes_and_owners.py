"""Notes, owners and acknowledgements: who may, what is kept, what is refused, what is audited."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from sagaboard.actions.services import runner
from sagaboard.approvals.services.approvals import DecisionRefused
from sagaboard.collab.reads import notes as note_reads
from sagaboard.collab.services import notes, ownership
from sagaboard.models import AuditEntry, Note, NoteRevision, Project, Saga, Step
from sagaboard.search.reads import saga_search
from sagaboard.ui.markdown_text import render
from tests.support.hitl import person, storebot_server_saga

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


@pytest.fixture
def saga(shop: Project) -> Saga:
    return Saga.objects.create(
        project=shop, saga_id="s-1", name="order", status="IN_PROGRESS",
        created_at="2026-03-01T12:00:00Z", updated_at="2026-03-01T12:00:00Z",
    )  # fmt: skip


def failed_step(shop: Project) -> Step:
    saga = storebot_server_saga(shop, "f-1", refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, tool_name="return_item", state="ROLLBACK_FAILED")


def refusal(call, *args, **kwargs) -> DecisionRefused:  # type: ignore[no-untyped-def]
    with pytest.raises(DecisionRefused) as err:
        call(*args, **kwargs)
    return err.value


# ---------------------------------------------------------------- notes


def test_an_operator_writes_a_note_on_a_saga_and_on_a_step(shop: Project) -> None:
    step = failed_step(shop)
    ann = person("ann", "operator", shop)
    on_saga = notes.note_add(user=ann, saga_pk=step.saga_id, body="Looking at it")
    on_step = notes.note_add(user=ann, saga_pk=step.saga_id, body="carrier down", step_id="step-2")
    assert on_saga.step is None and on_step.step is not None
    assert on_step.step.step_id == "step-2" and on_step.author_name == "user:ann"
    assert [n.pk for n in note_reads.notes_for_saga(step.saga)] == [on_saga.pk, on_step.pk]
    assert note_reads.note_counts(step.saga) == {None: 1, "step-2": 1}
    entries = AuditEntry.objects.filter(action="note.add").order_by("pk")
    assert [(e.actor, e.target, e.reason) for e in entries] == [
        ("user:ann", "saga:f-1", "Looking at it"),
        ("user:ann", "saga:f-1/step-2", "carrier down"),
    ]


def test_an_approver_may_write_notes_and_a_viewer_may_not(saga: Saga, shop: Project) -> None:
    assert notes.note_add(user=person("apo", "approver", shop), saga_pk=saga.pk, body="ok")
    err = refusal(notes.note_add, user=person("vic", "viewer", shop), saga_pk=saga.pk, body="x")
    assert err.status == 403
    assert Note.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [("", "body"), ("   \n ", "body"), ("x" * 10_001, "body"), ("a\x00b", "body")],
)
def test_a_bad_note_is_refused_naming_the_body(
    saga: Saga, shop: Project, body: str, field: str
) -> None:
    err = refusal(notes.note_add, user=person("ann", "operator", shop), saga_pk=saga.pk, body=body)
    assert (err.status, err.field) == (400, field)
    assert not Note.objects.exists() and not AuditEntry.objects.exists()


def test_a_saga_of_another_project_or_an_unknown_step_is_not_found(
    saga: Saga, shop: Project
) -> None:
    other = Project.objects.create(slug="other", name="Other")
    outsider = person("out", "operator", other)
    assert refusal(notes.note_add, user=outsider, saga_pk=saga.pk, body="x").status == 404
    ann = person("ann", "operator", shop)
    err = refusal(notes.note_add, user=ann, saga_pk=saga.pk, body="x", step_id="nope")
    assert (err.status, err.field) == (404, "step")
    assert not Note.objects.exists()


def test_an_edit_keeps_the_text_it_replaces_and_only_the_author_edits(
    saga: Saga, shop: Project
) -> None:
    ann, bob = person("ann", "operator", shop), person("bob", "operator", shop)
    note = notes.note_add(user=ann, saga_pk=saga.pk, body="first")
    notes.note_edit(user=ann, note_pk=note.pk, body="second")
    notes.note_edit(user=ann, note_pk=note.pk, body="third")
    note.refresh_from_db()
    assert note.body == "third" and note.edited_at is not None
    assert list(note.revisions.values_list("body", flat=True)) == ["second", "first"]
    assert refusal(notes.note_edit, user=bob, note_pk=note.pk, body="mine").status == 403
    assert NoteRevision.objects.count() == 2
    assert AuditEntry.objects.filter(action="note.edit").count() == 2


def test_a_deleted_note_leaves_the_page_but_not_the_record(saga: Saga, shop: Project) -> None:
    ann, bob = person("ann", "operator", shop), person("bob", "operator", shop)
    note = notes.note_add(user=ann, saga_pk=saga.pk, body="wrong saga, sorry")
    assert refusal(notes.note_delete, user=bob, note_pk=note.pk).status == 403
    admin = person("ada", "admin", shop)
    notes.note_delete(user=admin, note_pk=note.pk)
    assert note_reads.notes_for_saga(saga) == []
    note.refresh_from_db()
    assert note.body == "wrong saga, sorry" and note.deleted_by == "user:ada"
    assert refusal(notes.note_edit, user=ann, note_pk=note.pk, body="x").status == 404
    assert AuditEntry.objects.filter(action="note.delete", actor="user:ada").exists()


def test_markdown_renders_safely() -> None:
    html = render(
        "**bold** <script>alert(1)</script> [bad](javascript:alert(1)) "
        '[ok](https://example.com) [here](/sagas/shop/s-1/) ![img](https://x/i.png) "q"\n\n# Title'
    )
    assert "<strong>bold</strong>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert 'href="javascript' not in html and "<img" not in html and "<h1" not in html
    assert '<a href="https://example.com" rel="nofollow noopener noreferrer">ok</a>' in html
    assert '<a href="/sagas/shop/s-1/"' in html


# ---------------------------------------------------------------- owners


def test_assign_to_me_to_someone_and_to_nobody(saga: Saga, shop: Project) -> None:
    ann, bob = person("ann", "operator", shop), person("bob", "approver", shop)
    assert ownership.saga_assign(user=ann, saga_pk=saga.pk, assignee="ann").owner == ann
    assert ownership.saga_assign(user=ann, saga_pk=saga.pk, assignee="bob").owner == bob
    assigned = ownership.saga_assign(user=bob, saga_pk=saga.pk, assignee="")
    assert assigned.owner is None and assigned.owner_since is None
    moves = AuditEntry.objects.filter(action="saga.assign").order_by("pk")
    assert [(e.actor, e.data["from"], e.data["to"]) for e in moves] == [
        ("user:ann", "", "ann"), ("user:ann", "ann", "bob"), ("user:bob", "bob", ""),
    ]  # fmt: skip


def test_only_a_collaborating_member_can_own_a_saga(saga: Saga, shop: Project) -> None:
    ann = person("ann", "operator", shop)
    viewer = person("vic", "viewer", shop)
    person("out", "operator", Project.objects.create(slug="other", name="Other"))
    for who in ("vic", "out", "nobody-by-that-name"):
        err = refusal(ownership.saga_assign, user=ann, saga_pk=saga.pk, assignee=who)
        assert (err.status, err.field) == (400, "owner")
    assert refusal(ownership.saga_assign, user=viewer, saga_pk=saga.pk, assignee="").status == 403
    saga.refresh_from_db()
    assert saga.owner is None and not AuditEntry.objects.exists()


def test_the_list_filters_by_owner(saga: Saga, shop: Project) -> None:
    ann = person("ann", "operator", shop)
    other = Saga.objects.create(
        project=shop, saga_id="s-2", name="order", status="IN_PROGRESS",
        created_at="2026-03-01T12:00:00Z", updated_at="2026-03-01T12:00:00Z",
    )  # fmt: skip
    ownership.saga_assign(user=ann, saga_pk=saga.pk, assignee="ann")

    def ids(query: str, viewer: object = ann) -> set[str]:
        search = saga_search.parse(QueryDict(query))
        return set(
            saga_search.select(search, [shop], viewer=viewer).values_list("saga_id", flat=True)
        )

    assert ids("owner=me") == {"s-1"}
    assert ids("q=owner:me") == {"s-1"}
    assert ids("owner=ann") == {"s-1"}
    assert ids("owner=none") == {other.saga_id}
    assert ids("owner=me", viewer=None) == set()
    bob = person("bob", "operator", shop)
    assert ids("owner=me", viewer=bob) == set()
    rows, _ = saga_search.page(saga_search.SagaFilter(), [shop], cursor=None, limit=10)
    assert {r.saga_id: r.owner_name for r in rows} == {"s-1": "ann", "s-2": None}


# ---------------------------------------------------------------- acknowledgements


def test_an_acknowledgement_marks_the_failure_shown_now(shop: Project) -> None:
    step = failed_step(shop)
    ann = person("ann", "operator", shop)
    acked = ownership.step_acknowledge(user=ann, step_pk=step.pk)
    assert acked.acknowledged and acked.acknowledged_by == "user:ann"
    assert refusal(ownership.step_acknowledge, user=ann, step_pk=step.pk).status == 409
    # Another failed attempt is a new failure: nobody has acknowledged that one yet.
    Step.objects.filter(pk=step.pk).update(changed_at=acked.changed_at.replace(year=2099))
    step.refresh_from_db()
    assert not step.acknowledged
    assert AuditEntry.objects.filter(action="step.acknowledge").count() == 1


def test_only_a_failure_waiting_for_an_operator_can_be_acknowledged(shop: Project) -> None:
    step = failed_step(shop)
    done = Step.objects.get(saga=step.saga, state="ROLLED_BACK")
    ann = person("ann", "operator", shop)
    assert refusal(ownership.step_acknowledge, user=ann, step_pk=done.pk).status == 409
    viewer = person("vic", "viewer", shop)
    assert refusal(ownership.step_acknowledge, user=viewer, step_pk=step.pk).status == 403
    outsider = person("out", "operator", Project.objects.create(slug="o", name="O"))
    assert refusal(ownership.step_acknowledge, user=outsider, step_pk=step.pk).status == 404
