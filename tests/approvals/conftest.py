"""Fixtures for the approval tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aimon_admin.approvals import rules


@pytest.fixture(autouse=True)
def _fresh_rule_index() -> Iterator[None]:
    """Each test starts without the process's cached rule index: a test's rules are rolled
    back with it, and the next test must not be judged by them."""
    rules.rule_index_reset()
    yield
    rules.rule_index_reset()
