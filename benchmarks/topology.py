"""make prod's web topology in one process session, for benchmarks/load.py --topology.

    .venv/bin/python benchmarks/topology.py --port 8123 --workers 2 --threads 2

nginx on 127.0.0.1:PORT in front of granian (WSGI) and uvicorn (ASGI), built by
scripts/prod.py's own code (its commands and nginx configuration), all in this process's
session and group: load.py counts their CPU together and stops them together with one
SIGTERM to the group. No Celery: the load needs none. The environment is the caller's
(benchmarks.settings, DATABASE_URL, REDIS_URL).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import servers


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    prod = servers.prod_script()
    with tempfile.TemporaryDirectory(prefix="aimon_bench_topology_") as folder:
        env = servers.topology_env(dict(os.environ), args.port, args.workers, args.threads, Path(folder))
        config = prod.config_from(env)
        argv = prod.commands(config)
        prod.write_nginx_conf(config)
        # The servers run the checkout this was started in (load.py's --compare-root starts it
        # in the baseline's): granian and uvicorn import the application from their working
        # folder before PYTHONPATH, so prod.ROOT (this script's checkout) would serve this one.
        code = Path.cwd()
        children = [subprocess.Popen(argv[name], env=config.env, cwd=code) for name in ("web", "wait")]
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        deadline = time.monotonic() + 60
        while not (prod._accepts(config.web_socket) and prod._accepts(config.wait_socket)):
            if time.monotonic() > deadline or stop:
                break
            time.sleep(0.1)
        children.append(subprocess.Popen(argv["proxy"], env=config.env, cwd=code))
        while not stop and all(child.poll() is None for child in children):
            time.sleep(0.2)
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
