"""Every form in the product answers its POST with a redirect: a form that fails its checks
goes back to its page through core.prg (post/redirect/get, what was typed and its errors
kept), a button or a confirmation goes on to the page it changed. So a reload never posts
again, and never meets "405 Not possible this way".

The forms are found in the templates; what each address answers an empty POST is the
authorization matrix's table (tests/security/test_authorization_matrix.py), run there for
every caller. Each app's view tests post an invalid form and reload its page.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.security.test_authorization_matrix import EXPECTED, OK

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
POST_FORM = re.compile(r"<form\b[^>]*\bmethod=\"post\"[^>]*>", re.IGNORECASE)
ACTION_URL = re.compile(r"\baction=\"\{% url '([^']+)'")
# Forms whose address is not written as {% url %} in their tag: a variable set above them,
# or none at all (the form posts to the address of the page it is on).
ADDRESS_OF = {
    "accounts/login.html": {"accounts:login"},
    "accounts/person_create.html": {"accounts:person-create"},
    "accounts/person_link.html": {"accounts:person-link"},
    "accounts/set_password.html": {"accounts:set-password"},
    "runtimes/create.html": {"runtimes:create"},
    "runtimes/token_revoke.html": {"runtimes:token-revoke"},
    "registry/server_form.html": {"registry:server-create", "registry:server-edit"},
    "registry/server_detail.html": {"registry:server-sync"},
    "registry/review.html": {"registry:tool-review"},
    # One form for a new rule of either kind: its address is the kind's.
    "approvals/rule_add.html": {"approvals:rule-create", "approvals:tool-rule-create"},
    # The confirmation pages: each view that shows one takes its POST.
    "approvals/confirm.html": {
        "approvals:dismiss",
        "approvals:session-clear",
        "approvals:session-revoke",
        "approvals:grant-revoke",
        "approvals:agent-revoke",
        "approvals:rule-delete",
        "approvals:tool-rule-delete",
    },
    "core/confirm.html": {
        "accounts:person-deactivate",
        "accounts:unlock",
        "runtimes:disable",
        "runtimes:retire",
        "registry:server-retire",
        "notifications:channel-remove",
        "notifications:webhook-rotate",
    },
}
# A set-password link that never was: its page says so whatever is posted (nothing to keep).
ANSWERS_WITH_A_PAGE = {"accounts:set-password"}


def forms_in_templates() -> dict[str, set[str]]:
    """Each template with a POST form, and the addresses its forms post to."""
    found: dict[str, set[str]] = {}
    for template in sorted(TEMPLATES.rglob("*.html")):
        name = str(template.relative_to(TEMPLATES))
        for tag in POST_FORM.findall(template.read_text()):
            action = ACTION_URL.search(tag)
            if action is not None:
                found.setdefault(name, set()).add(action.group(1))
            else:
                assert name in ADDRESS_OF, f"{name}: a POST form whose address this test does not know: {tag}"
                found.setdefault(name, set()).update(ADDRESS_OF[name])
    return found


def test_the_scan_finds_the_forms_it_should() -> None:
    found = forms_in_templates()
    assert "accounts:login" in found["accounts/login.html"]
    assert "approvals:rule-create" in found["approvals/rule_add.html"]
    assert {"registry:server-create", "registry:server-edit"} <= found["registry/server_form.html"]
    assert len(set().union(*found.values())) > 30


def test_every_form_answers_its_post_with_a_redirect() -> None:
    # An invalid form answered with a page is posted again on a reload.
    problems = []
    for template, addresses in forms_in_templates().items():
        for address in sorted(addresses):
            expect = EXPECTED.get(address)
            if expect is None:
                problems.append(f"{template}: {address} is not in the authorization matrix")
                continue
            pages = sorted(caller for caller, outcome in expect.post.items() if outcome == OK)
            if pages and address not in ANSWERS_WITH_A_PAGE:
                problems.append(f"{template}: a POST to {address} answers {', '.join(pages)} with a page")
    assert problems == []


def test_every_confirmation_named_here_still_has_its_form() -> None:
    # The table above follows the views: an address that no longer shows a confirmation
    # page would keep the test green for nothing.
    for template, addresses in ADDRESS_OF.items():
        assert POST_FORM.search((TEMPLATES / template).read_text()), template
        for address in addresses:
            assert address in EXPECTED, address
