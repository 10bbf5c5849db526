"""People for tests: a person with roles, made through `user_create` (audited like any
other), and a browser client signed in as someone."""

from __future__ import annotations

from django.test import Client

from aimon_admin.accounts.models import User
from aimon_admin.accounts.services import user_create
from tests.conftest import PASSWORD, TEST_ACTOR


def person(username: str, *roles: str, password: str = PASSWORD) -> User:
    """A person holding `roles` (none: a person with no role at all)."""
    return user_create(username=username, password=password, roles=roles, actor=TEST_ACTOR)


def logged_in(user: User) -> Client:
    """A test client with `user` signed in (no password round trip)."""
    client = Client()
    client.force_login(user)
    return client
