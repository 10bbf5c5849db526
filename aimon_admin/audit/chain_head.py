"""The audit chain's head read under the chain's lock, on PostgreSQL in one round trip (A2).

Writers are serialised on an advisory lock, and the head has to be read after the lock is
held: one SELECT holding both would read the head as of its own start, before any wait for
the lock, and fork the chain. A VOLATILE function takes a fresh snapshot for each statement
it runs, so the function below locks, then reads the head as it stands once the lock is
held. SQLite needs neither: its write transactions run one at a time.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

# Any constant will do; it only has to be the same for every writer of the chain.
CHAIN_LOCK_KEY = 0x41494D4F4E  # "AIMON"
_POSTGRES_INSTALL = """
CREATE OR REPLACE FUNCTION aimon_audit_chain_head_locked(lock_key bigint)
RETURNS TABLE (seq bigint, hash varchar)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(lock_key);
    RETURN QUERY SELECT e.seq, e.hash FROM audit_auditevent AS e ORDER BY e.seq DESC LIMIT 1;
END
$$;
"""
_POSTGRES_DROP = "DROP FUNCTION IF EXISTS aimon_audit_chain_head_locked(bigint);"


def install(connection: BaseDatabaseWrapper) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_POSTGRES_INSTALL)


def drop(connection: BaseDatabaseWrapper) -> None:
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(_POSTGRES_DROP)


def locked_head(connection: BaseDatabaseWrapper) -> tuple[int, str] | None:
    """PostgreSQL: take the chain's lock (held until the transaction ends), then read the
    last event's seq and hash; None for an empty log."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT seq, hash FROM aimon_audit_chain_head_locked(%s)", [CHAIN_LOCK_KEY])
        row = cursor.fetchone()
    return (row[0], row[1]) if row else None
