"""Regenerate the README's screenshots (`make screenshots`): docs/screenshots/*.png.

On a fresh temporary SQLite database (never db.sqlite3, never the .demo-credentials.json
beside it): migrate, load the demo data, start uvicorn on a free port as `make run` does,
then drive Debian's Chromium with Playwright through the pages as each kind of user would:
the inbox, a request with the reach of "Always allow for this agent", the sessionless
request's escalation warning (then answered "Allow for this session", which makes the
escalation the auditor's page lists), the session page and its revoke confirmation, the
agent-wide page and its confirmation, the tools page and the escalated grants; the inbox and
a request also at phone width. Then the pages of the homes: each role's home, the navigation
(the sidebar at 1280 px, the phone's Menu open), a tool request's own page (Bash asking to
run git push origin main, its subject highlighted, the server's claims beside the resolved
axes, the pattern choice beside the buttons, and its timeline), People, Locked sign-ins and
the dense audit log. Last, the "after" half of docs/screenshots/before-after/ (FIXED): a tool
request's card and the audit log at 390 px, the tools page searched by name, adding a rule,
and Help as an approver and as an auditor open it. The server and the temporary database are
removed at the end, whatever happens.

Installs nothing: it needs what `make install-dev` gives (Playwright's Python package) and
Chromium at /usr/bin/chromium (apt-get install chromium); without either it says so and
exits 2.

    python scripts/screenshots.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}, "device_scale_factor": 1}
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "device_scale_factor": 1,
    "is_mobile": True,
    "has_touch": True,
}
# Desktop pages are kept whole (no taller than this); phone shots are one screen, as seen.
MAX_HEIGHT = 2400
TIMEOUT_MS = 15_000
SERVER_START_SECONDS = 60
# Every file this writes, in the order taken (the test and the README rely on the names).
SHOTS = {
    "inbox.png": DESKTOP,
    "inbox-phone.png": PHONE,
    "request-phone.png": PHONE,
    "request-reach.png": DESKTOP,
    "request-sessionless.png": DESKTOP,
    "session.png": DESKTOP,
    "session-revoke-confirm.png": DESKTOP,
    "agent-wide.png": DESKTOP,
    "agent-wide-revoke-confirm.png": DESKTOP,
    "tools.png": DESKTOP,
    "escalated-grants.png": DESKTOP,
    "notifications.png": DESKTOP,
    "home-operator.png": DESKTOP,
    "home-approver.png": DESKTOP,
    "home-auditor.png": DESKTOP,
    "nav-sidebar.png": DESKTOP,
    "nav-phone-menu.png": PHONE,
    "tool-request.png": DESKTOP,
    "people.png": DESKTOP,
    "locked-sign-ins.png": DESKTOP,
    "audit-log.png": DESKTOP,
}
# Pages a round of fixes changed, taken for docs/screenshots/before-after/ as `<stem>-after.png`
# (their `-before.png` twins were taken once, at the commit before those fixes, and are kept):
# stem -> the width it is taken at.
FIXED: dict[str, dict[str, Any]] = {
    "tool-card-phone": PHONE,  # a tool request's card at 390 px, the inbox showing tool calls only
    "audit-log-phone": PHONE,  # the audit log at 390 px
    "tools": DESKTOP,  # the tools page, searched by name
    "rules": DESKTOP,  # adding a rule, on its own page
    "help-approver": DESKTOP,  # Help as an approver opens it
    "help-auditor": DESKTOP,  # Help as an auditor opens it
}
SHOTS.update({f"before-after/{stem}-after.png": device for stem, device in FIXED.items()})
RULE_ADD = "/approvals/rules/skills/add/"  # where a skill rule is added
# Shots of one screen at desktop width (what fits 1280 x 800, as a person sees it first).
SCREEN_ONLY = {"nav-sidebar.png"}
DEMO_RUNTIME = "demo-agent"
DEMO_SESSION = "demo-session-1"
SESSIONLESS_SKILL = "nightly-backup"

# The demo data, loaded in a child process whose settings point the credentials file into
# the temporary folder (the command otherwise rewrites the developer's own file).
LOAD_DEMO = """
import sys, django
django.setup()
from django.conf import settings
from django.core.management import call_command
from pathlib import Path
settings.DEMO_CREDENTIALS_FILE = Path(sys.argv[1])
call_command("migrate", interactive=False, verbosity=0)
call_command("demo_data", url=sys.argv[2], verbosity=0)
"""


class Problem(Exception):
    """Something this machine lacks or that went wrong, said in one line."""


def clean_env(database: Path) -> dict[str, str]:
    """This process's environment without any database, Redis, Celery or Django setting of
    the caller's: the embedded default, on the temporary database."""
    prefixes = ("DATABASE_", "REDIS_", "CELERY_", "DJANGO_", "AIMON_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update(
        DJANGO_SETTINGS_MODULE="aimon_admin.settings.base",
        AIMON_DEMO="1",
        DATABASE_URL=f"sqlite:///{database}",
        # A key of its own for the stored secrets of the temporary database (never the demo's).
        AIMON_SECRETS_KEY=Fernet.generate_key().decode(),
        PYTHONPATH=str(ROOT),
    )
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def server(env: dict[str, str], port: int, log: Path) -> Iterator[str]:
    """uvicorn on the demo database, as `make run` starts it; stopped on the way out."""
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "aimon_admin.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--lifespan",
                "off",
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + SERVER_START_SECONDS
            while True:
                if process.poll() is not None:
                    raise Problem(f"the server exited with {process.returncode}:\n{log.read_text()[-2000:]}")
                try:
                    with urllib.request.urlopen(f"{url}/accounts/login/", timeout=2):  # noqa: S310 - our server
                        break
                except (urllib.error.URLError, OSError):
                    if time.monotonic() > deadline:
                        raise Problem(
                            f"the server did not answer on {url} within {SERVER_START_SECONDS} s"
                        ) from None
                    time.sleep(0.2)
            yield url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def take(page: Any, out: Path, name: str, device: dict[str, Any] | None = None) -> None:
    """Write one screenshot: a desktop page whole (up to MAX_HEIGHT), a phone one screen.
    `device`: the width of a shot SHOTS does not name (a before-after twin)."""
    device = device or SHOTS[name]
    path = out / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if device is PHONE or name in SCREEN_ONLY:
        page.screenshot(path=str(path))
        return
    height = min(page.evaluate("document.documentElement.scrollHeight"), MAX_HEIGHT)
    width = device["viewport"]["width"]
    page.screenshot(path=str(path), full_page=True, clip={"x": 0, "y": 0, "width": width, "height": height})


def log_in(page: Any, url: str, username: str, password: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.locator("input[name=username]").fill(username)
    page.locator("input[name=password]").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{url}/")
    # Move the pointer off the page, so no shot shows a hover it did not ask for.
    page.mouse.move(0, 0)


def request_link(page: Any, text: str) -> Any:
    """The card whose reason contains `text`, in the inbox."""
    return page.locator("#inbox article.request", has_text=text)


def tour(browser: Any, url: str, credentials: dict[str, str], out: Path) -> None:
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)
    contexts: dict[str, Any] = {}
    for name, options in (("desktop", DESKTOP), ("phone", PHONE)):
        context = browser.new_context(**options)
        context.set_default_timeout(TIMEOUT_MS)
        contexts[name] = context
    desktop, phone = contexts["desktop"].new_page(), contexts["phone"].new_page()
    # At desktop width the operator, who owns the demo runtime: every request reaches them,
    # "Always allow for this agent" too (S13). On the phone the approver, the end user whose
    # session asked: the session's request and its sub-agent's.
    log_in(desktop, url, "operator", credentials["operator"])
    log_in(phone, url, "approver", credentials["approver"])

    # End user: the inbox, at both widths.
    for page, name, count in ((desktop, "inbox.png", 4), (phone, "inbox-phone.png", 3)):
        page.goto(f"{url}/approvals/")
        expect(page.locator("#inbox article.request")).to_have_count(count)
        take(page, out, name)

    # A request at phone width, then the same at desktop width with the reach of
    # "Always allow for this agent" under the pointer.
    card = request_link(phone, "Deploy the release branch")
    card.get_by_role("link", name=DEMO_RUNTIME).click()
    expect(phone.get_by_role("button", name="Allow for this session: deploy-staging")).to_be_visible()
    take(phone, out, "request-phone.png")
    desktop.goto(phone.url)
    allow_agent = desktop.locator("article.request button[data-answer=ALLOW_AGENT]").last
    allow_agent.hover()
    expect(desktop.locator("article.request .reach")).to_contain_text("reaches every session")
    take(desktop, out, "request-reach.png")
    request_url = desktop.url

    # The sessionless request: its warning, then answered "Allow for this session" as a user
    # would, which writes it agent-wide (an escalation, S6).
    desktop.goto(f"{url}/approvals/")
    request_link(desktop, "no session").get_by_role("link", name=DEMO_RUNTIME).click()
    sessionless = desktop.locator("article.request")
    expect(sessionless.locator(".note-warn, [id$=-escalation]").first).to_contain_text("agent-wide")
    desktop.mouse.move(0, 0)
    take(desktop, out, "request-sessionless.png")
    sessionless.get_by_role("button", name=f"Allow for this session: {SESSIONLESS_SKILL}").click()
    expect(sessionless).to_contain_text(f"Answered: {SESSIONLESS_SKILL}.")

    # The session request answered too, so the revoke views have something to revoke.
    desktop.goto(request_url)
    card = desktop.locator("article.request")
    card.get_by_role("button", name="Allow for this session: deploy-staging").click()
    expect(card).to_contain_text("Answered: deploy-staging.")
    card.get_by_role("button", name="Always allow for this agent: notify-team").click()
    expect(card).to_contain_text("Answered: notify-team.")

    # The revoke views: the session page and its confirmation, the agent-wide page and its.
    desktop.goto(f"{url}/approvals/sessions/")
    desktop.get_by_role("link", name=DEMO_SESSION).click()
    expect(desktop.get_by_role("link", name="Revoke session approvals")).to_be_visible()
    desktop.mouse.move(0, 0)
    take(desktop, out, "session.png")
    desktop.get_by_role("link", name="Revoke session approvals").click()
    expect(desktop.get_by_role("button", name="Revoke session approvals")).to_be_visible()
    desktop.mouse.move(0, 0)
    take(desktop, out, "session-revoke-confirm.png")
    desktop.goto(f"{url}/approvals/agents/{DEMO_RUNTIME}/")
    expect(desktop.locator("main")).to_contain_text(SESSIONLESS_SKILL)
    take(desktop, out, "agent-wide.png")
    desktop.get_by_role("link", name="Revoke agent-wide").click()
    expect(desktop.get_by_role("button", name="Revoke agent-wide")).to_be_visible()
    desktop.mouse.move(0, 0)
    take(desktop, out, "agent-wide-revoke-confirm.png")

    # Operator: the tools page.
    desktop.goto(f"{url}/registry/tools/")
    expect(desktop.get_by_role("link", name="Bash", exact=True).first).to_be_visible()
    take(desktop, out, "tools.png")

    # Operator: their own notification channels, a self-hosted ntfy topic and an email address.
    desktop.goto(f"{url}/notifications/")
    for kind, name, target in (
        ("APPRISE", "phone", "ntfy://127.0.0.1:8090/aimon-operator"),
        ("EMAIL", "work email", "operator@example.com"),
    ):
        desktop.get_by_label("Kind").select_option(kind)
        desktop.get_by_label("Name").fill(name)
        desktop.get_by_label("Address or URL").fill(target)
        desktop.get_by_role("button", name="Add channel").click()
        expect(desktop.locator("#channels")).to_contain_text(name)
    desktop.goto(f"{url}/notifications/")  # without the toast
    desktop.mouse.move(0, 0)
    take(desktop, out, "notifications.png")

    # Auditor: the escalated grants, from the audit log's overview as an auditor finds them.
    contexts["auditor"] = browser.new_context(**DESKTOP)
    contexts["auditor"].set_default_timeout(TIMEOUT_MS)
    auditor = contexts["auditor"].new_page()
    log_in(auditor, url, "auditor", credentials["auditor"])
    auditor.get_by_role("link", name="Audit log").click()
    auditor.get_by_role("link", name="See escalated grants").click()
    expect(auditor.locator("main")).to_contain_text(SESSIONLESS_SKILL)
    auditor.mouse.move(0, 0)
    take(auditor, out, "escalated-grants.png")

    # Auditor: the audit log, dense (one line per event), and their home.
    auditor.goto(f"{url}/audit/events/")
    expect(auditor.locator("table.audit-log")).to_be_visible()
    auditor.mouse.move(0, 0)
    take(auditor, out, "audit-log.png")
    auditor.goto(f"{url}/")
    auditor.mouse.move(0, 0)
    take(auditor, out, "home-auditor.png")

    tour_more(browser, url, credentials, out, desktop, phone, contexts)
    tour_fixed(browser, url, credentials, out)

    for context in contexts.values():
        context.close()


def tour_more(
    browser: Any, url: str, credentials: dict[str, str], out: Path, desktop: Any, phone: Any, contexts: dict
) -> None:
    """The homes and what came with them: each role's home, the navigation at both widths, the
    tool request's own page, and the administration screens (people, locked sign-ins)."""
    from playwright.sync_api import expect

    # Someone fails to sign in five times as "intruder": a locked sign-in to list (the lock
    # is of that name from this address only, so the tour's own sign-ins go on).
    contexts["stranger"] = browser.new_context(**DESKTOP)
    stranger = contexts["stranger"].new_page()
    for _ in range(5):
        stranger.goto(f"{url}/accounts/login/")
        stranger.locator("input[name=username]").fill("intruder")
        stranger.locator("input[name=password]").fill("not the password")
        stranger.get_by_role("button", name="Sign in").click()
        stranger.wait_for_load_state()

    # Operator: the home, the sidebar at 1280 px, people and locked sign-ins.
    desktop.goto(f"{url}/")
    desktop.mouse.move(0, 0)
    take(desktop, out, "home-operator.png")
    desktop.goto(f"{url}/approvals/rules/")
    expect(desktop.locator("nav[aria-label=Main]")).to_be_visible()
    desktop.mouse.move(0, 0)
    take(desktop, out, "nav-sidebar.png")
    desktop.goto(f"{url}/accounts/people/")
    expect(desktop.locator("main")).to_contain_text("auditor")
    desktop.mouse.move(0, 0)
    take(desktop, out, "people.png")
    desktop.goto(f"{url}/accounts/sign-ins/locked/")
    expect(desktop.locator("main")).to_contain_text("intruder")
    desktop.mouse.move(0, 0)
    take(desktop, out, "locked-sign-ins.png")

    # The tool request's own page, as its approver opens it from a notification's link.
    contexts["approver"] = browser.new_context(**DESKTOP)
    contexts["approver"].set_default_timeout(TIMEOUT_MS)
    approver = contexts["approver"].new_page()
    log_in(approver, url, "approver", credentials["approver"])
    approver.mouse.move(0, 0)
    take(approver, out, "home-approver.png")
    approver.goto(f"{url}/approvals/")
    request_link(approver, "Push the release branch").get_by_role("link", name=DEMO_RUNTIME).click()
    expect(approver.locator("mark[data-testid=subject]")).to_have_text("git push origin main")
    expect(approver.locator("[data-testid=timeline]")).to_contain_text("opened this page")
    approver.mouse.move(0, 0)
    take(approver, out, "tool-request.png")

    # The phone's navigation, its Menu open.
    phone.goto(f"{url}/")
    phone.get_by_role("button", name="Menu").click()
    expect(phone.locator("nav[aria-label=Main]")).to_be_visible()
    take(phone, out, "nav-phone-menu.png")


def to_top(element: Any) -> None:
    """Scroll the page so that `element` starts at the top of the screen."""
    element.evaluate("e => window.scrollTo(0, e.getBoundingClientRect().top + window.scrollY - 8)")


def tour_fixed(browser: Any, url: str, credentials: dict[str, str], out: Path, when: str = "after") -> None:
    """The pages of FIXED, each as `before-after/<stem>-<when>.png`, in a context of its own
    width per person. The same steps read the product before those fixes (the before-after
    twins were taken with them at that commit), so they ask only what both versions have."""
    from playwright.sync_api import expect

    opened: list[Any] = []

    def signed_in(username: str, device: dict[str, Any]) -> Any:
        context = browser.new_context(**device)
        context.set_default_timeout(TIMEOUT_MS)
        opened.append(context)
        page = context.new_page()
        log_in(page, url, username, credentials[username])
        return page

    def shoot(page: Any, stem: str) -> None:
        page.mouse.move(0, 0)
        take(page, out, f"before-after/{stem}-{when}.png", FIXED[stem])

    try:
        # The approver's tool request, its card at the top of a phone's screen.
        phone = signed_in("approver", PHONE)
        phone.goto(f"{url}/approvals/?kind=TOOL")
        card = request_link(phone, "Push the release branch")
        expect(card).to_be_visible()
        to_top(card)
        shoot(phone, "tool-card-phone")

        # The auditor's audit log on a phone, then Help as they open it.
        auditor = signed_in("auditor", PHONE)
        auditor.goto(f"{url}/audit/events/")
        expect(auditor).to_have_url(f"{url}/audit/events/")
        events = auditor.locator("table.audit-log")
        expect(events).to_be_visible()
        to_top(events)  # the events, below the filters
        shoot(auditor, "audit-log-phone")
        for username in ("approver", "auditor"):
            reader = signed_in(username, DESKTOP)
            reader.goto(f"{url}/help/")
            expect(reader).to_have_url(f"{url}/help/")
            expect(reader.locator("main h1")).to_be_visible()
            shoot(reader, f"help-{username}")

        # The operator: the tools page searched by name, and adding a rule.
        operator = signed_in("operator", DESKTOP)
        operator.goto(f"{url}/registry/tools/?name=bash")
        expect(operator.get_by_role("link", name="Bash", exact=True).first).to_be_visible()
        shoot(operator, "tools")
        operator.goto(f"{url}{RULE_ADD}")
        expect(operator).to_have_url(f"{url}{RULE_ADD}")
        expect(operator.locator("main form").first).to_be_visible()
        shoot(operator, "rules")
    finally:
        for context in opened:
            context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots", help="where the PNGs go")
    args = parser.parse_args(argv)
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        print("screenshots: Playwright is not installed; run `make install-dev` first.", file=sys.stderr)
        return 2
    if not CHROMIUM.exists():
        print(
            f"screenshots: Chromium is not installed at {CHROMIUM} (apt-get install chromium).",
            file=sys.stderr,
        )
        return 2

    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="aimon-screenshots-"))
    try:
        env = clean_env(work / "db.sqlite3")
        port = free_port()
        credentials_file = work / "demo-credentials.json"
        subprocess.run(
            [sys.executable, "-c", LOAD_DEMO, str(credentials_file), f"http://127.0.0.1:{port}/"],
            cwd=ROOT,
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        credentials = json.loads(credentials_file.read_text())
        with server(env, port, work / "server.log") as url, sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
            )
            try:
                tour(browser, url, credentials, out)
            finally:
                browser.close()
    except subprocess.CalledProcessError as exc:
        print(
            f"screenshots: loading the demo data failed (exit {exc.returncode}); see above.", file=sys.stderr
        )
        return 1
    except (Problem, Error) as exc:
        print(f"screenshots: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for name in SHOTS:
        print(f"{out / name}  {(out / name).stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
