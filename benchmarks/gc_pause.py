"""How long a full garbage collection stops a server process, with and without `gc.freeze()`.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/gc_pause.py

Loads the product as a server process does (the WSGI application, every view), then times
`gc.collect(2)` three times with everything in the collector's sight, and three times after
`gc.freeze()` (what wsgi.py and asgi.py do once loaded). Python runs such a collection on its
own every few thousand requests; for its length, every request in that process waits.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from importlib import import_module
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed_collections() -> list[float]:
    times = []
    for _ in range(3):
        start = time.perf_counter()
        gc.collect(2)
        times.append((time.perf_counter() - start) * 1000)
    return times


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.settings")
    os.environ.setdefault("AIMON_DEMO", "1")  # the embedded defaults: no database is touched
    gc.disable()  # only the collections timed here run
    import django

    django.setup()
    from django.conf import settings
    from django.core.wsgi import get_wsgi_application

    get_wsgi_application()
    import_module(settings.ROOT_URLCONF)
    print(f"objects the collector tracks: {len(gc.get_objects()):,}")
    before = timed_collections()
    gc.freeze()
    after = timed_collections()
    print("full collection, everything in sight (ms): " + ", ".join(f"{t:.1f}" for t in before))
    frozen = gc.get_freeze_count()
    print(f"after gc.freeze() ({frozen:,} frozen) (ms): " + ", ".join(f"{t:.1f}" for t in after))
    return 0


if __name__ == "__main__":
    sys.exit(main())
