"""Guessing is slowed down: failed logins, bad API tokens and token minting are rate-limited.

Every limit answers 429 with ``Retry-After`` (JSON on the API, a message on the pages),
never a 500, and failed logins leave audit entries naming the username and the IP.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.core.cache.backends.redis import RedisCache
from django.test import Client

from sagaboard.access.services.tokens import token_create
from sagaboard.infra.http import rate_limits
from sagaboard.infra.http.rate_limits import Rate, parse_rate
from sagaboard.models import ApiToken, AuditEntry, Project

pytestmark = pytest.mark.django_db

PASSWORD = "right-horse-battery-staple"
HERE, THERE = "203.0.113.7", "198.51.100.9"


@pytest.fixture(autouse=True)
def fresh_counters(settings: Any) -> Iterator[None]:
    # A fast hasher: these tests check many passwords, and the count is what matters.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The limiter's clock, stopped at the first second of a day (so of every window: a
    test never straddles a window's end, and the seconds left in a 60 s window are exactly
    59); tests jump ahead by adding to ``clock[0]``."""
    start = time.time() // 86400 * 86400 + 1
    offset = [0.0]
    monkeypatch.setattr(rate_limits, "_now", lambda: start + offset[0])
    return offset


@pytest.fixture
def limits(settings: Any) -> Any:
    settings.SAGABOARD_LOGIN_RATE = "3/60s"
    settings.SAGABOARD_LOGIN_IP_RATE = "6/60s"
    settings.SAGABOARD_API_AUTH_RATE = "3/60s"
    settings.SAGABOARD_TOKEN_MINT_RATE = "2/1h"
    return settings


@pytest.fixture
def shop() -> Project:
    return Project.objects.create(slug="shop", name="Shop")


def make_user(name: str, role: str = "viewer", *projects: Project, **extra: Any) -> Any:
    user = get_user_model().objects.create_user(name, password=PASSWORD, **extra)
    user.groups.add(Group.objects.get(name=role))
    for project in projects:
        project.members.add(user)
    return user


def login(username: str, password: str, ip: str = HERE, path: str = "/login/") -> Any:
    return Client(REMOTE_ADDR=ip).post(path, {"username": username, "password": password})


def test_rates_are_read_as_count_per_period() -> None:
    assert parse_rate("5/15m") == Rate(5, 900)
    assert parse_rate(" 60 / 1m ") == Rate(60, 60)
    assert parse_rate("100/1d") == Rate(100, 86400)
    assert parse_rate("off") is None and parse_rate("0") is None
    for bad in ("five", "5/0", "0/1m", "5/15y", "-1/1m"):
        with pytest.raises(ValueError, match="COUNT/PERIOD"):
            parse_rate(bad)


def test_it_refuses_the_right_password_after_too_many_failures_until_the_window_passes(
    limits: Any, clock: list[float]
) -> None:
    make_user("ann")
    for _ in range(3):
        assert login("ann", "wrong").status_code == 200  # the form again, with its error
    refused = login("ann", PASSWORD)
    assert refused.status_code == 429
    assert refused["Retry-After"] == "59"  # the rest of the 60 s window
    assert "Too many failed logins" in refused.content.decode()
    assert "sessionid" not in refused.cookies
    clock[0] += 61
    welcomed = login("ann", PASSWORD)
    assert welcomed.status_code == 302 and welcomed["Location"] == "/"


def test_the_same_user_on_another_address_and_another_user_here_are_not_locked_out(
    limits: Any, clock: list[float]
) -> None:
    make_user("ann")
    make_user("bob")
    for _ in range(3):
        login("ann", "wrong", ip=HERE)
    assert login("ann", PASSWORD, ip=HERE).status_code == 429
    assert login("ann", PASSWORD, ip=THERE).status_code == 302
    assert login("bob", PASSWORD, ip=HERE).status_code == 302


def test_getting_in_clears_the_mistakes_of_that_username_here(
    limits: Any, clock: list[float]
) -> None:
    make_user("ann")
    for _ in range(2):
        login("ann", "wrong")
    assert login("ann", PASSWORD).status_code == 302
    for _ in range(2):
        assert login("ann", "wrong").status_code == 200
    assert login("ann", PASSWORD).status_code == 302  # 4 mistakes, never 3 in a row


def test_one_address_trying_many_usernames_is_limited_whatever_the_username(
    limits: Any, clock: list[float]
) -> None:
    make_user("ann")
    for n in range(6):
        assert login(f"guess-{n}", "wrong").status_code == 200
    assert login("ann", PASSWORD).status_code == 429
    assert login("ann", PASSWORD, ip=THERE).status_code == 302


def test_the_admin_login_page_counts_and_refuses_too(limits: Any, clock: list[float]) -> None:
    make_user("root", is_staff=True, is_superuser=True)
    for _ in range(3):
        assert login("root", "wrong", path="/admin/login/").status_code == 200
    assert login("root", PASSWORD, path="/admin/login/").status_code == 429
    assert login("root", PASSWORD, path="/login/").status_code == 429  # one count for both


def test_failed_logins_are_audited_with_username_and_address_never_the_password(
    limits: Any, clock: list[float]
) -> None:
    make_user("ann")
    for _ in range(4):
        login("ann", "hunter2-guess", ip=HERE)  # the 4th is refused before any check
    failed = AuditEntry.objects.filter(action="login.failed").order_by("pk")
    assert failed.count() == 3
    entry = failed.first()
    assert entry is not None
    assert entry.actor == f"ip:{HERE}" and entry.target == "username:ann"
    assert entry.data["username"] == "ann" and entry.data["ip"] == HERE
    assert entry.user is None and entry.project is None
    tripped = AuditEntry.objects.get(action="login.rate_limited")
    assert "per username+ip" in tripped.reason
    everything = " ".join(str(vars(e)) for e in AuditEntry.objects.all())
    assert "hunter2-guess" not in everything


def test_a_superuser_sees_failed_logins_on_the_audit_page(limits: Any, clock: list[float]) -> None:
    root = make_user("root", "admin", is_staff=True, is_superuser=True)
    login("<b>mallory</b>", "wrong")
    client = Client()
    client.force_login(root)
    page = client.get("/audit/?action=login.").content.decode()
    assert "username:&lt;b&gt;mallory&lt;/b&gt;" in page and "<b>mallory" not in page
    assert f"ip:{HERE}" in page


def test_hostile_usernames_get_the_form_again_never_a_500(limits: Any, clock: list[float]) -> None:
    assert login("ann\x00", "wrong").status_code == 200  # refused by the form: no check ran
    assert not AuditEntry.objects.exists()
    assert login("x" * 100_000, "wrong").status_code == 200
    assert AuditEntry.objects.get(action="login.failed").data["username"] == "x" * 150
    assert login("ann\u202e' OR 1=1 --", "wrong").status_code == 200
    assert AuditEntry.objects.filter(target="username:ann\u202e' OR 1=1 --").count() == 1


def bearer(secret: str, ip: str = HERE) -> Any:
    return Client(REMOTE_ADDR=ip).get(
        "/api/v1/sagas", headers={"authorization": f"Bearer {secret}"}
    )


def test_bad_bearer_tokens_are_limited_per_address_with_json_and_retry_after(
    limits: Any, clock: list[float], shop: Project
) -> None:
    good = token_create(project=shop, label="agent").secret
    prefix = good.split("_")[1]
    for guess in ("nonsense", "sgb_00000000_x", f"sgb_{prefix}_wrong-secret"):
        assert bearer(guess).status_code == 401
    refused = bearer("sgb_11111111_y")
    assert refused.status_code == 429 and refused["Content-Type"].startswith("application/json")
    assert refused.json()["error"]["code"] == "rate_limited"
    assert refused["Retry-After"] == "59"  # the rest of the 60 s window
    assert bearer("sgb_22222222_z").status_code == 429
    # A good token still works from there (an agent behind the same NAT), and elsewhere.
    assert bearer(good).status_code == 200
    assert bearer(good, ip=THERE).status_code == 200
    assert bearer("sgb_33333333_w", ip=THERE).status_code == 401  # elsewhere: its own count
    clock[0] += 61
    assert bearer("sgb_44444444_v").status_code == 401  # a new window


def test_good_tokens_are_never_counted(limits: Any, clock: list[float], shop: Project) -> None:
    good = token_create(project=shop, label="agent").secret
    assert all(bearer(good).status_code == 200 for _ in range(10))


def test_minting_tokens_is_limited_per_user(limits: Any, clock: list[float], shop: Project) -> None:
    client = Client()
    client.force_login(make_user("ada", "admin", shop))
    for n in range(2):
        assert client.post("/tokens/", {"project": "shop", "label": f"t{n}"}).status_code == 201
    refused = client.post("/tokens/", {"project": "shop", "label": "t3"})
    assert refused.status_code == 429 and refused["Retry-After"] == "3599"  # the rest of the hour
    assert "Too many tokens made" in refused.content.decode()
    assert ApiToken.objects.count() == 2


def test_counters_in_redis_are_shared_by_every_process(settings: Any, clock: list[float]) -> None:
    """Two cache clients (two web processes) on one Redis see one count."""
    options = {"LOCATION": "redis://127.0.0.1:6379/0", "KEY_PREFIX": f"t-{uuid.uuid4().hex}"}
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", **options}
    }
    rate = Rate(2, 60)
    assert rate_limits.hit("login", "ann\n10.0.0.1", rate) == 1
    other_process = RedisCache(options["LOCATION"], {"KEY_PREFIX": options["KEY_PREFIX"]})
    original = rate_limits.cache
    try:
        rate_limits.cache = other_process  # type: ignore[assignment]
        assert rate_limits.hit("login", "ann\n10.0.0.1", rate) == 2
        assert rate_limits.wait_seconds("login", "ann\n10.0.0.1", rate) > 0
    finally:
        rate_limits.cache = original
    assert rate_limits.wait_seconds("login", "ann\n10.0.0.1", rate) > 0
    # No clear(): on Redis it would empty the database others share; the keys expire.
