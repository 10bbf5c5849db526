"""Argument rule matching in process (the target: p99 <= 1 ms with 1,000 argument rules).

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/tool_rules.py [--calls 20000] [--seed 1]

Times `ToolRuleIndex.match` (approvals/tool_rule_grammar.py), the whole of what the tool chain
does with rules for one call, with no database: the index is what `tool_rule_index()`
caches per process. Two layouts of 1,000 rules:

- *one tool*: all 1,000 on Bash, the worst case (the index buckets rules by tool, so a
  call is matched against every rule of its tool): DENY, ASK and ALLOW rules, prefixes
  `git cmd17:*`, paths `/srv/app17/*`, exact commands, some per runtime, pre-approvals;
- *50 tools*: the same rules spread over 50 tools, the usual case.

Subjects: ones a rule matches, ones none matches, chained commands (an ALLOW refuses
them, a DENY matches them), `..` paths, and long ones (4 KiB). Figures are per call in
microseconds: p50, p99, max, and the index's build time (compiling 2,000 regular
expressions). No assertion: the figures are printed for the README.

A run on the shared 2-core machine (20,000 calls per layout; max is the machine's hiccups):

    layout      build ms   p50 us   p99 us    max us  mean us
    one tool       517.9      3.7     20.6   21724.2     18.0
    50 tools       300.2      3.5      9.4   16074.0     12.9

Before the index looked rules up by literal prefix (it read every rule of the tool), the
one-tool layout's p99 was 11,565 us and its mean 977 us; 50 tools: p99 34 us.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "aimon_admin.settings.test")

import django

django.setup()

from aimon_admin.approvals.choices import RuleAction  # noqa: E402
from aimon_admin.approvals.tool_rule_grammar import ToolRuleIndex, ToolRuleSpec  # noqa: E402
from aimon_admin.registry.choices import DestructiveBehavior, IdempotencyBehavior, SideEffectLevel  # noqa: E402
from aimon_admin.registry.policy import ToolAxes  # noqa: E402

RULES = 1_000
RUNTIMES = (1, 2, 3)
AXES = ToolAxes(SideEffectLevel.MUTATING, DestructiveBehavior.DESTRUCTIVE, IdempotencyBehavior.NON_IDEMPOTENT)


def make_rules(tools: list[str], rng: random.Random) -> list[ToolRuleSpec]:
    rules = []
    for number in range(RULES):
        tool = tools[number % len(tools)]
        shape = number % 4
        if shape == 0:
            pattern = f"git cmd{number}:*"
        elif shape == 1:
            pattern = f"/srv/app{number}/*"
        elif shape == 2:
            pattern = f"make target{number}"
        else:
            pattern = f"deploy-{number}-*-now:*"
        action = rng.choice([RuleAction.ALLOW, RuleAction.ALLOW, RuleAction.ASK, RuleAction.DENY])
        runtime = rng.choice([None, None, *RUNTIMES])
        unattended = action == RuleAction.ALLOW and runtime is not None and rng.random() < 0.3
        rules.append(ToolRuleSpec(number + 1, runtime, "", tool, pattern, action, unattended))
    return rules


def make_subjects(rng: random.Random, calls: int) -> list[str]:
    shapes = [
        lambda n: f"git cmd{n} --all origin main",  # a rule's prefix (if that rule exists)
        lambda n: f"/srv/app{n}/config/settings.yml",
        lambda n: f"make target{n}",
        lambda n: f"git cmd{n} origin && rm -rf /",  # chained: an ALLOW never covers it
        lambda n: f"/srv/app{n}/../../etc/passwd",  # a `..` step
        lambda n: f"unmatched command {n} with several words",  # no rule: every rule is tried
        lambda n: f"git cmd{n} " + "x" * 4096,  # long
    ]
    return [rng.choice(shapes)(rng.randrange(RULES + 200)) for _ in range(calls)]


def measure(index: ToolRuleIndex, tools: list[str], subjects: list[str], rng: random.Random) -> list[float]:
    timings = []
    for subject in subjects:
        tool = rng.choice(tools)
        runtime = rng.choice(RUNTIMES)
        unattended = rng.random() < 0.5
        started = time.perf_counter_ns()
        index.match(
            runtime_id=runtime, server="", tool=tool, subject=subject, axes=AXES, unattended=unattended
        )
        timings.append((time.perf_counter_ns() - started) / 1000)
    return timings


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"{RULES} argument rules, {args.calls} calls per layout, Python {sys.version.split()[0]}")
    print(f"{'layout':<10} {'build ms':>9} {'p50 us':>8} {'p99 us':>8} {'max us':>9} {'mean us':>8}")
    for layout, tools in (("one tool", ["Bash"]), ("50 tools", [f"tool{n}" for n in range(50)])):
        rng = random.Random(args.seed)
        rules = make_rules(tools, rng)
        started = time.perf_counter()
        index = ToolRuleIndex(rules)
        build_ms = (time.perf_counter() - started) * 1000
        subjects = make_subjects(rng, args.calls)
        measure(index, tools, subjects[:500], rng)  # warm up
        timings = measure(index, tools, subjects, rng)
        p50, p99 = percentile(timings, 0.5), percentile(timings, 0.99)
        print(
            f"{layout:<10} {build_ms:>9.1f} {p50:>8.1f} {p99:>8.1f}"
            f" {max(timings):>9.1f} {statistics.fmean(timings):>8.1f}"
        )
    print("target: p99 <= 1000 us per call")


if __name__ == "__main__":
    main()
