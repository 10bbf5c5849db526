"""Accessibility in a real browser: axe-core on every page, the keyboard, focus, the inbox's
live region, and phone-width layouts.

Every HTML page of the product (tests/browser/sweep.py: from the URL configuration, so a
new page is swept once it has its row in the authorization matrix), with realistic data,
at 1280 px and at 390 px: no serious or critical axe-core violation of WCAG 2.x A/AA, and no
drop-down too narrow for the choice it shows. At
390 px, every page as each person who may open it: nothing scrolls sideways (wide tables
scroll inside .table-wrap) and no text is cut by an ellipsis that hides the rest for good. The inbox is
checked again after htmx swapped a new request in. Then a keyboard-only answer, a
keyboard-only confirmation, and tap sizes on the inbox, request and revoke views.

These check templates and CSS, not the database: they run once, on SQLite, and are
deselected in the PostgreSQL run of the suite (tests/browser/conftest.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import pytest
from django.urls import reverse
from playwright.sync_api import Browser, Page, expect
from pytest_django.live_server_helper import LiveServer

from aimon_admin.accounts.roles import Role
from aimon_admin.approvals.choices import GrantDecision
from aimon_admin.approvals.services import RequestInput, request_create
from aimon_admin.runtimes.services import runtime_create
from tests.accounts.factories import person
from tests.browser import sweep
from tests.browser.a11y import BLOCKING, assert_accessible, describe, violations
from tests.browser.conftest import SCREENSHOTS
from tests.browser.sweep import (
    PHONE,
    WIDTHS,
    SweepWorld,
    Visit,
    Visitors,
    cut_choices,
    cut_off,
    horizontal_overflow,
    overflowing,
    unswept_routes,
    visits_by_everyone,
)
from tests.conftest import TEST_ACTOR

# The sweep's fixtures, used here.
world = sweep.world
sweep_world = sweep.sweep_world
visitors_at = sweep.visitors_at

# A11Y_SCREENSHOTS=1 saves every swept page, at each width, for a person to look at.
SAVE_SHOTS = os.environ.get("A11Y_SCREENSHOTS") == "1"


def test_every_route_is_swept_or_left_out_by_name() -> None:
    assert unswept_routes() == []


@pytest.mark.parametrize("width", ["desktop", "phone"])
def test_every_page_passes_axe_and_fits_the_width(
    width: str, sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors]
) -> None:
    visitors = visitors_at(width)
    problems: list[str] = []
    assert len(sweep_world.visits) > 35, "the sweep lost its pages"
    for visit in sweep_world.visits:
        page = visitors.open(visit)
        found = [v for v in violations(page) if v["impact"] in BLOCKING]
        if found:
            problems.append(f"{visit.key} ({visit.path} as {visit.who}):\n{describe(found)}")
        if cut := cut_choices(page):
            problems.append(f"{visit.key} ({visit.path}) shows choices cut short: {cut}")
        if SAVE_SHOTS:
            folder = SCREENSHOTS / "sweep" / width
            folder.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", visit.key) + ".png"
            page.screenshot(path=str(folder / name), full_page=True)
    assert not problems, "\n".join(problems)


def test_every_page_fits_a_phone_for_everyone_who_may_open_it(
    sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors]
) -> None:
    """At 390 px, every page as each person who may open it (what a page holds differs by
    who looks): nothing scrolls sideways, and no text is cut by an ellipsis that gives no way
    to read it whole."""
    visitors = visitors_at("phone")
    seen = {(visit.path, visit.who) for visit in sweep_world.visits}
    visits = sweep_world.visits + [
        visit for visit in visits_by_everyone(sweep_world.world) if (visit.path, visit.who) not in seen
    ]
    assert len(visits) > len(sweep_world.visits) + 20, "the sweep lost its people"
    problems: list[str] = []
    for visit in visits:
        page = visitors.open(visit)
        overflow = horizontal_overflow(page)
        where = f"{visit.key} ({visit.path} as {visit.who})"
        if overflow > 1:
            problems.append(f"{where} is {overflow}px too wide: {overflowing(page)}")
        if cut := cut_off(page):
            problems.append(f"{where} cuts text short with no way to read it: {cut}")
    assert not problems, "\n".join(problems)


EMPTY_BEFORE_ANY_RUNTIME = (
    ("operator", "runtimes:list"),
    ("operator", "registry:worklist"),
    ("auditor", "registry:simulator"),
)
EMPTY_WITH_A_RUNTIME = (
    ("approver", "approvals:inbox"),
    ("approver", "approvals:sessions"),
    ("operator", "approvals:rules"),
    ("auditor", "approvals:rules"),
    ("operator", "registry:tool-list"),
    ("auditor", "registry:server-list"),
    ("operator", "registry:worklist"),
    ("auditor", "audit:escalations"),
    ("auditor", "audit:home"),
)


def test_empty_lists_pass_axe_and_fit_the_phone(browser: Browser, live_server: LiveServer, db: None) -> None:
    users = {
        key: person(key, role)
        for key, role in (("approver", Role.APPROVER), ("operator", Role.OPERATOR), ("auditor", Role.AUDITOR))
    }
    # At the phone's width only (the stricter of the two, with the overflow check), to keep
    # this file's time bounded; the populated pages are swept at both.
    by_width = {"phone": Visitors(browser, live_server, users, WIDTHS["phone"])}
    problems: list[str] = []

    def check(pages: tuple[tuple[str, str], ...]) -> None:
        for width, visitors in by_width.items():
            for who, name in pages:
                page = visitors.open(Visit(name, reverse(name), who))
                expect(page.locator("main .empty").first).to_be_visible()
                found = [v for v in violations(page) if v["impact"] in BLOCKING]
                if found:
                    problems.append(f"{name} empty, {width}, as {who}:\n{describe(found)}")
                if width == "phone" and horizontal_overflow(page) > 1:
                    problems.append(f"{name} empty is too wide at 390px: {overflowing(page)}")

    try:
        check(EMPTY_BEFORE_ANY_RUNTIME)
        runtime_create(name="agent-one", actor=TEST_ACTOR)
        check(EMPTY_WITH_A_RUNTIME)
    finally:
        for visitors in by_width.values():
            visitors.close()
    assert not problems, "\n".join(problems)


def test_the_inbox_stays_accessible_after_htmx_swaps_a_new_request_in_and_announces_it(
    sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors], live_server: LiveServer
) -> None:
    page = visitors_at("desktop").page("alice")
    page.goto(f"{live_server.url}{reverse('approvals:inbox')}")
    region = page.locator("#inbox")
    # The list is a polite live region: screen readers announce what arrives in it.
    expect(region).to_have_attribute("aria-live", "polite")
    before = region.locator("article.request").count()
    assert before >= 3
    # A keyboard user is on an answer button when the new request arrives.
    _tab_to(page, f'#request-{sweep_world.sessionless.pk} button[data-answer="DENY_REQUEST"]')
    focused = page.evaluate("() => document.activeElement.id")
    assert focused
    arrived, _ = request_create(
        RequestInput(
            runtime=sweep_world.world.runtime, skills=["rollback"], session_id="s-alice", principal="alice"
        )
    )
    card = page.locator(f"#request-{arrived.pk}")
    expect(card).to_be_visible()  # swapped in by the poll, without reloading
    # The region whose content changed is still the live one (the swap replaced it whole).
    expect(page.locator("#inbox")).to_have_attribute("aria-live", "polite")
    expect(page.locator("#inbox article.request")).to_have_count(before + 1)
    # The swap replaced the whole list, and focus is still on the same button.
    assert page.evaluate("() => document.activeElement.id") == focused
    assert_accessible(page, "the inbox after an htmx swap")


FOCUS_RING = """() => {
  const el = document.activeElement, s = getComputedStyle(el);
  const rgb = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); })
    .reduce((sum, v, i) => sum + v * [0.2126, 0.7152, 0.0722][i], 0);
  // The ring sits outside the element (outline-offset): against the parent's background.
  let up = el.parentElement, bg = 'rgb(255, 255, 255)';
  for (; up; up = up.parentElement) {
    const c = getComputedStyle(up).backgroundColor, parts = rgb(c);
    if (parts.length === 3 || (parts.length === 4 && parts[3] > 0)) { bg = c; break; }
  }
  const a = lum(rgb(s.outlineColor)), b = lum(rgb(bg));
  return {outline: s.outlineStyle, width: s.outlineWidth, color: s.outlineColor, against: bg,
          contrast: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05),
          visible: el.matches(':focus-visible')};
}"""


def _focus_ring(page: Page) -> dict[str, Any]:
    return page.evaluate(FOCUS_RING)


def _tab_to(page: Page, selector: str, limit: int = 80) -> None:
    """Press Tab until the focused element matches `selector` (and fail if it never does)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("(s) => document.activeElement.matches(s)", selector):
            return
    pytest.fail(f"{limit} presses of Tab never reached {selector}")


def _assert_focus_visible(page: Page) -> None:
    ring = _focus_ring(page)
    assert ring["visible"], ring
    assert ring["outline"] not in ("none", ""), ring
    assert float(ring["width"].removesuffix("px")) >= 2, ring
    # WCAG 1.4.11: a focus indicator needs 3:1 against what is next to it.
    assert ring["contrast"] >= 3, ring


def test_answer_from_the_inbox_and_confirm_a_revoke_with_the_keyboard_only(
    sweep_world: SweepWorld, visitors_at: Callable[[str], Visitors], live_server: LiveServer
) -> None:
    world = sweep_world.world
    page = visitors_at("desktop").page("alice")
    page.goto(f"{live_server.url}{reverse('approvals:inbox')}")
    # The skip link comes first, and is visible when focused.
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    _assert_focus_visible(page)
    # Tab to the fork's "Allow for this session" button, the focus ring visible on the way.
    target = f'#request-{sweep_world.fork.pk} button[data-answer="ALLOW_SESSION"]'
    _tab_to(page, target)
    _assert_focus_visible(page)
    page.keyboard.press("Enter")
    card = page.locator(f"#request-{sweep_world.fork.pk}")
    expect(card.locator(".badge-decision")).to_be_visible()
    item = sweep_world.fork.items.get(skill="deploy")
    assert (item.decision, item.answered_by) == (GrantDecision.ALLOW, world.users["alice"])
    # The pressed button is gone with the swap; focus stays in the card, not back at the top.
    # (after htmx settles: waited for, not read at once)
    page.wait_for_function(
        "(id) => !!document.activeElement.closest('#' + id)", arg=f"request-{sweep_world.fork.pk}"
    )
    _assert_focus_visible(page)
    # In a card of two skills, answering one moves focus to the other's first answer.
    first = f'#request-{sweep_world.sessionless.pk} button[data-answer="DENY_REQUEST"]'
    _tab_to(page, first)
    page.keyboard.press("Enter")
    expect(page.locator(f"#request-{sweep_world.sessionless.pk} .badge-decision")).to_have_count(1)
    card = page.locator(f"#request-{sweep_world.sessionless.pk}")
    # S13: alice may only deny a sessionless request for that request (nothing stored).
    expect(card.get_by_role("button", name="Deny this request: notify")).to_be_focused()

    # A confirmation page: Tab to its danger button and press Enter.
    grant = world.grant
    page.goto(f"{live_server.url}{reverse('approvals:grant-revoke', args=[grant.pk])}")
    _tab_to(page, ".confirm button.btn-danger")
    _assert_focus_visible(page)
    page.keyboard.press("Enter")
    page.wait_for_load_state()
    expect(page.locator(".messages .toast")).to_be_visible()
    grant.refresh_from_db()
    assert grant.revoked_at is not None
    # Cancel is reachable by keyboard too, and focus shows on it.
    page.goto(f"{live_server.url}{reverse('approvals:session-clear', args=[world.session.pk])}")
    _tab_to(page, ".confirm a.btn")
    _assert_focus_visible(page)


TAP_CONTROLS = ", ".join(
    f"main {control}:visible" for control in ("button", "a.btn", "input[type=submit]", "summary")
)


def _small_controls(page: Page) -> list[str]:
    small = []
    for control in page.locator(TAP_CONTROLS).all():
        box = control.bounding_box()
        if box and (box["width"] < 44 or box["height"] < 44):
            small.append(f"{control.inner_text().strip()!r}: {box['width']:.0f}x{box['height']:.0f}")
    return small


def test_at_phone_width_the_inbox_request_and_revoke_views_have_tap_sized_controls(
    sweep_world: SweepWorld, browser: Browser, live_server: LiveServer
) -> None:
    world = sweep_world.world
    visitors = Visitors(browser, live_server, world.users, PHONE)
    try:
        pages = {
            "inbox": ("alice", reverse("approvals:inbox")),
            "request": ("alice", reverse("approvals:request", args=[sweep_world.sessionless.pk])),
            "session": ("alice", reverse("approvals:session", args=[world.session.pk])),
            "session clear": ("alice", reverse("approvals:session-clear", args=[world.session.pk])),
            "grant revoke": ("alice", reverse("approvals:grant-revoke", args=[world.grant.pk])),
            "agent-wide": ("owner", reverse("approvals:agent", args=[world.runtime.name])),
            "agent-wide revoke": ("owner", reverse("approvals:agent-revoke", args=[world.runtime.name])),
        }
        problems = {}
        for name, (who, path) in pages.items():
            page = visitors.page(who)
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None
            assert response.status == 200, (name, path)
            assert page.locator(TAP_CONTROLS).count() > 0, f"{name}: no controls found"
            small = _small_controls(page)
            if small:
                problems[name] = small
        assert problems == {}
    finally:
        visitors.close()
