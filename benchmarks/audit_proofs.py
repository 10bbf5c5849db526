"""The audit log's Merkle tree, proofs and offline verifier at scale, on PostgreSQL (A4).

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/audit_proofs.py --events 3000000
    .venv/bin/python benchmarks/audit_proofs.py --db aimon_bench_proofs --events 10000000 --log-pages

It uses a database of its own (`--db`, created if missing, never anyone else's), filled once
by benchmarks/audit_generate_load.py (which builds the tree as audit_record() would), and
prints, never asserts:

* appending an event: audit_record() with the tree and with the tree's append taken out,
  alternating rounds, each append in a transaction rolled back (so the commit's fsync, the
  same for both, is left out and the tree's share is at its largest); then with the tree and
  committed, for the absolute figure;
* an inclusion proof and a consistency proof at the full size (median of random events);
* a whole export of the first `--export-events` events written with the checkpoint it ends
  at (a checkpoint of that size, signed with a key of the benchmark's own), then verified by
  clients/verifier/aimon_verify_audit.py in a process of its own: wall time and peak memory,
  and the same for a tenth of it (constant memory: the two peaks should match);
* with --log-pages, the log's first page and page 1,000 (benchmarks/audit_log.py's
  measurement, run against this database).
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_PG = "postgres://postgres@127.0.0.1:5432/postgres"
# The log's first page at this size, any single filter: the same as at 1,000,000 events and
# under (each page is an index range, whatever the log's length).
LOG_PAGE_BUDGET_MS = 25.0


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_append(rounds: int, per_round: int) -> None:
    from django.db import transaction

    from aimon_admin.audit import services
    from aimon_admin.audit.choices import AuditAction
    from aimon_admin.core.actors import Actor

    actor = Actor.system("benchmark")
    real_append = services.tree.append

    def one_round(with_tree: bool, commit: bool) -> float:
        services.tree.append = real_append if with_tree else (lambda *_: None)
        times = []
        try:
            for number in range(per_round):
                started = time.perf_counter()
                with transaction.atomic():
                    services.audit_record(
                        action=AuditAction.RUNTIME_SETTINGS_CHANGED,
                        actor=actor,
                        subject_type="benchmark",
                        subject=f"append {number}",
                        details={"number": number, "changed": ["ceiling"]},
                    )
                    if not commit:
                        transaction.set_rollback(True)
                times.append(time.perf_counter() - started)
        finally:
            services.tree.append = real_append
        return statistics.median(times)

    one_round(True, False)  # warm-up
    for commit in (False, True):
        with_tree, without = [], []
        for _ in range(rounds):
            with_tree.append(one_round(True, commit))
            without.append(one_round(False, commit))
        ratios = [a / b for a, b in zip(with_tree, without, strict=True)]
        print(
            f"append, {'committed' if commit else 'rolled back'}: "
            f"with the tree {_median_ms(with_tree):.3f} ms, "
            f"without {_median_ms(without):.3f} ms, ratio {statistics.median(ratios):.3f} "
            f"(median of {rounds} alternating rounds of {per_round})",
            flush=True,
        )
    repair_tree()


def repair_tree() -> None:
    """The committed rounds without the tree left events without leaves: rebuild the tree
    from the first of them (this benchmark's own database only)."""
    from django.db import connection, transaction

    from aimon_admin.audit import tree, triggers
    from aimon_admin.audit.models import AuditEvent, AuditTreeNode

    with transaction.atomic():
        first_missing = tree.size()
        for seq in (
            AuditEvent.objects.filter(subject_type="benchmark").order_by("seq").values_list("seq", flat=True)
        ):
            if not AuditTreeNode.objects.filter(level=0, position=seq - 1).exists():
                first_missing = seq - 1
                break
        triggers.drop(connection, tables=(triggers.TREE_TABLE,))
        with connection.cursor() as cursor:
            cursor.execute(
                "DELETE FROM audit_audittreenode WHERE (position + 1) * (1::bigint << level) > %s",
                [first_missing],
            )
        triggers.install(connection)
        size = tree.catch_up()
    print(f"(tree rebuilt from leaf {first_missing:,}: {size:,} events)", flush=True)


def bench_proofs(samples: int) -> int:
    from aimon_admin.audit import tree

    size = tree.size()
    rng = random.Random(7)
    inclusion, consistency = [], []
    for _ in range(samples):
        seq = rng.randint(1, size)
        started = time.perf_counter()
        tree.inclusion_proof(seq, size)
        inclusion.append(time.perf_counter() - started)
        started = time.perf_counter()
        tree.consistency_proof(seq, size)
        consistency.append(time.perf_counter() - started)
    inclusion.sort()
    print(
        f"inclusion proof at {size:,} events: median {_median_ms(inclusion):.3f} ms, "
        f"p95 {inclusion[int(0.95 * (len(inclusion) - 1))] * 1000:.3f} ms; "
        f"consistency proof median {_median_ms(consistency):.3f} ms ({samples} random events)"
    )
    return size


def write_export(events: int, path: Path, key: object) -> None:
    import base64

    from django.utils import timezone

    from aimon_admin.audit import checkpoints, proofs, signing, tree
    from aimon_admin.audit.models import AuditCheckpoint, AuditEvent, format_timestamp

    document = {
        "format": checkpoints.FORMAT,
        "log_id": AuditEvent.objects.values_list("hash", flat=True).get(seq=1),
        "tree_size": events,
        "root_hash": tree.root(events).hex(),
        "time": format_timestamp(timezone.now()),
        "previous": "",
        "key_id": signing.key_id(key.public_key()),  # type: ignore[attr-defined]
    }
    document["signature"] = base64.b64encode(key.sign(checkpoints.signed_message(document))).decode()  # type: ignore[attr-defined]
    document["consistency"] = []
    checkpoint = AuditCheckpoint(tree_size=events, document=document)
    started = time.perf_counter()
    with path.open("w", encoding="utf-8") as handle:
        for chunk in proofs.chunks(checkpoint, proofs.span_for(checkpoint, None, None, False)):
            handle.write(chunk)
    print(
        f"export of {events:,} events written in {time.perf_counter() - started:.1f} s "
        f"({path.stat().st_size / 1e6:,.0f} MB)"
    )


def verify_offline(path: Path, public: Path) -> None:
    verifier = ROOT / "clients" / "verifier" / "aimon_verify_audit.py"
    code = (
        "import resource, runpy, sys, time; started = time.perf_counter(); sys.argv = sys.argv[1:]\n"
        "try:\n    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "except SystemExit as exit:\n    status = exit.code\n"
        "peak = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]\n"
        "print(f'wall {time.perf_counter() - started:.1f} s, '\n"
        "      f'peak memory {int(peak) / 1024:.0f} MB, exit {status}')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(verifier), "--key", str(public), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    print(f"verifier on {path.name}: {result.stdout.strip()} {result.stderr.strip()}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default=os.environ.get("AIMON_BENCH_POSTGRES_URL", DEFAULT_PG))
    parser.add_argument("--db", default="aimon_bench_proofs")
    parser.add_argument("--events", type=int, default=3_000_000)
    parser.add_argument("--export-events", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=200)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--log-pages", action="store_true", help="also time the log's pages")
    parser.add_argument("--workdir", type=Path, default=ROOT / "test-artifacts" / "bench-proofs")
    args = parser.parse_args()

    from benchmarks import audit_log

    audit_log.BENCH_DB, audit_log.EVENTS, audit_log.SESSIONS = args.db, args.events, args.events // 10
    database_url = audit_log.ensure_database(args.base_url, regenerate=False)
    audit_log.ensure_data(database_url)
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "aimon_admin.settings.test"
    os.environ.pop("REDIS_URL", None)
    import django

    django.setup()
    from aimon_admin.audit import signing

    bench_append(args.rounds, args.per_round)
    bench_proofs(args.samples)
    args.workdir.mkdir(parents=True, exist_ok=True)
    key_path = args.workdir / "bench-key.pem"
    key = signing.read_private_key(key_path) if key_path.exists() else signing.create_key(key_path)
    public = args.workdir / "bench-public.pem"
    public.write_text(signing.public_pem(key.public_key()))
    for events in (args.export_events // 10, args.export_events):
        path = args.workdir / f"export-{events}.jsonl"
        write_export(events, path, key)
        verify_offline(path, public)
    if args.log_pages:
        sys.argv = ["audit_log.py", "--base-url", args.base_url, "--budget-ms", str(LOG_PAGE_BUDGET_MS)]
        return audit_log.main()
    print(
        f"(peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
