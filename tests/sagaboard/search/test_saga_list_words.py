"""The saga list's search box: plain words find error text too (issue 31), not only ``error:``.

``Stripe API timed out`` typed as it was read on a saga page finds the saga whose refund
failed so; the box says so; a name or id prefix still finds by name or id.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client

from sagaboard.models import Project
from tests.support.hitl import login
from tests.support.search_world import run

pytestmark = pytest.mark.django_db


def listed(client: Client, query: str) -> list[str]:
    page = client.get("/", {"q": query})
    assert page.status_code == 200
    return re.findall(r'<code class="muted">([^<]+)</code></td>', page.content.decode())


def test_plain_words_find_a_saga_by_its_error_text() -> None:
    shop = Project.objects.create(slug="shop", name="Shop")
    reserve = ("reserve_stock", {"sku": "A-1"}, {"held": True})
    run(shop, "stuck-1", [reserve], fail=("refund_payment", {"amount": 5}, "Stripe API timed out"),
        name="storebot-return")  # fmt: skip
    run(shop, "fine-1", [reserve], name="storebot-return")
    viewer = login("viewer", shop, "vic")
    assert listed(viewer, "Stripe API timed out") == ["stuck-1"]
    assert listed(viewer, "stripe timed") == ["stuck-1"]  # every word, any order, any case
    assert listed(viewer, "error:Stripe API timed out") == ["stuck-1"]  # the shortcut still
    assert sorted(listed(viewer, "storebot")) == ["fine-1", "stuck-1"]  # a name prefix
    assert listed(viewer, "fine-") == ["fine-1"]  # an id prefix
    assert listed(viewer, "Stripe API was fine") == []
    help_text = viewer.get("/").content.decode()
    assert "Plain words find a saga by the start of its name or id, or by its error text" in (
        help_text
    )
