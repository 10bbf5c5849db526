"""`python benchmarks/audit_generate_load.py --events 1000000 --sessions 100000`: a large,
realistic data set for the audit benchmarks. A benchmark tool, never for a real installation,
so it lives here and not among the product's management commands. It runs with the settings
DJANGO_SETTINGS_MODULE names (benchmarks.settings if unset) against the database DATABASE_URL
names; tests call `Command` through `call_command`.

It writes ~90 days of a busy installation: people in each role, runtimes (and their tokens),
`--sessions` approval sessions, approval requests whose skills are answered, denied,
expired or cancelled after realistic waits, grants at TURN, SESSION and AGENT scope —
escalated ones included (S6) — some revoked on their own, by a clear, a session revoke, an
agent-wide revoke or the idle TTL, and exactly `--events` audit events that say so, with
noise (sign-ins, failed sign-ins, tool and settings changes, MCP syncs) around them. The
simulation is in `_loadgen.py`; `--seed` makes it repeatable.

Why this tool does not write through the service layer (`audit_record()`, the approvals and
runtimes services): a million events through the one writer would be a million
transactions, hours of work, and a session, request or grant made through its service
writes its own audit event at the present time, where the history must span `--days` in the
past. Instead it builds each row in Python exactly as the services would — the audit hash is
`chain.compute_hash` over the very shape `AuditEvent.content()` returns, each linked to the
one before, continuing from the current head under the same advisory lock on PostgreSQL —
and inserts them in batches (COPY on PostgreSQL, executemany on SQLite), all in one
transaction: all or nothing. `verify_audit` passes afterwards. The model's queryset still
refuses bulk_create everywhere else; nothing in the product writes audit rows this way.

Refuses to run against a database holding people or runtimes it did not create (unless
--force), or one that already has sessions or more than a handful of events (unless
--yes, which adds another batch on top of an earlier generated one).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":  # run as a script: the project's settings, then Django
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    import django

    django.setup()

from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import Group
from django.core.management.base import CommandError, CommandParser
from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from aimon_admin.accounts.models import User
from aimon_admin.accounts.roles import Role
from aimon_admin.accounts.services import role_groups_sync
from aimon_admin.approvals.models import ApprovalItem, ApprovalRequest, Grant, Session
from aimon_admin.audit import tree
from aimon_admin.audit.chain_head import CHAIN_LOCK_KEY
from aimon_admin.audit.models import AuditEvent
from aimon_admin.core.commands import CliCommand
from aimon_admin.runtimes.models import AgentRuntime, RuntimeToken
from aimon_admin.runtimes.tokens import token_hash, token_prefix
from benchmarks._loadgen import (
    EVENT_COLUMNS,
    GRANT_COLUMNS,
    ITEM_COLUMNS,
    PREFIX,
    REQUEST_COLUMNS,
    SESSION_COLUMNS,
    People,
    Runtime,
    SessionPlan,
    Simulation,
    Sink,
)

# "Empty-ish": a freshly migrated database, or one with a few events from setting it up.
EMPTYISH_EVENTS = 1000
REAL_DATA_MESSAGE = (
    "this database holds people or runtimes that audit_generate_load did not create "
    "(names not starting with 'load-'): refusing to mix generated data into it. "
    "Use a database of its own, or --force if you really mean it."
)
NOT_EMPTY_MESSAGE = (
    "this database already has approval sessions or more than {limit} audit events: "
    "pass --yes to add generated data on top of them."
)


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise ValueError(value)
    return number


class Command(CliCommand):
    help = "Generate a large, realistic data set (audit events, sessions, requests, grants) for benchmarks."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--events", type=_positive, default=1_000_000, help="audit events to write")
        parser.add_argument("--sessions", type=_positive, default=100_000, help="approval sessions")
        parser.add_argument("--runtimes", type=_positive, default=20, help="agent runtimes")
        parser.add_argument("--days", type=_positive, default=90, help="how far back the history goes")
        parser.add_argument("--seed", type=int, default=1, help="random seed (same seed, same data)")
        parser.add_argument("--batch", type=_positive, default=20_000, help="rows per COPY or executemany")
        parser.add_argument("--yes", action="store_true", help="add to a database that already has data")
        parser.add_argument("--force", action="store_true", help="even with people or runtimes not generated")

    def handle(self, *args: Any, **options: Any) -> None:
        self._refuse_unless_allowed(yes=options["yes"], force=options["force"])
        end = timezone.now().replace(microsecond=0) - dt.timedelta(minutes=1)
        start = end - dt.timedelta(days=options["days"])
        started = time.monotonic()
        with transaction.atomic():
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    # Same lock as audit_record(): no other writer can append meanwhile.
                    cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK_KEY])
            head = AuditEvent.objects.order_by("-seq").values_list("seq", "hash").first()
            head = head or (0, "0" * 64)
            # Same seed and same starting head, same data; a batch added on top differs.
            rng = random.Random(f"{options['seed']}:{head[0]}")
            people = self._people(options["sessions"], start)
            runtimes = self._runtimes(rng, options["runtimes"], people, start)
            batch = options["batch"]
            sinks = {
                "session": Sink(Session._meta.db_table, SESSION_COLUMNS, batch),
                "event": Sink(AuditEvent._meta.db_table, EVENT_COLUMNS, batch),
                "request": Sink(ApprovalRequest._meta.db_table, REQUEST_COLUMNS, batch),
                "item": Sink(ApprovalItem._meta.db_table, ITEM_COLUMNS, batch),
                "grant": Sink(Grant._meta.db_table, GRANT_COLUMNS, batch),
            }
            sessions = self._sessions(
                rng, options["sessions"], runtimes, people, start, end, sinks["session"]
            )
            sinks["session"].flush()
            ids = {
                "grant": Grant.objects.aggregate(m=Max("id"))["m"] or 0,
                "item": ApprovalItem.objects.aggregate(m=Max("id"))["m"] or 0,
            }
            total = options["events"]

            def progress(done: int) -> None:
                rate = done / max(time.monotonic() - started, 1e-6)
                self.stdout.write(f"  events {done:,}/{total:,} ({100 * done // total}%), {rate:,.0f}/s")

            sim = Simulation(
                rng=rng,
                events=total,
                people=people,
                runtimes=runtimes,
                sessions=sessions,
                start=start,
                end=end,
                head=head,
                ids=ids,
                sinks=sinks,
                progress=progress,
            )
            setup = self._setup_events(sim, people, runtimes, start)
            if setup > total:
                raise CommandError(
                    f"--events must be at least {setup} (the people and runtimes alone need that many)"
                )
            stats = sim.run(setup_events=setup)
            # A4: the Merkle tree of the events just written, as audit_record() would have kept it.
            tree.catch_up()
            with connection.cursor() as cursor:
                for statement in connection.ops.sequence_reset_sql(
                    no_style(), [Grant, ApprovalItem, Session]
                ):
                    cursor.execute(statement)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                for model in (AuditEvent, Session, ApprovalRequest, ApprovalItem, Grant):
                    cursor.execute(f"ANALYZE {model._meta.db_table}")
        elapsed = time.monotonic() - started
        self.stdout.write(
            f"generated {stats.events:,} audit events (seq {head[0] + 1}..{sim.seq}), "
            f"{len(sessions):,} sessions, "
            f"{stats.requests:,} requests, {stats.grants:,} grants ({stats.escalated:,} escalated, "
            f"{stats.revoked:,} revoked) in {elapsed:.1f} s ({stats.events / elapsed:,.0f} events/s)"
        )
        for action, count in sorted(stats.by_action.items(), key=lambda item: -item[1]):
            self.stdout.write(f"  {action:28s} {count:>10,}")
        self.stdout.write("check it with: manage.py verify_audit")

    # --- safety ---------------------------------------------------------------------------------

    def _refuse_unless_allowed(self, *, yes: bool, force: bool) -> None:
        foreign = (
            User.objects.exclude(username__startswith=PREFIX).exists()
            or AgentRuntime.objects.exclude(name__startswith=PREFIX).exists()
        )
        if foreign and not force:
            raise CommandError(REAL_DATA_MESSAGE)
        busy = Session.objects.exists() or AuditEvent.objects.filter(seq__gt=EMPTYISH_EVENTS).exists()
        if busy and not yes:
            raise CommandError(NOT_EMPTY_MESSAGE.format(limit=EMPTYISH_EVENTS))

    # --- who and what ---------------------------------------------------------------------------

    def _people(self, sessions: int, start: dt.datetime) -> People:
        role_groups_sync()
        offset = User.objects.filter(username__startswith=PREFIX).count()
        counts = {Role.OPERATOR: 6, Role.AUDITOR: 3, Role.APPROVER: max(10, sessions // 250)}
        password = make_password(None)
        made: dict[str, list[tuple[int, str]]] = {}
        number = offset
        for role, count in counts.items():
            users = []
            for _ in range(count):
                number += 1
                users.append(
                    User(username=f"{PREFIX}{role}-{number:05d}", password=password, date_joined=start)
                )
            User.objects.bulk_create(users, batch_size=1000)
            created = list(
                User.objects.filter(username__in=[u.username for u in users]).values_list("id", "username")
            )
            group = Group.objects.get(name=role)
            User.groups.through.objects.bulk_create(
                [User.groups.through(user_id=user_id, group_id=group.pk) for user_id, _ in created]
            )
            made[role] = sorted(created)
        return People(
            operators=made[Role.OPERATOR], approvers=made[Role.APPROVER], auditors=made[Role.AUDITOR]
        )

    def _runtimes(self, rng: random.Random, count: int, people: People, start: dt.datetime) -> list[Runtime]:
        offset = AgentRuntime.objects.filter(name__startswith=PREFIX).count()
        made = []
        for index in range(count):
            owner = people.operators[index % len(people.operators)]
            runtime = AgentRuntime.objects.create(
                name=f"{PREFIX}agent-{offset + index + 1:03d}",
                description="Generated by audit_generate_load.",
                owner_id=owner[0],
            )
            plaintext = f"aimon_{rng.getrandbits(256):064x}{runtime.name}"
            RuntimeToken.objects.create(
                runtime=runtime,
                label="generated",
                prefix=token_prefix(plaintext),
                token_hash=token_hash(plaintext),
                created_by_id=owner[0],
            )
            made.append(Runtime(id=runtime.pk, name=runtime.name, owner=owner))
        AgentRuntime.objects.filter(pk__in=[r.id for r in made]).update(created_at=start, updated_at=start)
        RuntimeToken.objects.filter(runtime_id__in=[r.id for r in made]).update(created_at=start)
        return made

    def _sessions(
        self,
        rng: random.Random,
        count: int,
        runtimes: list[Runtime],
        people: People,
        start: dt.datetime,
        end: dt.datetime,
        sink: Sink,
    ) -> list[SessionPlan]:
        offset = Session.objects.count()
        first_id = (Session.objects.aggregate(m=Max("id"))["m"] or 0) + 1
        window = (end - start).total_seconds()
        starts = sorted(rng.uniform(0, window) for _ in range(count))
        # A few runtimes carry most of the traffic.
        weights = [1 / (rank + 1) for rank in range(len(runtimes))]
        plans = []
        for index, offset_seconds in enumerate(starts):
            runtime = rng.choices(runtimes, weights)[0]
            begin = start + dt.timedelta(seconds=offset_seconds)
            length = min(rng.lognormvariate(8.2, 1.0), 2 * 86400)  # median ~1 h, up to two days
            finish = min(begin + dt.timedelta(seconds=max(length, 60)), end)
            plan = SessionPlan(
                index=index,
                id=first_id + index,
                runtime=runtime,
                session_id=f"sess-{offset + index + 1:07d}-{rng.getrandbits(32):08x}",
                principal=rng.choice(people.approvers),
                start=begin,
                end=finish,
            )
            sink.add((plan.id, runtime.id, plan.session_id, plan.principal[1], begin, finish))
            plans.append(plan)
        return plans

    def _setup_events(
        self, sim: Simulation, people: People, runtimes: list[Runtime], start: dt.datetime
    ) -> int:
        actor = (None, self.cli_actor().label)
        when = start - dt.timedelta(hours=1)
        before = sim.stats.events
        for role, users in ((Role.OPERATOR, people.operators), (Role.AUDITOR, people.auditors)):
            for _, username in users:
                when = sim.emit(
                    when,
                    "USER_CREATED",
                    actor=actor,
                    channel="CLI",
                    subject_type="user",
                    subject=username,
                    details={"roles": [role], "usable_password": False},  # nosec B105 # an audit detail flag, not a password
                    request_id=sim.request_id(),
                )
        for _, username in people.approvers:
            when = sim.emit(
                when,
                "USER_CREATED",
                actor=people.operators[0],
                channel="BROWSER",
                subject_type="user",
                subject=username,
                details={"roles": [Role.APPROVER], "usable_password": False},  # nosec B105 # an audit detail flag, not a password
                request_id=sim.request_id(),
            )
        for runtime in runtimes:
            settings = {"ceiling": "MUTATING", "exempt_at_or_below": "READ_ONLY", "owner": runtime.owner[1]}
            when = sim.emit(
                when,
                "RUNTIME_CREATED",
                actor=runtime.owner,
                channel="BROWSER",
                runtime_id=runtime.id,
                subject_type="runtime",
                subject=runtime.name,
                details=settings,
                request_id=sim.request_id(),
            )
            token = RuntimeToken.objects.filter(runtime_id=runtime.id).values_list("pk", "prefix").first()
            assert token is not None  # nosec B101 # a load generator's own invariant, not a security check
            when = sim.emit(
                when,
                "TOKEN_ISSUED",
                actor=runtime.owner,
                channel="BROWSER",
                runtime_id=runtime.id,
                subject_type="token",
                subject=token[1],
                details={"token_id": token[0], "label": "generated"},
                request_id=sim.request_id(),
            )
        return sim.stats.events - before


if __name__ == "__main__":
    Command().run_from_argv([sys.argv[0], "audit_generate_load", *sys.argv[1:]])
