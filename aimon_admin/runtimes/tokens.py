"""Runtime token format and hashing, as pure functions.

A token is ``aimon_`` followed by 43 URL-safe characters (256 random bits). Tokens are
high-entropy secrets, so one SHA-256 suffices to store them: unlike passwords they
cannot be guessed from a dictionary, and the lookup stays one indexed query.
"""

from __future__ import annotations

import hashlib
import secrets

TOKEN_PREFIX = "aimon_"  # noqa: S105 - not a secret # nosec B105
PREFIX_SHOWN = 12  # "aimon_" and six characters: enough to tell tokens apart


def token_generate() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def token_prefix(token: str) -> str:
    return token[:PREFIX_SHOWN]


def token_looks_valid(token: str) -> bool:
    return token.startswith(TOKEN_PREFIX) and 20 <= len(token) <= 200 and token.isascii()
