"""Run AIMON Admin in production on one machine: checks, migrate, collectstatic, then supervise.

    make prod            # or: .venv/bin/python scripts/prod.py

Needs DATABASE_URL (PostgreSQL), REDIS_URL, DJANGO_SECRET_KEY, DJANGO_ALLOWED_HOSTS and the
stored secrets' key (AIMON_SECRETS_KEY_FILE or AIMON_SECRETS_KEY), and
nginx installed (Debian: `apt-get install -y nginx`); refuses to start without them, naming
what is missing. Then it runs `check --deploy` (warnings printed, errors fatal), migrates,
collects static files into STATIC_ROOT (WhiteNoise serves them from there, compressed and
with far-future names: no CDN), writes nginx's configuration and checks it (`nginx -t`), and
starts and watches these processes, each in a process group of its own:

* proxy: nginx on `AIMON_WEB_HOST` (default 127.0.0.1) and `AIMON_WEB_PORT` (default 8000),
  the one address clients use, with its own configuration, pid file and temporary paths
  under `AIMON_RUN_DIR` (the system's nginx service is neither used nor touched);
  `AIMON_PROXY_WORKERS` worker processes (default 1). It routes by path: the long-poll
  (`GET /api/v1/approval-requests/{id}`, which may wait up to 60 s) and the streamed audit
  exports to `wait`, everything else to `web`;
* web: granian serving the WSGI application (aimon_admin/wsgi.py) on a Unix socket,
  `AIMON_WEB_WORKERS` processes (default: one per CPU) of `AIMON_WEB_THREADS` threads each
  (default 2): decisions and pages, request/response, no event loop or thread hop per request;
* wait: uvicorn serving the ASGI application (aimon_admin/asgi.py) on a Unix socket,
  `AIMON_WAIT_WORKERS` processes (default 1), `--lifespan off`: a waiting long-poll costs
  it a coroutine, not a thread;
* worker: a Celery worker (`AIMON_CELERY_CONCURRENCY` processes, default one per CPU) taking
  the default queue (expiry, MCP syncs, the audit check, the sweep) and the notifications one;
* beat: Celery beat, its schedule file at `AIMON_BEAT_SCHEDULE` (default
  <temp dir>/aimon-admin/celerybeat-schedule, somewhere writable even when the code is not).
  One beat for the whole installation: on every other machine set `AIMON_RUN_BEAT=0`.

Metrics: every one of these processes (and their workers) writes its Prometheus metrics into
`<AIMON_RUN_DIR>/prometheus` (PROMETHEUS_MULTIPROC_DIR, emptied at every start); `GET
/metrics`, which nginx sends to `web`, sums them all, and every few seconds this supervisor
marks the processes that have gone as dead, so their live gauges leave the sums
(docs/operations.md "Metrics").

Why two servers: measured side by side in one run (benchmarks/servers.py,
docs/performance.md), sync Django under a WSGI server spends about half the CPU per decision
that it spends under uvicorn, while only an ASGI server holds a waiting request without a
thread.

Ctrl-C or SIGTERM stops them all (SIGTERM to each, SIGKILL to whatever is left after
`AIMON_STOP_TIMEOUT` seconds, default 20) and exits 0. If one of them dies on its own,
whatever is left of its process group is killed and it alone is started again (after
`RESTART_FIRST_SECONDS`, doubling to `RESTART_MAX_SECONDS` while it keeps dying), the others
serving on untouched. Only when one has died `AIMON_RESTART_LIMIT` times (default 5) within
`RESTART_WINDOW_SECONDS` are the others stopped and this exits 1: a supervisor above it
(systemd, a container runtime) then restarts the whole set. Celery's late acks mean a task
whose worker is killed is delivered again, and every task is safe to run twice.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import socket
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
# A child that dies on its own is started again after this long, doubling while it keeps
# dying, up to the max; one that has died AIMON_RESTART_LIMIT times within the window takes
# the whole set down instead (for the supervisor above to restart).
RESTART_FIRST_SECONDS = 0.5
RESTART_MAX_SECONDS = 8.0
RESTART_WINDOW_SECONDS = 120.0
# The processes' metrics, in the run folder (prometheus_client's multiprocess mode); how often
# the supervisor looks for processes that have gone, to drop their live gauges.
METRICS_FOLDER = "prometheus"
METRICS_SWEEP_SECONDS = 5.0
LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]*_(\d+)\.db")
# uvicorn's own grace for requests in flight (a long-poll may wait up to 60 s): past it, the
# runtime's poll is cut and it polls again, on another node or after the restart.
WEB_GRACE_SECONDS = 10
# How long the servers behind nginx may take to open their sockets before nginx starts.
SOCKETS_TIMEOUT_SECONDS = 60
# nginx waits this long for an upstream's answer: past a long-poll's longest wait (60 s).
PROXY_READ_TIMEOUT_SECONDS = 90
# ... and this long for a probe's (/readyz's checks take at most about 3 s).
PROBE_READ_TIMEOUT_SECONDS = 10
# The largest request body (docs/api.md: 1 MiB); nginx holds up to this much in memory,
# never on disk.
MAX_BODY_BYTES = 1024 * 1024
# Routed to the ASGI server (`wait`): what may take long without using CPU. The long-polls
# (docs/api.md: GET /api/v1/approval-requests/{id}[/]?wait=N and its tool-call twin under
# /api/v1/tool-approval-requests/; their POST siblings have other paths), and the audit
# exports, which stream an async generator (served whole under WSGI).
# What nginx itself may refuse, before the servers behind it see the request: nginx's code,
# the status sent (494, nginx's own code for a header too large, is sent as 400), the API's
# error code, a page's title, and the words (docs/api.md: the API's errors are JSON).
NGINX_REFUSALS = (
    (400, 400, "invalid", "Bad request", "This request could not be read: a malformed line, path or header."),
    (
        494,
        400,
        "invalid",
        "Bad request",
        "A request header, or all of them together, is too large (at most 8 KiB each).",
    ),
    (414, 414, "uri_too_long", "Address too long", "The address is too long (at most 8 KiB)."),
    (408, 408, "timeout", "Request timeout", "The request was not sent in time."),
    (404, 404, "not_found", "Not found", "There is nothing at this address."),
    (500, 500, "error", "Server error", "The proxy in front of AIMON Admin failed; try again."),
)
WAIT_LOCATIONS = (
    r"^/api/v1/(tool-)?approval-requests/[^/]+/?$",
    r"^/audit/events/export\.(csv|jsonl)$",
    r"^/audit/checkpoints/export\.jsonl$",
)
NGINX_MISSING = (
    "nginx is not installed (or not on PATH): `make prod` runs it in front of the web servers, "
    "with its own configuration. On Debian or Ubuntu: `sudo apt-get install -y nginx` "
    "(the system's nginx service is not used; `sudo systemctl disable --now nginx` if you do "
    "not want it), or set AIMON_NGINX to the nginx binary"
)

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
    web_threads: int
    wait_workers: int
    proxy_workers: int
    celery_concurrency: int
    beat_schedule: Path
    stop_timeout: float
    restart_limit: int
    run_dir: Path
    nginx: str
    behind_tls_proxy: bool
    env: dict[str, str] = field(repr=False)

    @property
    def web_socket(self) -> Path:
        return self.run_dir / "web.sock"

    @property
    def wait_socket(self) -> Path:
        return self.run_dir / "wait.sock"

    @property
    def nginx_conf(self) -> Path:
        return self.run_dir / "nginx.conf"

    @property
    def metrics_dir(self) -> Path:
        """Where every process writes its metrics (prometheus_client's multiprocess mode)."""
        return self.run_dir / METRICS_FOLDER


def _whole_number(env: dict[str, str], name: str, default: int, *, minimum: int = 1) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) < minimum:
        raise ConfigError(f"{name} must be a whole number ≥ {minimum}, not {raw!r}")
    return int(raw)


def _closed_to_others(path: Path) -> Path | None:
    """The first existing folder above `path` (or itself) that other users cannot enter."""
    for folder in reversed([path, *path.parents]):
        if folder.exists() and not folder.stat().st_mode & 0o001:
            return folder
    return None


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
    if not env.get("AIMON_SECRETS_KEY", "").strip() and not env.get("AIMON_SECRETS_KEY_FILE", "").strip():
        problems.append(
            "AIMON_SECRETS_KEY_FILE (or AIMON_SECRETS_KEY) is not set: the secrets stored for other "
            "systems (MCP server keys, webhook secrets, channel URLs) are encrypted with it; make one "
            "with `.venv/bin/python manage.py secrets_key create /etc/aimon/secrets-key`, set "
            "AIMON_SECRETS_KEY_FILE to that file and back it up apart from the database"
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
    numbers = {
        "AIMON_WEB_WORKERS": cpus,
        "AIMON_WEB_THREADS": 2,
        "AIMON_WAIT_WORKERS": 1,
        "AIMON_PROXY_WORKERS": 1,
        "AIMON_CELERY_CONCURRENCY": cpus,
        "AIMON_WEB_PORT": 8000,
        "AIMON_STOP_TIMEOUT": 20,
        "AIMON_RESTART_LIMIT": 5,
    }
    for name, default in numbers.items():
        try:
            numbers[name] = _whole_number(env, name, default)
        except ConfigError as exc:
            problems.append(str(exc))
    port = numbers["AIMON_WEB_PORT"]
    nginx = env.get("AIMON_NGINX", "").strip() or shutil.which("nginx") or shutil.which("/usr/sbin/nginx")
    if not nginx or not shutil.which(nginx):
        problems.append(NGINX_MISSING)
    if port > 65535:
        problems.append(f"AIMON_WEB_PORT must be at most 65535, not {port}")
    run_dir = env.get("AIMON_RUN_DIR", "").strip()
    run_path = (
        Path(run_dir).resolve() if run_dir else Path(tempfile.gettempdir()) / "aimon-admin" / f"run-{port}"
    )
    closed = _closed_to_others(run_path)
    if closed is not None and os.geteuid() == 0:
        problems.append(
            f"AIMON_RUN_DIR ({run_path}) is inside {closed}, which other users cannot enter: started "
            "as root, nginx's workers run as another user (nobody) and must reach the servers' "
            "sockets there; name a folder whose parents all allow others in (o+x), or leave it unset"
        )
    if problems:
        raise ConfigError("\n".join(f"  - {problem}" for problem in problems))
    schedule = env.get("AIMON_BEAT_SCHEDULE", "").strip()
    return Config(
        host=env.get("AIMON_WEB_HOST", "").strip() or "127.0.0.1",
        port=port,
        run_beat=run_beat in TRUE,
        web_workers=numbers["AIMON_WEB_WORKERS"],
        web_threads=numbers["AIMON_WEB_THREADS"],
        wait_workers=numbers["AIMON_WAIT_WORKERS"],
        proxy_workers=numbers["AIMON_PROXY_WORKERS"],
        celery_concurrency=numbers["AIMON_CELERY_CONCURRENCY"],
        beat_schedule=Path(schedule)
        if schedule
        else Path(tempfile.gettempdir()) / "aimon-admin" / "celerybeat-schedule",
        stop_timeout=float(numbers["AIMON_STOP_TIMEOUT"]),
        restart_limit=numbers["AIMON_RESTART_LIMIT"],
        run_dir=run_path,
        nginx=str(nginx),
        behind_tls_proxy=env.get("DJANGO_BEHIND_TLS_PROXY", "").strip().lower() in TRUE,
        env=dict(
            env,
            DJANGO_SETTINGS_MODULE=env.get("DJANGO_SETTINGS_MODULE") or "aimon_admin.settings.base",
            # nginx (ours) names the client in X-Forwarded-For: sign-in lockouts count by it.
            AIMON_BEHIND_PROXY="1",
            # Every process's metrics in one folder, summed by a scrape of /metrics; emptied at
            # every start (write_nginx_conf), so no run counts what an earlier one did.
            PROMETHEUS_MULTIPROC_DIR=str(run_path / METRICS_FOLDER),
            # One JSON record per line, for a log collector, unless the operator chose text.
            AIMON_LOG_FORMAT=env.get("AIMON_LOG_FORMAT", "").strip() or "json",
        ),
    )


def commands(config: Config) -> dict[str, list[str]]:
    """What runs, by name, in the order it starts: the servers behind nginx, the Celery
    worker and (unless turned off) Celery beat, and nginx last, once the sockets are open."""
    bin_dir = Path(PYTHON).parent
    granian = shutil.which("granian", path=str(bin_dir)) or "granian"
    argv = {
        "web": [
            granian,
            "--interface",
            "wsgi",
            "--uds",
            str(config.web_socket),
            "--uds-permissions",
            "438",  # 0o666: nginx's workers (another user when started as root) connect
            "--workers",
            str(config.web_workers),
            "--blocking-threads",
            str(config.web_threads),
            "--no-ws",
            "--respawn-failed-workers",
            "--workers-kill-timeout",
            str(WEB_GRACE_SECONDS),
            "--log-level",
            "warning",
            "aimon_admin.wsgi:application",
        ],
        "wait": [
            PYTHON,
            "-m",
            "uvicorn",
            "aimon_admin.asgi:application",
            "--uds",
            str(config.wait_socket),
            "--workers",
            str(config.wait_workers),
            "--lifespan",
            "off",
            "--no-access-log",
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
            # The default queue and notifications' own (settings: CELERY_TASK_ROUTES).
            "-Q",
            "celery,notifications",
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
        "proxy": nginx_argv(config),
    }
    if not config.run_beat:
        del argv["beat"]
    return argv


def nginx_argv(config: Config, *, test: bool = False) -> list[str]:
    return [
        config.nginx,
        *(["-t", "-q"] if test else []),
        "-p",
        f"{config.run_dir}/",
        "-c",
        str(config.nginx_conf),
        "-e",
        "stderr",
    ]


def _listen_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _nginx_json(value: dict[str, str]) -> str:
    """A JSON body as an nginx string: single-quoted, its own quotes escaped the JSON way."""
    return "'" + json.dumps(value).replace("'", "\\u0027").replace("\\\\", "\\u005c") + "'"


def product_constant(module: str, name: str) -> str:
    """A message constant of the product's, read from its source: this supervisor does not
    load Django (its settings refuse to load without the environment the children get)."""
    tree = ast.parse((ROOT / module).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise LookupError(f"{name} is not defined in {module}")


def nginx_conf(config: Config) -> str:
    """nginx's whole configuration: one address in front, routing by path to the two servers.
    Its own answers (a body over the limit, a server behind it down) are the API's JSON bodies."""
    body_too_large = product_constant("aimon_admin/core/middleware.py", "BODY_TOO_LARGE_MESSAGE")
    unavailable_message = product_constant("aimon_admin/core/api.py", "UNAVAILABLE_MESSAGE")
    from_client = "$http_x_forwarded_for" if config.behind_tls_proxy else "$remote_addr"
    proto = "$http_x_forwarded_proto" if config.behind_tls_proxy else "$scheme"
    too_large = _nginx_json({"error": "payload_too_large", "detail": body_too_large})
    unavailable = _nginx_json({"error": "unavailable", "detail": unavailable_message})
    refusals = "".join(
        f"""
        location = /_aimon_refusal/api_{code} {{
            internal;
            default_type application/json;
            return {sent} {_nginx_json({"error": error, "detail": detail})};
        }}
        location = /_aimon_refusal/page_{code} {{
            internal;
            default_type text/html;
            return {sent} '<!doctype html><title>{title}</title><h1>{title}</h1><p>{detail}</p>';
        }}
"""
        for code, sent, error, title, detail in NGINX_REFUSALS
    )
    refusal_pages = "".join(
        f"        error_page {code} = ${{aimon_refusal}}{code};\n" for code, *_ in NGINX_REFUSALS
    )
    run = config.run_dir
    wait_locations = "".join(
        f"""
        location ~ {pattern} {{
            proxy_pass http://aimon_wait;
            proxy_buffering off;
        }}
"""
        for pattern in WAIT_LOCATIONS
    )
    return f"""# Written by scripts/prod.py at every start; edits here are lost.
daemon off;
worker_processes {config.proxy_workers};
pid {run}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections 8192;
}}

http {{
    access_log off;
    server_tokens off;
    client_body_temp_path {run}/nginx-client-body;
    proxy_temp_path {run}/nginx-proxy;
    fastcgi_temp_path {run}/nginx-fastcgi;
    uwsgi_temp_path {run}/nginx-uwsgi;
    scgi_temp_path {run}/nginx-scgi;
    # Bodies (at most 1 MiB) are read into memory, whole, before the request is passed on.
    client_max_body_size {MAX_BODY_BYTES};
    client_body_buffer_size {MAX_BODY_BYTES};
    proxy_max_temp_file_size 0;
    keepalive_timeout 75s;
    keepalive_requests 100000;

    # Where nginx itself refuses a request (before any server behind it sees it), the API's
    # paths get the API's JSON error body and the pages a page; a request nginx could not
    # even read a path from is answered as the API would be. (Internal addresses, not named
    # locations: nginx cannot redirect a request it could not read a path from to those.)
    map $request_uri $aimon_refusal {{
        "" /_aimon_refusal/api_;
        ~^/(api|access|[.]well-known)(/|$) /_aimon_refusal/api_;
        default /_aimon_refusal/page_;
    }}

    upstream aimon_web {{
        server unix:{config.web_socket};
        keepalive 32;
    }}
    upstream aimon_wait {{
        server unix:{config.wait_socket};
        keepalive 32;
    }}

    server {{
        listen {_listen_address(config.host, config.port)} backlog=4096;

        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For {from_client};
        proxy_set_header X-Forwarded-Proto {proto};
        proxy_redirect off;
        proxy_read_timeout {PROXY_READ_TIMEOUT_SECONDS}s;
        proxy_intercept_errors off;
        error_page 413 = @too_large;
        error_page 502 504 = @unavailable;
{refusal_pages}
        location / {{
            proxy_pass http://aimon_web;
        }}
        # Prometheus' scrape: the application answers it (a token or an allowed address; it
        # sums every process's metrics), never nginx.
        location = /metrics {{
            proxy_pass http://aimon_web;
        }}
        # The probes (aimon_admin/health.py), passed through as they are; one that hangs is
        # cut short (and answered 503 below) rather than held for a long-poll's time.
        location = /healthz {{
            proxy_pass http://aimon_web;
            proxy_read_timeout {PROBE_READ_TIMEOUT_SECONDS}s;
        }}
        location = /readyz {{
            proxy_pass http://aimon_web;
            proxy_read_timeout {PROBE_READ_TIMEOUT_SECONDS}s;
        }}
{wait_locations}
        location @too_large {{
            default_type application/json;
            return 413 {too_large};
        }}
        location @unavailable {{
            # Fail closed: a server behind nginx is down or restarting; no decision at all.
            add_header Retry-After 5 always;
            default_type application/json;
            return 503 {unavailable};
        }}
{refusals}    }}
}}
"""


def write_nginx_conf(config: Config) -> None:
    """The run folder made ready for a start, and nginx's configuration written into it: its
    folders made, stale sockets removed, the metrics folder emptied (a run counts from zero)."""
    # nginx's workers (another user when started as root) must reach the sockets in it.
    for folder in reversed([config.run_dir, *config.run_dir.parents]):
        if not folder.exists():
            folder.mkdir(mode=0o755)
            folder.chmod(0o755)
    for stale in (config.web_socket, config.wait_socket):
        stale.unlink(missing_ok=True)
    shutil.rmtree(config.metrics_dir, ignore_errors=True)
    config.metrics_dir.mkdir(mode=0o700)
    config.nginx_conf.write_text(nginx_conf(config))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def metrics_mark_dead(folder: Path) -> list[int]:
    """Mark each process that wrote metrics to `folder` and has gone as dead, as
    prometheus_client's multiprocess mode asks of whatever manages the processes: its live
    gauges (long-polls waiting) leave the sums; what it counted stays. The servers' and
    Celery's workers are started and replaced by their own masters, which say nothing, so the
    supervisor looks for them every `METRICS_SWEEP_SECONDS`. Returns the processes marked."""
    from prometheus_client import multiprocess

    gone = sorted(
        {
            int(match.group(1))
            for path in folder.glob("gauge_live*.db")
            if (match := LIVE_GAUGE_FILE.fullmatch(path.name)) and not _pid_alive(int(match.group(1)))
        }
    )
    for pid in gone:
        multiprocess.mark_process_dead(pid, str(folder))
    return gone


def log(message: str) -> None:
    print(f"prod: {message}", file=sys.stderr, flush=True)


def prepare(config: Config, stopped: Callable[[], bool]) -> None:
    """Check, migrate (the audit log's append-only triggers too), collect static files into STATIC_ROOT."""
    config.beat_schedule.parent.mkdir(parents=True, exist_ok=True)
    # `check --deploy` fails only on errors; its warnings are printed (docs/operations.md,
    # "Inside `make prod`", explains each).
    write_nginx_conf(config)
    log(f"nginx -t ({config.nginx_conf})")
    checked = subprocess.run(nginx_argv(config, test=True), capture_output=True, text=True)
    if checked.returncode != 0:
        raise SystemExit(f"prod: nginx refused its configuration; nothing started\n{checked.stderr}")
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


def _accepts(path: Path) -> bool:
    """Whether a server listens on this Unix socket yet (its file appears before it accepts)."""
    if not path.is_socket():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1)
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


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
    """Starts the processes, starts again one that dies (with a back-off), and stops them all:
    on a stop signal, or once one keeps dying."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.argv = commands(config)
        self.children: dict[str, subprocess.Popen[bytes]] = {}
        self.deaths: dict[str, list[float]] = {}  # when each child died on its own, lately
        self.stop_requested: int | None = None

    def start(self) -> None:
        try:
            self._start_each()
        except OSError:
            self.stop()
            raise

    def _start_each(self) -> None:
        for name in self.argv:
            if name == "proxy":
                self._wait_for_sockets()
            self._start(name)

    def _start(self, name: str) -> None:
        # A process group of its own: a terminal's Ctrl-C reaches only this supervisor,
        # which stops the children in order, and a child's own children (uvicorn's
        # workers, Celery's pool) can be found and stopped with it.
        child = subprocess.Popen(self.argv[name], cwd=ROOT, env=self.config.env, process_group=0)
        self.children[name] = child
        log(f"started {name} (pid {child.pid}): {' '.join(self.argv[name][1:])}")

    def _wait_for_sockets(self) -> None:
        """Until both servers behind nginx listen, so its first requests find them."""
        deadline = time.monotonic() + SOCKETS_TIMEOUT_SECONDS
        sockets = (self.config.web_socket, self.config.wait_socket)
        while not all(_accepts(path) for path in sockets):
            if self.stop_requested is not None or any(c.poll() is not None for c in self.children.values()):
                return  # watch() notices and stops the rest
            if time.monotonic() > deadline:
                raise OSError(f"the web servers did not open {sockets} within {SOCKETS_TIMEOUT_SECONDS} s")
            time.sleep(POLL_SECONDS)

    def _any_alive(self) -> bool:
        return any(_group_alive(child.pid) for child in self.children.values())

    def request_stop(self, signum: int, _frame: object) -> None:
        self.stop_requested = signum

    def watch(self) -> int:
        """Until a stop signal: start again each child that dies; stop everything and return
        1 once one keeps dying, 0 on the signal."""
        due: dict[str, float] = {}  # children to start again, and when
        swept = time.monotonic()
        while self.stop_requested is None:
            now = time.monotonic()
            if now - swept >= METRICS_SWEEP_SECONDS:
                metrics_mark_dead(self.config.metrics_dir)
                swept = now
            for name, child in self.children.items():
                if name in due:
                    continue
                status = child.poll()
                if status is None:
                    continue
                # Whatever is left of its group (a pool's or a server's workers) goes with it.
                _signal_group(child.pid, signal.SIGKILL)
                deaths = [t for t in self.deaths.get(name, []) if now - t < RESTART_WINDOW_SECONDS] + [now]
                self.deaths[name] = deaths
                if len(deaths) >= self.config.restart_limit:
                    log(
                        f"{name} (pid {child.pid}) exited with status {status}: {len(deaths)} deaths "
                        f"within {RESTART_WINDOW_SECONDS:.0f} s; stopping the others"
                    )
                    self.stop()
                    return 1
                delay = min(RESTART_FIRST_SECONDS * 2 ** (len(deaths) - 1), RESTART_MAX_SECONDS)
                log(f"{name} (pid {child.pid}) exited with status {status}; starting it again in {delay:g} s")
                due[name] = now + delay
            for name, when in list(due.items()):
                if when <= now:
                    del due[name]
                    self._restart(name)
            time.sleep(POLL_SECONDS)
        log(f"received {signal.Signals(self.stop_requested).name}; stopping")
        self.stop()
        return 0

    def _restart(self, name: str) -> None:
        old = self.children[name]
        old.wait()  # reaped: its group was killed when it died
        socket_file = {"web": self.config.web_socket, "wait": self.config.wait_socket}.get(name)
        if socket_file is not None:
            socket_file.unlink(missing_ok=True)  # a server that died left its socket file
        try:
            self._start(name)
        except OSError as exc:  # counted as one more death on the next look
            log(f"could not start {name} again: {exc}")
            self.children[name] = old

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
