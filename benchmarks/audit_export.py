"""Streaming the whole audit log as JSON Lines (/audit/events/export.jsonl): time and peak memory.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/audit_export.py
    .venv/bin/python benchmarks/audit_export.py --no-verify   # skip checking the file afterwards

It uses the same database as benchmarks/audit_log.py (`aimon_bench_audit`, 1,000,000 events,
created and generated there if missing). Each export runs in a child process of its own —
Django set up, an auditor logged in, then the response streamed through Django's async test
client (the ASGI path the product serves it on) and written to a file — so the peak RSS
it reports (VmHWM, before the export and after it) is the export's own and nobody else's.
A filtered export (level=WARNING, a small share of the log) runs first: if streaming holds
memory constant, the full export peaks no higher than the small one.

The file of the full export is then verified with `manage.py verify_audit --file`, so the
figure is for an export that checks out end to end.

Targets: the full export of 1M events in under a minute, at constant memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.audit_log import BENCH_DB, DEFAULT_PG, ensure_data, ensure_database  # noqa: E402

TARGET_SECONDS = 60.0


def memory_kib() -> dict[str, int]:
    """This process's resident set now (VmRSS) and its peak so far (VmHWM), in KiB."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def child(query: str, out_path: str) -> None:
    """Export once through the ASGI path and print a JSON line of figures."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "aimon_admin.settings.test"
    import django

    django.setup()
    from django.conf import settings
    from django.test import AsyncClient

    from aimon_admin.accounts.models import User

    settings.ALLOWED_HOSTS = ["testserver"]
    auditor = User.objects.filter(username__startswith="load-auditor-").order_by("id").first()
    assert auditor is not None, "no generated auditor"

    async def run() -> dict[str, object]:
        client = AsyncClient()
        await client.aforce_login(auditor)
        before = memory_kib()
        started = time.perf_counter()
        response = await client.get("/audit/events/export.jsonl" + (f"?{query}" if query else ""))
        assert response.status_code == 200, response.status_code
        assert response.streaming, "the export must stream"
        size = lines = 0
        first_byte = None
        with open(out_path, "wb") as handle:
            async for chunk in response.streaming_content:
                if first_byte is None:
                    first_byte = time.perf_counter() - started
                handle.write(chunk)
                size += len(chunk)
                lines += chunk.count(b"\n")
        elapsed = time.perf_counter() - started
        after = memory_kib()
        return {
            "seconds": elapsed,
            "first_byte": first_byte or elapsed,
            "bytes": size,
            "lines": lines,
            "rss_before": before["VmRSS"],
            "peak_before": before["VmHWM"],
            "rss_after": after["VmRSS"],
            "peak_after": after["VmHWM"],
        }

    print(json.dumps(asyncio.run(run())))


def export_once(database_url: str, query: str, out_path: Path) -> dict[str, float]:
    env = dict(os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="aimon_admin.settings.test")
    env.pop("REDIS_URL", None)
    done = subprocess.run(
        [sys.executable, __file__, "--child", query, str(out_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"export failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(label: str, figures: dict[str, float]) -> None:
    mib = 1024
    print(
        f"  {label:22s} {figures['lines']:>9,} lines, {figures['bytes'] / 2**20:7.1f} MiB in "
        f"{figures['seconds']:6.1f} s ({figures['lines'] / figures['seconds']:,.0f} events/s, first byte "
        f"{figures['first_byte'] * 1000:.0f} ms); RSS before {figures['rss_before'] / mib:.0f} MiB, "
        f"peak before {figures['peak_before'] / mib:.0f} MiB, "
        f"peak after {figures['peak_after'] / mib:.0f} MiB "
        f"(+{(figures['peak_after'] - figures['peak_before']) / mib:.0f} MiB)"
    )


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base-url", default=os.environ.get("AIMON_BENCH_POSTGRES_URL", DEFAULT_PG))
    parser.add_argument("--no-verify", action="store_true", help="do not verify the exported file")
    args = parser.parse_args()
    database_url = ensure_database(args.base_url, regenerate=False)
    ensure_data(database_url)
    print(
        f"{BENCH_DB}: JSON Lines export through the ASGI path, each in its own process; "
        f"load average {', '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} cpus"
    )
    with tempfile.TemporaryDirectory(prefix="aimon-export-") as folder:
        small = export_once(database_url, "level=WARNING", Path(folder) / "warnings.jsonl")
        report("filtered (WARNING)", small)
        full_path = Path(folder) / "all.jsonl"
        full = export_once(database_url, "", full_path)
        report("full, unfiltered", full)
        growth = (full["peak_after"] - full["peak_before"]) - (small["peak_after"] - small["peak_before"])
        print(
            f"peak RSS growth of the full export over the filtered one: {growth / 1024:+.0f} MiB "
            f"for {full['lines'] / max(small['lines'], 1):.0f}x the events"
        )
        ok = full["seconds"] < TARGET_SECONDS
        if not args.no_verify:
            env = dict(
                os.environ, DATABASE_URL=database_url, DJANGO_SETTINGS_MODULE="aimon_admin.settings.test"
            )
            started = time.monotonic()
            verified = subprocess.run(
                [sys.executable, "manage.py", "verify_audit", "--file", str(full_path)],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            print(
                f"verify_audit --file: exit {verified.returncode} in {time.monotonic() - started:.1f} s: "
                f"{(verified.stdout or verified.stderr).strip()[:300]}"
            )
            ok = ok and verified.returncode == 0
    print(
        f"full export {full['seconds']:.1f} s (target < {TARGET_SECONDS:.0f} s): {'within' if ok else 'OVER'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
