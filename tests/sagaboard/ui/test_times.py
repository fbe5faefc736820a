"""``{% when %}``: every time labelled with what it is and whose clock, exact UTC in the HTML."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.template import Context, Template, TemplateSyntaxError
from django.test import RequestFactory

from sagaboard.ui import times

AT = datetime(2026, 1, 31, 12, 0, 5, 123456, tzinfo=UTC)
TEMPLATES = Path(__file__).resolve().parents[3] / "templates"
EXTREME = timedelta(hours=23, minutes=59)
"""The largest UTC offset RFC 3339 writes (and the API takes)."""


def render(source: str, **context: object) -> str:
    return Template(source).render(Context(context))


def test_a_time_is_exact_utc_in_a_time_element_labelled_with_what_and_whose_clock() -> None:
    html = render('{% when t "received" %}', t=AT)
    assert html == (
        '<span class="when" data-clock="server"><span class="when-what">received</span> '
        '<time datetime="2026-01-31T12:00:05.123Z" data-when="relative" data-what="received"'
        ' data-clock-text="server clock" tabindex="0">2026-01-31 12:00:05 UTC</time>'
        ' <span class="when-clock">(server clock)</span>'
        '<span class="when-detail">received · server clock: 2026-01-31 12:00:05 UTC</span></span>'
    )


def test_a_time_in_another_zone_is_written_in_utc() -> None:
    east = AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    html = render('{% when t "changed" %}', t=east)
    assert 'datetime="2026-01-31T12:00:05.123Z"' in html and ">2026-01-31 12:00:05 UTC<" in html


@pytest.mark.parametrize(
    ("at", "iso", "exact"),
    [
        (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01T00:00:00.000Z", "0001-01-01 00:00:00.000"),
        (datetime(999, 3, 4, 5, 6, 7, 8999, tzinfo=UTC), "0999-03-04T05:06:07.008Z",
         "0999-03-04 05:06:07.008"),
        (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(EXTREME)),
         "9999-12-31T00:00:59.999Z", "9999-12-31 00:00:59.999"),
        (datetime(1, 1, 1, 0, 0, 0, 1, tzinfo=timezone(-EXTREME)),
         "0001-01-01T23:59:00.000Z", "0001-01-01 23:59:00.000"),
    ],
)  # fmt: skip
def test_a_time_near_year_1_or_9999_is_written_with_a_four_digit_year(
    at: datetime, iso: str, exact: str
) -> None:
    # %Y writes year 1 as "1" on glibc: "1-01-01T00:00:00.000Z" is no HTML time, and the
    # browser's Date reads it as invalid or as 2001, so times.js could not show it.
    assert times.iso(at) == iso and times.exact_utc(at, precise=True) == f"{exact} UTC"
    html = render('{% when t "began" precise=True %}', t=at)
    assert f'datetime="{iso}"' in html and f">{exact} UTC</time>" in html


def test_a_reported_time_is_the_agents_clock_unless_sagaboard_ran_the_saga() -> None:
    agent = SimpleNamespace(agent_driven=True)
    server = SimpleNamespace(agent_driven=False)
    assert 'data-clock="agent"' in render('{% when t "began" saga=s %}', t=AT, s=agent)
    assert "(agent clock)" in render('{% when t "began" saga=s %}', t=AT, s=agent)
    assert 'data-clock="server"' in render('{% when t "began" saga=s %}', t=AT, s=server)
    assert 'data-clock="agent"' in render('{% when t "event" %}', t=AT)  # no saga: reported


def test_precise_keeps_milliseconds_and_bare_leaves_the_label_to_the_column() -> None:
    html = render('{% when t "event" precise=True bare=True %}', t=AT)
    assert 'data-when="exact"' in html and ">2026-01-31 12:00:05.123 UTC</time>" in html
    assert "when-what" not in html and "when-clock" not in html
    assert "happened · agent clock: 2026-01-31 12:00:05.123 UTC" in html  # still described


def test_an_unset_time_says_so_and_an_unknown_kind_fails() -> None:
    assert render('{% when t "used" none="never" %}', t=None) == (
        '<span class="when when-none">never</span>'
    )
    with pytest.raises(times.UnknownTimeKind):
        render('{% when t "recieved" %}', t=AT)
    with pytest.raises(times.UnknownTimeKind):
        render('{% when t "recieved" %}', t=None)
    with pytest.raises(TemplateSyntaxError):
        Template("{% when %}")


def test_the_toggle_starts_as_the_cookie_says_utc_by_default() -> None:
    factory = RequestFactory()
    source = "{% time_zone %}|{% time_zone_toggle %}"
    for cookie, zone in ((None, "utc"), ("local", "local"), ("utc", "utc"), ("<b>", "utc")):
        request = factory.get("/")
        if cookie is not None:
            request.COOKIES[times.TIME_ZONE_COOKIE] = cookie
        html = render(source, request=request)
        assert html.startswith(zone + "|")
        pressed = re.findall(r'data-tz="(\w+)" aria-pressed="(\w+)"', html)
        assert pressed == [
            ("utc", str(zone == "utc").lower()),
            ("local", str(zone == "local").lower()),
        ]
    assert render("{% time_zone %}") == "utc"  # a live fragment has no request


def test_no_template_formats_a_time_itself() -> None:
    """Every time goes through the tag: no ``|date:`` or ``|timesince`` left in templates."""
    offenders = [
        f"{path.relative_to(TEMPLATES)}: {line.strip()}"
        for path in TEMPLATES.rglob("*.html")
        if "admin" not in path.parts
        for line in path.read_text().splitlines()
        if "|date:" in line or "|timesince" in line or "|timeuntil" in line
    ]
    assert offenders == []
