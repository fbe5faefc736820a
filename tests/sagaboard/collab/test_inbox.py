"""The inbox and the navigation's badges: what needs me, by my roles and projects, capped."""

from __future__ import annotations

import pytest
from django.test import Client

from sagaboard.actions.services import runner
from sagaboard.approvals.services import approvals
from sagaboard.collab.pages.inbox_pages import badges_of
from sagaboard.collab.reads import inbox
from sagaboard.collab.services import ownership
from sagaboard.models import ApiToken, Approval, Project, Saga, Step
from tests.support.hitl import person, storebot_server_saga, waiting

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def failed(shop: Project, saga_id: str) -> Step:
    saga = storebot_server_saga(shop, saga_id, refund_needs_approval=False, return_fails_first=5)
    runner.rollback_continue(saga.pk)
    return Step.objects.get(saga=saga, state="ROLLBACK_FAILED")


def test_each_person_counts_what_their_roles_let_them_do(shop: Project) -> None:
    asked = waiting(shop, "a-1")
    failed(shop, "f-1")
    apo, ops, vic = (person("apo", "approver", shop), person("ops", "operator", shop),
                     person("vic", "viewer", shop))  # fmt: skip
    outsider = person("out", "admin", Project.objects.create(slug="o", name="O"))
    assert inbox.counts(apo) == inbox.Counts(approvals=1, failures=0, assigned=0)
    assert inbox.counts(ops) == inbox.Counts(approvals=0, failures=1, assigned=0)
    assert inbox.counts(vic) == inbox.Counts(0, 0, 0)
    assert inbox.counts(outsider) == inbox.Counts(0, 0, 0)
    ownership.saga_assign(user=ops, saga_pk=asked.saga_id, assignee="ops")
    assert inbox.counts(ops).assigned == 1  # waiting for an approver: not at rest


def test_a_vote_takes_the_approval_off_my_inbox(shop: Project) -> None:
    asked = waiting(shop, "a-1")
    Approval.objects.filter(pk=asked.pk).update(required=2)
    apo, ada = person("apo", "approver", shop), person("ada", "approver", shop)
    approvals.approval_decide(approval_id=asked.pk, user=apo, decision="approve", reason="ok")
    assert inbox.counts(apo).approvals == 0  # voted: waits for someone else now
    assert inbox.counts(ada).approvals == 1


def test_an_approval_of_a_saga_posted_with_my_token_is_not_mine_to_vote_on(
    shop: Project,
) -> None:
    """Four eyes refuses the vote of the person who made the token that posted the saga, so
    their inbox and badge do not ask them for it; another approver's do."""
    asked = waiting(shop, "a-1")
    apo, ada = person("apo", "approver", shop), person("ada", "approver", shop)
    token = ApiToken.objects.create(
        project=shop, label="bot", prefix="sbx", secret_hash="0" * 64, created_by=apo
    )
    Saga.objects.filter(pk=asked.saga_id).update(posted_by_token=token)
    assert inbox.counts(apo).approvals == 0 and inbox.items(apo).approvals == []
    assert inbox.counts(ada).approvals == 1
    page = Client()
    page.force_login(apo)
    assert "Approvals waiting for your vote (0)" in page.get("/inbox/").content.decode()


def test_badges_say_what_they_count_in_words_and_cap() -> None:
    shown = badges_of(inbox.Counts(approvals=1, failures=250, assigned=0))
    assert [(b.kind, b.shown, b.label) for b in shown] == [
        ("approvals", "1", "1 approval waits for your vote"),
        ("failures", "99+", "99+ failed undos wait for an operator"),
    ]


def test_the_inbox_lists_each_kind_with_links(shop: Project) -> None:
    asked = waiting(shop, "a-1")
    step = failed(shop, "f-1")
    ada = person("ada", "admin", shop)
    ownership.saga_assign(user=ada, saga_pk=step.saga_id, assignee="ada")
    client = Client()
    client.force_login(ada)
    page = client.get("/inbox/").content.decode()
    assert f'href="/approvals/{asked.pk}/"' in page
    assert "/sagas/shop/f-1/#step-" in page and "Assigned to you (1)" in page
    badges = client.get("/inbox/badges/").content.decode()
    assert "1 approval waits for your vote" in badges and 'data-failures="1"' in badges
    assert "1 saga assigned to you needs you" in badges
