"""How far the property tests explore, and from which seed: one place for every Hypothesis test.

Two profiles, registered and loaded by tests/conftest.py before any test module is imported:

* ``ci`` (the default: `make test`, and so CI): derandomized. Each test draws its examples
  from a seed made from the test itself, so every run, on every machine, tries exactly what
  the last one did: a green run stays green until the code (or the test) changes, and a red
  one is red again on the next run. No example database is read or written. Health checks
  that depend on how busy the machine is (``too_slow``) are off, and there is no deadline:
  a property test fails on what the code answers, never on how long it took.
* ``fuzz`` (`make fuzz`, by hand; AIMON_FUZZ=1): a fresh random seed each run and ten times
  the examples, failures kept in .hypothesis/ (not committed) and printed with a reproduction
  blob. A failure it finds is fixed and pinned as an ``@example`` on its test, so the ``ci``
  profile tries it on every run from then on.

A property test takes its settings from `budget`, never from ``hypothesis.settings`` directly,
so that the profile decides the seed and ``make fuzz`` scales every budget alike.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

FUZZ = os.environ.get("AIMON_FUZZ") == "1"
SCALE = 10 if FUZZ else 1

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "fuzz",
    derandomize=False,
    database=DirectoryBasedExampleDatabase(".hypothesis/examples"),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def load_profile() -> str:
    name = "fuzz" if FUZZ else "ci"
    settings.load_profile(name)
    return name


def budget(examples: int, *suppress: HealthCheck, **overrides: object) -> settings:
    """A property test's settings under the loaded profile: `examples` examples (ten times as
    many under `make fuzz`), the profile's seed and health checks, plus any `suppress`ed."""
    return settings(
        max_examples=examples * SCALE,
        suppress_health_check=[*settings.default.suppress_health_check, *suppress],
        **overrides,  # type: ignore[arg-type]
    )
