"""Private servers the fault tests stop and restart, and the product running on them.

The shared PostgreSQL and Redis serve everyone else's tests, so these tests never touch
them: they start their own PostgreSQL cluster (initdb into a temporary directory, as the
`postgres` OS user when run as root, trust auth, its own port and socket directory) and
their own Redis (no persistence), migrate a database on that cluster, and run the product
against them in subprocesses: web nodes under uvicorn, Celery workers, and `product.py`
for set-up and checks. A missing binary is a skip, or a failure under
AIMON_REQUIRE_SERVICES=1 (CI).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.conftest import skip_or_fail
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
DATABASE = "aimon_faults"
BOOT_TIMEOUT = 30.0
# Short, so a decision with PostgreSQL down answers its 503 quickly (default 5 s).
POOL_TIMEOUT_SECONDS = 2


def port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05) -> float:
    """Poll `check` until true; return how long it took, or fail naming `what`."""
    start = time.monotonic()
    while not check():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start


# --- PostgreSQL -----------------------------------------------------------------------------------


def _postgres_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PrivatePostgres:
    """A throwaway PostgreSQL cluster on a free port; `stop()` and `start()` are the fault."""

    def __init__(self, bindir: Path, base: Path) -> None:
        self.bindir = bindir
        self.base = base
        self.data = base / "data"
        self.log = base / "postgres.log"
        self.port = free_port()
        # initdb refuses to run as root: the cluster then belongs to the postgres OS user.
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(base, user="postgres", group="postgres")

    def _run(self, *args: str) -> None:
        result = subprocess.run([*self.as_user, *args], capture_output=True, text=True, timeout=60)
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {result.stdout}{result.stderr}\n{log[-2000:]}")

    def init(self) -> None:
        self._run(
            str(self.bindir / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
            "--no-sync", "-E", "UTF8", "--locale=C",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "start",
        )

    def stop(self) -> None:
        """Stop the server now: open connections are cut, as when a database host goes down."""
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def up(self) -> bool:
        return port_open(self.port)

    def url(self, database: str = DATABASE) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def connect(self, database: str = DATABASE) -> psycopg.Connection:
        return psycopg.connect(self.url(database), autocommit=True, connect_timeout=5)


@pytest.fixture(scope="session")
def private_postgres() -> Iterator[PrivatePostgres]:
    bindir = _postgres_bindir()
    if bindir is None or not (bindir / "pg_ctl").exists():
        skip_or_fail("PostgreSQL's initdb and pg_ctl are not installed (/usr/lib/postgresql/*/bin)")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        skip_or_fail("running as root, but runuser is missing to run initdb as the postgres user")
    base = Path(tempfile.mkdtemp(prefix="aimon-faults-pg-"))
    server = PrivatePostgres(bindir, base)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if (server.data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(base, ignore_errors=True)


# --- Redis ----------------------------------------------------------------------------------------


class PrivateRedis:
    """A throwaway redis-server on a free port, with no persistence; stopped and started again."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: port_open(self.port), 10, f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()  # as a crash: no goodbye to subscribers or clients
            self.process.wait(10)
            self.process = None

    @property
    def up(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


@pytest.fixture(scope="session")
def private_redis() -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        skip_or_fail("redis-server is not installed")
    server = PrivateRedis(binary)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _servers_up_again(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that failed half-way through a fault leaves the servers running for the next."""
    yield
    for name in ("private_postgres", "private_redis"):
        if name in request.fixturenames:
            server = request.getfixturevalue(name)
            if not server.up:
                server.start()


# --- The product on them --------------------------------------------------------------------------


@dataclass
class Product:
    """The product's environment on the private servers, and its set-up and check commands."""

    postgres: PrivatePostgres
    redis: PrivateRedis
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, **overrides: str) -> dict[str, str]:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("DATABASE_", "REDIS_", "CELERY_", "DJANGO_", "PYTEST_"))
        }
        env.update(
            {
                # The real settings with the test suite's fixed key, fast password hashing and
                # static files from the app folders (no collectstatic in a test run).
                "DJANGO_SETTINGS_MODULE": "aimon_admin.settings.test",
                "DATABASE_URL": self.postgres.url(),
                "REDIS_URL": self.redis.url(),
                "CELERY_TASK_ALWAYS_EAGER": "0",
                "DATABASE_POOL_TIMEOUT": str(POOL_TIMEOUT_SECONDS),
                "DATABASE_CONNECT_TIMEOUT": "2",
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
                "DJANGO_SECURE_COOKIES": "0",  # plain http on 127.0.0.1
                "LOG_LEVEL": "WARNING",
                "PYTHONPATH": str(ROOT),
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
                **overrides,
            }
        )
        return env

    def run(self, command: str, **arguments: Any) -> Any:
        """Run a `product.py` command inside the product; return what it printed (JSON)."""
        result = subprocess.run(
            [sys.executable, "-m", "tests.faults.product", command, json.dumps(arguments)],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            raise AssertionError(f"product.py {command} failed:\n{result.stdout}\n{result.stderr}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`manage.py` with the product's environment, as an operator runs it."""
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )


@pytest.fixture(scope="session")
def product(private_postgres: PrivatePostgres, private_redis: PrivateRedis) -> Product:
    """The product's database on the private cluster, migrated once for the whole folder."""
    with private_postgres.connect("postgres") as admin:
        admin.execute(f"CREATE DATABASE {DATABASE}")
    product = Product(private_postgres, private_redis)
    result = product.manage("migrate", "--noinput", "-v", "0")
    if result.returncode != 0:
        raise AssertionError(f"migrate failed:\n{result.stdout}\n{result.stderr}")
    return product


class Process:
    """A product subprocess in its own process group, its output in a log file."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._log_file = log.open("wb")
        self.popen = subprocess.Popen(
            args, cwd=ROOT, env=env, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True
        )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole group (a Celery worker's pool children too): nothing gets to clean up."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # anything the group left behind
        self._log_file.close()


@dataclass
class Node:
    """One web node: the product's ASGI app under uvicorn."""

    process: Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> Node:
        def listening() -> bool:
            assert self.process.alive(), f"the node exited:\n{self.process.output()}"
            return port_open(self.port)

        wait_until(listening, BOOT_TIMEOUT, "the web node to listen")
        return self


@pytest.fixture
def start_node(product: Product, tmp_path: Path) -> Iterator[Callable[..., Node]]:
    """Start a web node; it boots while the test goes on (`Node.wait_ready` before calling it)."""
    started: list[Process] = []

    def start(**env: str) -> Node:
        port = free_port()
        process = Process(
            [str(BIN / "uvicorn"), "aimon_admin.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1", "--log-level", "warning", "--no-access-log"],
            product.env(**env),
            tmp_path / f"node-{port}.log",
        )  # fmt: skip
        started.append(process)
        return Node(process, port)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def start_worker(product: Product, tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start a Celery worker (prefork, one pool process) on the private broker and database,
    taking both queues as make prod's worker does (the default one and notifications').

    It boots while the test goes on: what is queued meanwhile waits in Redis for it.
    """
    started: list[Process] = []

    def start(**env: str) -> Process:
        name = f"faults-{len(started) + 1}"
        process = Process(
            [str(BIN / "celery"), "-A", "aimon_admin", "worker", "-P", "prefork", "-c", "1",
             "-Q", "celery,notifications", "-n", f"{name}@%h", "--without-gossip",
             "--without-mingle", "--without-heartbeat", "-l", "INFO"],
            product.env(**env),
            tmp_path / f"{name}.log",
        )  # fmt: skip
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


# --- The folder's time budget ---------------------------------------------------------------------

# About 190 s on an idle two-core machine: some 120 s for the outages, plus some 70 s for the
# long outage, the lapsed lease and the browser click; the rest is room for a loaded machine.
FOLDER_BUDGET_SECONDS = 300


class FolderOverBudget(Exception):
    pass


@pytest.fixture(scope="package", autouse=True)
def _folder_budget() -> Iterator[None]:
    """Every wait here is bounded; this bounds them all together, so the folder ends in time.

    Past the budget the running test fails, and its fixtures stop what it started.
    """

    def over(signum: int, frame: Any) -> None:
        raise FolderOverBudget(f"tests/faults ran past its {FOLDER_BUDGET_SECONDS} s budget")

    previous = signal.signal(signal.SIGALRM, over)
    signal.alarm(FOLDER_BUDGET_SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
