"""Skill decisions: HTTP throughput against the bare baseline, and the chain's own cost.

Run by hand (never by CI), from the project root:

    .venv/bin/python benchmarks/skill_decisions.py                   # PostgreSQL
    .venv/bin/python benchmarks/skill_decisions.py --db both --seconds 5
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python benchmarks/skill_decisions.py

State is throwaway: a PostgreSQL database named `aimon_bench_approvals`, created and
dropped here (never anyone else's), or a SQLite file in a temporary folder. It holds one
runtime and its token, 1,000 skill rules (exact names, prefix globs, mid-name wildcards,
runtime-specific ones), and two sessions with grants, so the 3 skills asked about are
answered by three different layers: `deploy-prod` by the session (SESSION),
`notify-team` by the invoking session (INVOKING_SESSION), `read-file` by a rule (RULE).

1. Chain evaluation, in process, 1,000 rules (target p99 ≤ 1 ms): the pure part (rule
   index searches, uncached, and `chain_decide` for the 3 skills), the index's worst case (a
   200-character skill no rule matches) on its own, and `skills_decide` whole, with its
   queries. Each in 5 trials; the best trial's p99 is the figure least disturbed by
   whatever else the machine runs, the median trial's the typical one.
2. Throughput over real HTTP on 127.0.0.1: uvicorn with benchmarks.settings, driven by
   `wrk` (or threads with http.client) over keep-alive connections, alternating rounds of
   `/bench/baseline` (the same token lookup, a small JSON body) and
   `/api/v1/skill-decisions`; the median of each and their ratio (target ≥ 0.80). Also
   the median of each round's ratio to the baseline round before it, and requests per
   server CPU second (uvicorn's processes and, on PostgreSQL, its backends): on a shared
   machine, the figures least moved by everyone else's load. Unless `--no-two-step`,
   `/bench/skill-decisions-two-step` (the same endpoint without its fused token-and-
   decision read) takes its turn in each round too, for a before/after in one run. With
   `--prepared-baseline`, so does `/bench/baseline-prepared`, whose token lookup is a
   prepared statement on PostgreSQL as the fused read is: the ratio against a baseline
   whose shared cost is made as cheap.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from http.client import HTTPConnection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _http

BENCH_DB = "aimon_bench_approvals"
RULES = 1000
TARGET_RATIO = 0.80
TARGET_P99_MS = 1.0
TRIALS = 5
BASELINE = "/bench/baseline"
DECISIONS = "/api/v1/skill-decisions"
TWO_STEP = "/bench/skill-decisions-two-step"
BASELINE_PREPARED = "/bench/baseline-prepared"
SKILLS = ["deploy-prod", "notify-team", "read-file"]
BODY = {
    "skills": SKILLS,
    "session_id": "s-bench",
    "invoking_session_id": "s-parent",
    "turn_id": "t-1",
    "principal": "bench-operator",
}


# --- Child processes (the benchmark's environment, Django set up) ---------------------------------


def _django() -> None:
    import django

    django.setup()


def rule_specs() -> list[tuple[str, str, bool]]:
    """(pattern, action, runtime-specific) for 1,000 rules of every shape the index knows."""
    actions = ["ALLOW", "DENY", "ASK"]
    specs = [("read-*", "ALLOW", False)]
    specs += [(f"tool-{i:04d}", actions[i % 3], False) for i in range(400)]
    specs += [(f"team-{i:03d}-*", actions[i % 3], False) for i in range(300)]
    specs += [(f"svc{i:03d}-*-deploy*", actions[i % 3], False) for i in range(150)]
    specs += [(f"*-job-{i:03d}", actions[i % 3], False) for i in range(49)]
    specs += [(f"rt-{i:03d}*", actions[i % 3], True) for i in range(100)]
    assert len(specs) == RULES
    return specs


def seed() -> None:
    """Runtime, token, operator, 1,000 rules and the granted sessions; prints the token."""
    _django()
    from django.db import transaction

    from aimon_admin.accounts.roles import Role
    from aimon_admin.accounts.services import user_create
    from aimon_admin.approvals.choices import Answer
    from aimon_admin.approvals.rules import rule_create
    from aimon_admin.approvals.services import RequestInput, request_answer, request_create
    from aimon_admin.core.actors import Actor
    from aimon_admin.runtimes.services import runtime_create, token_issue

    actor = Actor.system("benchmark")
    operator = user_create(username="bench-operator", password=None, roles=[Role.OPERATOR], actor=actor)
    runtime = runtime_create(name="bench", actor=actor)
    _, token = token_issue(runtime=runtime, actor=actor, label="benchmark")
    with transaction.atomic():
        for pattern, action, own in rule_specs():
            rule_create(pattern=pattern, action=action, actor=actor, runtime=runtime if own else None)
    for session_id, skill in (("s-bench", "deploy-prod"), ("s-parent", "notify-team")):
        request, _ = request_create(
            RequestInput(runtime=runtime, skills=[skill], session_id=session_id, principal=operator.username)
        )
        request_answer(request=request, user=operator, answer=Answer.ALLOW_SESSION)
    print(json.dumps({"token": token}))


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def chain() -> None:
    """Time the chain in process; prints the figures as JSON."""
    _django()
    from aimon_admin.approvals import policy, rules, services
    from aimon_admin.approvals.choices import GrantDecision, GrantScope, RuleAction
    from aimon_admin.approvals.models import Session, SkillRule
    from aimon_admin.runtimes.models import AgentRuntime

    runtime = AgentRuntime.objects.get(name="bench")
    session = Session.objects.get(runtime=runtime, session_id="s-bench")
    invoking = Session.objects.get(runtime=runtime, session_id="s-parent")
    index = rules.rule_index()
    held = {
        "deploy-prod": policy.Layers(session=GrantDecision.ALLOW),
        "notify-team": policy.Layers(invoking_session=GrantDecision.ALLOW),
        "read-file": policy.Layers(),
    }

    def evaluate(skills: dict[str, policy.Layers]) -> None:
        for skill, layers in skills.items():
            rule = index.find(runtime.pk, skill)  # the search itself, not the remembered answer
            policy.chain_decide(
                policy.Layers(
                    turn=layers.turn,
                    session=layers.session,
                    invoking_session=layers.invoking_session,
                    agent=layers.agent,
                    rule=rule.action if rule else None,
                )
            )

    def pure() -> None:
        evaluate(held)

    worst = {"x" * 200: policy.Layers()}  # no rule matches: every prefix bucket is tried

    def miss() -> None:
        evaluate(worst)

    def whole() -> None:
        services.skills_decide(
            runtime=runtime, skills=SKILLS, session=session, invoking_session=invoking, turn_id="t-1"
        )

    verdicts = services.skills_decide(
        runtime=runtime, skills=SKILLS, session=session, invoking_session=invoking, turn_id="t-1"
    )
    assert [(v.decision, v.source) for v in verdicts] == [
        ("ALLOW", "SESSION"),
        ("ALLOW", "INVOKING_SESSION"),
        ("ALLOW", "RULE"),
    ], verdicts
    figures: dict[str, object] = {}
    cases = (("pure", pure, 5000), ("miss", miss, 5000), ("skills_decide", whole, 1000))
    for name, call, rounds in cases:
        for _ in range(200):
            call()
        # On a shared machine one preemption is several ms, which is what a p99 of single
        # calls would report: trials, so the least and the typically disturbed show.
        trials = []
        for _ in range(TRIALS):
            samples = []
            for _ in range(rounds):
                started = time.perf_counter_ns()
                call()
                samples.append((time.perf_counter_ns() - started) / 1e6)
            trials.append(
                {"p50": percentile(samples, 50), "p99": percentile(samples, 99), "max": max(samples)}
            )
        trials.sort(key=lambda t: t["p99"])
        figures[name] = {"n": rounds, "best": trials[0], "median": trials[len(trials) // 2]}
    specs = [
        policy.RuleSpec(r.pk, r.runtime_id, r.pattern, RuleAction(r.action), GrantScope(r.widest_scope))
        for r in SkillRule.objects.all()
    ]
    started = time.perf_counter()
    policy.RuleIndex(specs)
    figures["index_build_ms"] = (time.perf_counter() - started) * 1000
    figures["rules_indexed"] = len(specs)
    print(json.dumps(figures))


# --- Load ------------------------------------------------------------------------------------------


def check_answer(port: int, path: str, token: str, body: str) -> None:
    conn = HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("POST", path, body=body, headers=_http.headers(token))
    response = conn.getresponse()
    got = json.loads(response.read())
    expected = [["ALLOW", "SESSION"], ["ALLOW", "INVOKING_SESSION"], ["ALLOW", "RULE"]]
    if response.status != 200 or [[d["decision"], d["source"]] for d in got["decisions"]] != expected:
        raise SystemExit(f"{path}: unexpected answer: {response.status} {got}")


def measure(label: str, database_url: str, args: argparse.Namespace) -> bool:
    env = _http.server_env(database_url, args)
    token = _http.child_json(__file__, "--seed", env)["token"]
    figures = _http.child_json(__file__, "--chain", env)
    ok = True
    print(f"{label}: chain evaluation in process, {figures['rules_indexed']:,} rules")
    for name, what in (
        ("pure", "rule lookups + chain_decide, 3 skills"),
        ("miss", "rule lookup + chain_decide, one 200-char skill no rule matches (worst case)"),
        ("skills_decide", "skills_decide, 3 skills, with its queries"),
    ):
        f = figures[name]
        best, median = f["best"], f["median"]
        print(
            f"    {what}: p50 {median['p50']:.3f} ms, p99 {best['p99']:.3f} ms best trial / "
            f"{median['p99']:.3f} ms median trial, max {median['max']:.3f} ms "
            f"({TRIALS} trials of {f['n']:,}; target p99 ≤ {TARGET_P99_MS} ms)"
        )
    ok &= figures["pure"]["best"]["p99"] <= TARGET_P99_MS
    if args.chain_only:
        return ok
    print(f"    building the index of every rule: {figures['index_build_ms']:.1f} ms (once per rule change)")

    run, client = _http.load_runner(args)
    body = json.dumps(BODY)
    paths = [BASELINE, DECISIONS] + ([] if args.no_two_step else [TWO_STEP])
    if args.prepared_baseline:
        paths.append(BASELINE_PREPARED)
    with _http.uvicorn(env, token, args) as server:
        for path in (DECISIONS, TWO_STEP):
            check_answer(server.port, path, token, body)
        rounds = _http.alternate(run, server, paths, token, [body], args)
    base, real = rounds[BASELINE], rounds[DECISIONS]
    b, r = statistics.median(x.rate for x in base), statistics.median(x.rate for x in real)
    print(
        f"    throughput: baseline {b:,.0f} req/s, skill-decisions {r:,.0f} req/s, ratio {r / b:.2f} "
        f"(target ≥ {TARGET_RATIO:.2f}; median of {args.rounds} x {args.seconds}s rounds, {client}, "
        f"{args.connections} connections, {args.workers} uvicorn worker(s), CONN_MAX_AGE={args.conn_max_age})"
    )
    names = {
        DECISIONS: "skill-decisions",
        TWO_STEP: "two-step (no fused read)",
        BASELINE_PREPARED: "baseline-prepared",
    }
    for path in paths[1:]:
        name = names[path]
        print(
            f"    {name}: ratio of medians {statistics.median(x.rate for x in rounds[path]) / b:.2f}, "
            f"paired rounds {_http.paired_ratio(rounds[path], base):.2f}, "
            f"per server CPU second {_http.paired_ratio(rounds[path], base, 'per_cpu'):.2f}"
        )
    if args.prepared_baseline:
        prepared = rounds[BASELINE_PREPARED]
        print(
            "    skill-decisions against baseline-prepared: "
            f"paired rounds {_http.paired_ratio(real, prepared):.2f}, "
            f"per server CPU second {_http.paired_ratio(real, prepared, 'per_cpu'):.2f}"
        )
    for path in paths:
        print(f"    {path} rounds req/s: {', '.join(f'{x.rate:,.0f}' for x in rounds[path])}")
        print(f"    {path} rounds req per CPU s: {', '.join(f'{x.per_cpu:,.0f}' for x in rounds[path])}")
    return ok and r / b >= TARGET_RATIO


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    _http.add_common_arguments(parser, db="postgres")
    parser.add_argument(
        "--prepared-baseline",
        action="store_true",
        help="also rounds of a baseline whose token lookup is prepared (PostgreSQL), as the fused read is",
    )
    parser.add_argument(
        "--no-two-step", action="store_true", help="skip the rounds of the endpoint without its fused read"
    )
    parser.add_argument("--chain-only", action="store_true", help="skip the HTTP throughput rounds")
    parser.add_argument("--seed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--chain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.seed:
        seed()
        return 0
    if args.chain:
        chain()
        return 0

    results = []
    if args.db in ("sqlite", "both"):
        with tempfile.TemporaryDirectory(prefix="aimon_bench_approvals_") as folder:
            results.append(measure("SQLite", f"sqlite:///{folder}/bench.sqlite3", args))
    if args.db in ("postgres", "both"):
        with _http.throwaway_pg(BENCH_DB) as url:
            results.append(measure("PostgreSQL", url, args))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
