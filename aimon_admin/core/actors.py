"""Who did something, as the audit log records it.

A change is made by a person (browser or command line with a user), by an agent
runtime (through its API token) or by the system itself (a command run without a user,
a background task). Services take an `Actor` so each audit event names the right one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


# core is the bottom layer and imports no app: these protocols describe what an Actor needs of
# accounts.User and runtimes.AgentRuntime without importing either (tests/test_layers.py).
class User(Protocol):
    pk: Any

    def get_username(self) -> str: ...


class AgentRuntime(Protocol):
    pk: Any
    name: str


@dataclass(frozen=True)
class Actor:
    user: User | None
    runtime: AgentRuntime | None
    label: str

    @classmethod
    def for_user(cls, user: User) -> Actor:
        return cls(user=user, runtime=None, label=user.get_username())

    @classmethod
    def for_runtime(cls, runtime: AgentRuntime) -> Actor:
        return cls(user=None, runtime=runtime, label=f"runtime:{runtime.name}")

    @classmethod
    def system(cls, label: str) -> Actor:
        return cls(user=None, runtime=None, label=label)
