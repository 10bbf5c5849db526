"""Run AIMON Admin in production on one machine: checks, migrate, collectstatic, then supervise.

    make prod            # or: .venv/bin/python scripts/prod.py

Needs DATABASE_URL (PostgreSQL), REDIS_URL, DJANGO_SECRET_KEY and DJANGO_ALLOWED_HOSTS;
refuses to start without them, naming what is missing. Then it runs `check --deploy`
(warnings printed, errors fatal), migrates, collects static files into STATIC_ROOT
(WhiteNoise serves them from there, compressed and with far-future names: no CDN), and
starts and watches three processes, each in a process group of its own:

* web: uvicorn, `AIMON_WEB_WORKERS` workers (default: one per CPU), on `AIMON_WEB_HOST`
  (default 127.0.0.1) and `AIMON_WEB_PORT` (default 8000), `--lifespan off`;
* worker: a Celery worker (`AIMON_CELERY_CONCURRENCY` processes, default one per CPU);
* beat: Celery beat, its schedule file at `AIMON_BEAT_SCHEDULE` (default
  <temp dir>/aimon-admin/celerybeat-schedule, somewhere writable even when the code is not).
  One beat for the whole installation: on every other machine set `AIMON_RUN_BEAT=0`.

Ctrl-C or SIGTERM stops all three (SIGTERM to each, SIGKILL to whatever is left after
`AIMON_STOP_TIMEOUT` seconds, default 20) and exits 0. If one of them dies on its own the
others are stopped and this exits 1: a supervisor above it (systemd, a container
runtime) then restarts the whole set. Celery's late acks mean a task whose worker is
killed is delivered again, and every task is safe to run twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
POLL_SECONDS = 0.2
# uvicorn's own grace for requests in flight (a long-poll may wait up to 60 s): past it, the
# runtime's poll is cut and it polls again, on another node or after the restart.
WEB_GRACE_SECONDS = 10

POSTGRES_SCHEMES = ("postgres://", "postgresql://", "pgsql://", "postgis://")
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off"}
SETTINGS = "aimon_admin.settings.base"
DEFAULT_BEAT_SCHEDULE = Path(tempfile.gettempdir()) / "aimon-admin" / "celerybeat-schedule"
SEE_README = "See README.md, 'Running it in production'."


class ConfigError(Exception):
    """The environment cannot run production; the message says what to set."""


@dataclass(frozen=True)
class Config:
    host: str
    port: int
    run_beat: bool
    web_workers: int
    celery_concurrency: int
    beat_schedule: Path
    stop_timeout: float
    env: dict[str, str] = field(repr=False)


def _whole_number(env: dict[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ConfigError(f"{name} must be a whole number ≥ {minimum}, not {raw!r}")
    return int(raw)


def config_from(env: dict[str, str]) -> Config:
    """Check the environment; every problem is named at once, not one per attempt."""
    problems = []
    database_url = env.get("DATABASE_URL", "").strip()
    if not database_url:
        problems.append(
            "DATABASE_URL is not set: production needs PostgreSQL, e.g. postgres://aimon@db:5432/aimon"
        )
    elif not database_url.startswith(POSTGRES_SCHEMES):
        problems.append(
            f"DATABASE_URL must be a PostgreSQL URL (postgres://…), not {database_url.split(':', 1)[0]}://…: "
            "SQLite is the embedded default (make run), for one process only"
        )
    redis_url = env.get("REDIS_URL", "").strip()
    if not redis_url:
        problems.append(
            "REDIS_URL is not set: production needs Redis (Celery broker, cache, wake-ups across "
            "nodes), e.g. redis://redis:6379/0"
        )
    elif not redis_url.startswith(REDIS_SCHEMES):
        problems.append(f"REDIS_URL must be a redis:// (or rediss://, unix://) URL, not {redis_url!r}")
    if not env.get("DJANGO_SECRET_KEY", "").strip():
        problems.append(
            "DJANGO_SECRET_KEY is not set: generate one with "
            "`python -c 'import secrets; print(secrets.token_urlsafe(50))'` and keep it secret"
        )
    if not env.get("DJANGO_ALLOWED_HOSTS", "").strip():
        problems.append(
            "DJANGO_ALLOWED_HOSTS is not set: every request would be refused (400); name the host "
            "names clients use, e.g. aimon.example.com,127.0.0.1"
        )
    if env.get("DJANGO_DEBUG", "").strip().lower() in TRUE:
        problems.append("DJANGO_DEBUG is on: never in production (it shows settings and code in error pages)")
    if env.get("AIMON_DEMO", "").strip().lower() in TRUE:
        problems.append(
            "AIMON_DEMO is on: it is the local demo's mode (insecure cookies, a fixed secret key)"
        )
    if env.get("CELERY_TASK_ALWAYS_EAGER", "").strip().lower() in TRUE:
        problems.append(
            "CELERY_TASK_ALWAYS_EAGER is on: production runs tasks on the Celery worker, "
            "not inside web requests; unset it"
        )
    run_beat = env.get("AIMON_RUN_BEAT", "1").strip().lower()
    if run_beat not in TRUE | FALSE:
        problems.append(f"AIMON_RUN_BEAT must be 1 or 0, not {run_beat!r}")
    cpus = os.cpu_count() or 1
    try:
        web_workers = _whole_number(env, "AIMON_WEB_WORKERS", cpus)
        concurrency = _whole_number(env, "AIMON_CELERY_CONCURRENCY", cpus)
        port = _whole_number(env, "AIMON_WEB_PORT", 8000)
        stop_timeout = _whole_number(env, "AIMON_STOP_TIMEOUT", 20)
    except ConfigError as exc:
        problems.append(str(exc))
        web_workers = concurrency = port = stop_timeout = 0
    if port > 65535:
        problems.append(f"AIMON_WEB_PORT must be at most 65535, not {port}")
    if problems:
        raise ConfigError("\n".join(f"  - {problem}" for problem in problems))
    schedule = env.get("AIMON_BEAT_SCHEDULE", "").strip()
    return Config(
        host=env.get("AIMON_WEB_HOST", "").strip() or "127.0.0.1",
        port=port,
        run_beat=run_beat in TRUE,
        web_workers=web_workers,
        celery_concurrency=concurrency,
        beat_schedule=Path(schedule)
        if schedule
        else Path(tempfile.gettempdir()) / "aimon-admin" / "celerybeat-schedule",
        stop_timeout=float(stop_timeout),
        env=dict(
            env, DJANGO_SETTINGS_MODULE=env.get("DJANGO_SETTINGS_MODULE") or "aimon_admin.settings.base"
        ),
    )


def commands(config: Config) -> dict[str, list[str]]:
    """What runs, by name: the web server, the Celery worker and (unless turned off) Celery beat."""
    argv = {
        "web": [
            PYTHON,
            "-m",
            "uvicorn",
            "aimon_admin.asgi:application",
            "--host",
            config.host,
            "--port",
            str(config.port),
            "--workers",
            str(config.web_workers),
            "--lifespan",
            "off",
            "--timeout-graceful-shutdown",
            str(WEB_GRACE_SECONDS),
        ],
        "worker": [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "aimon_admin",
            "worker",
            "--loglevel",
            "INFO",
            "--concurrency",
            str(config.celery_concurrency),
            "--hostname",
            f"aimon-worker-{os.getpid()}@%h",
        ],
        "beat": [
            PYTHON,
            "-m",
            "celery",
            "-A",
            "aimon_admin",
            "beat",
            "--loglevel",
            "INFO",
            "--schedule",
            str(config.beat_schedule),
        ],
    }
    if not config.run_beat:
        del argv["beat"]
    return argv


def log(message: str) -> None:
    print(f"prod: {message}", file=sys.stderr, flush=True)


def prepare(config: Config, stopped: Callable[[], bool]) -> None:
    """Check, migrate (the audit log's append-only triggers too), collect static files into STATIC_ROOT."""
    config.beat_schedule.parent.mkdir(parents=True, exist_ok=True)
    # `check --deploy` fails only on errors; its warnings are printed (README explains each).
    for step in (
        ["check", "--deploy"],
        ["migrate", "--noinput"],
        ["collectstatic", "--noinput", "--verbosity", "0"],
    ):
        if stopped():
            return
        log(f"manage.py {' '.join(step)}")
        status = subprocess.call([PYTHON, "manage.py", *step], cwd=ROOT, env=config.env)
        if status != 0:
            raise SystemExit(f"prod: manage.py {step[0]} failed (exit {status}); nothing started")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal still exists
        return True
    return True


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return


class Supervisor:
    """Starts the processes, notices the first to die, and stops them all."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.stop_requested: int | None = None

    def start(self) -> None:
        try:
            self._start_each()
        except OSError:
            self.stop()
            raise

    def _start_each(self) -> None:
        for name, argv in commands(self.config).items():
            # A process group of its own: a terminal's Ctrl-C reaches only this supervisor,
            # which stops the children in order, and a child's own children (uvicorn's
            # workers, Celery's pool) can be found and stopped with it.
            child = subprocess.Popen(argv, cwd=ROOT, env=self.config.env, process_group=0)
            self.children[name] = child
            log(f"started {name} (pid {child.pid}): {' '.join(argv[1:])}")

    def _any_alive(self) -> bool:
        return any(_group_alive(child.pid) for child in self.children.values())

    def request_stop(self, signum: int, _frame: object) -> None:
        self.stop_requested = signum

    def watch(self) -> int:
        """Wait for a stop signal or a death; stop everything; return the exit status."""
        while self.stop_requested is None:
            for name, child in self.children.items():
                status = child.poll()
                if status is not None:
                    log(f"{name} (pid {child.pid}) exited with status {status}; stopping the others")
                    self.stop()
                    return 1
            time.sleep(POLL_SECONDS)
        log(f"received {signal.Signals(self.stop_requested).name}; stopping")
        self.stop()
        return 0

    def stop(self) -> None:
        # The leaders first (uvicorn and Celery stop their own workers gracefully: requests
        # in flight finish, a running task finishes or is delivered again), then whatever
        # is left of each group, by force, once the timeout has passed.
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.stop_timeout
        while self._any_alive() and time.monotonic() < deadline:
            for child in self.children.values():
                child.poll()  # reap, so an exited leader leaves the group
            time.sleep(POLL_SECONDS)
        for name, child in self.children.items():
            if _group_alive(child.pid):
                log(f"{name} did not stop within {self.config.stop_timeout:.0f} s: killing it")
                _signal_group(child.pid, signal.SIGKILL)
        for name, child in self.children.items():
            status = child.wait()
            log(f"{name} (pid {child.pid}) stopped, status {status}")


def main() -> int:
    try:
        config = config_from(dict(os.environ))
    except ConfigError as exc:
        print(
            f"prod: cannot start production:\n{exc}\nSee README.md, 'Running it in production'.",
            file=sys.stderr,
        )
        return 2
    stop_signals = (signal.SIGINT, signal.SIGTERM)
    supervisor = Supervisor(config)
    for signum in stop_signals:
        signal.signal(signum, supervisor.request_stop)
    prepare(config, lambda: supervisor.stop_requested is not None)
    if supervisor.stop_requested is not None:
        log("stopped before starting anything")
        return 0
    supervisor.start()
    return supervisor.watch()


if __name__ == "__main__":
    sys.exit(main())
