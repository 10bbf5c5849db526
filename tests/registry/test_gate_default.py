"""Which runtime the gate simulator and the worklist open on.

They opened on the alphabetically first runtime, a disabled one included. Now: the runtime
this user last chose there (while it is enabled), else the enabled runtime whose token was
used most recently, else the first enabled one by name; never a disabled one.
"""

from __future__ import annotations

import re

import pytest

from aimon_admin.accounts.models import User
from aimon_admin.registry.views import gate
from aimon_admin.runtimes.models import AgentRuntime
from aimon_admin.runtimes.services import runtime_create
from tests.accounts.factories import logged_in
from tests.conftest import TEST_ACTOR
from tests.runtimes.factories import api_client_for

pytestmark = pytest.mark.django_db

SIMULATOR = "/registry/simulator/"
WORKLIST = "/registry/simulator/worklist/"


def selected(html: str) -> list[str]:
    """The runtime options the page shows selected."""
    select = re.search(r'<select name="runtime".*?</select>', html, re.S)
    assert select is not None, "no runtime select on the page"
    return re.findall(r'<option value="([^"]+)" selected>', select.group(0))


def shown_runtime(html: str) -> str | None:
    """The runtime the results are about: "Runtime <a …>name</a>:" (simulator) or
    "Runtime name: N write tools" (worklist)."""
    found = re.search(r'Runtime (?:<a href="/runtimes/[^"]+/">([^<]+)</a>|([^<: ]+): \d+ write)', html)
    if found:
        return found.group(1) or found.group(2)
    return None


def disabled(name: str) -> AgentRuntime:
    runtime = runtime_create(name=name, actor=TEST_ACTOR)
    AgentRuntime.objects.filter(pk=runtime.pk).update(is_active=False)
    return runtime


def used_now(runtime: AgentRuntime) -> None:
    """A real API call with one of its tokens: its last use is now."""
    assert api_client_for(runtime).get("/api/v1/runtime").status_code == 200


@pytest.mark.parametrize("url", [SIMULATOR, WORKLIST])
def test_never_opens_on_a_disabled_runtime(url: str, runtime: AgentRuntime, operator: User) -> None:
    # "a-retired-one" sorts before "agent-one": the old default opened on it.
    disabled("a-retired-one")
    html = logged_in(operator).get(url).content.decode()
    assert selected(html) == ["agent-one"]
    assert shown_runtime(html) == "agent-one"
    assert '<option value="a-retired-one">a-retired-one (disabled)</option>' in html


def test_opens_on_the_runtime_used_most_recently(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:
    used_now(other_runtime)  # agent-two is at work; agent-one never called
    assert selected(logged_in(operator).get(SIMULATOR).content.decode()) == ["agent-two"]


def test_opens_on_the_runtime_this_user_chose_last_on_either_page(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User, auditor: User
) -> None:
    used_now(runtime)
    client = logged_in(operator)
    assert selected(client.get(SIMULATOR).content.decode()) == ["agent-one"]
    client.get(f"{WORKLIST}?runtime=agent-two")
    assert selected(client.get(SIMULATOR).content.decode()) == ["agent-two"]
    assert selected(client.get(WORKLIST).content.decode()) == ["agent-two"]
    # Another person's choice is theirs alone.
    assert selected(logged_in(auditor).get(SIMULATOR).content.decode()) == ["agent-one"]


def test_a_remembered_runtime_that_was_disabled_since_is_not_reopened(
    runtime: AgentRuntime, other_runtime: AgentRuntime, operator: User
) -> None:
    client = logged_in(operator)
    client.get(f"{SIMULATOR}?runtime=agent-two")
    AgentRuntime.objects.filter(pk=other_runtime.pk).update(is_active=False)
    assert selected(client.get(SIMULATOR).content.decode()) == ["agent-one"]


@pytest.mark.parametrize("url", [SIMULATOR, WORKLIST])
def test_with_every_runtime_disabled_nothing_is_simulated_until_one_is_chosen(
    url: str, operator: User
) -> None:
    disabled("only-one")
    client = logged_in(operator)
    html = client.get(url).content.decode()
    assert selected(html) == []
    assert shown_runtime(html) is None
    assert gate.NO_ENABLED_RUNTIME in html
    # Chosen explicitly, a disabled runtime can still be simulated.
    assert shown_runtime(client.get(f"{url}?runtime=only-one").content.decode()) == "only-one"
