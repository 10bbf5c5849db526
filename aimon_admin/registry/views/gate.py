"""The gate simulator and the NON_DESTRUCTIVE worklist, "Tools to review" on its page."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

from aimon_admin.core.plurals import counted
from aimon_admin.registry import extensions, policy, selectors
from aimon_admin.registry.choices import (
    DestructiveBehavior,
    GateReason,
    IdempotencyBehavior,
    SideEffectLevel,
    ToolDecision,
)
from aimon_admin.registry.forms import (
    OUTCOME_ASKS,
    OUTCOME_DENIED_UNATTENDED,
    OUTCOME_HIDDEN,
    OUTCOME_NO_QUESTION,
    OUTCOMES,
    UNATTENDED,
    GateSettingsForm,
    ReviewForm,
    SimulatorForm,
)
from aimon_admin.registry.views._common import render_page
from aimon_admin.registry.views.findings import relay_findings_context
from aimon_admin.runtimes.models import AgentRuntime

# Messages users see (tests import these). The outcome labels name what GateResult decided.
FORECAST = (
    "If the gate were wired now with these settings, {count} write tool would fail on unattended paths.",
    "If the gate were wired now with these settings, {count} write tools would fail on unattended paths.",
)
WORKLIST_SHOWN = 50
SIMULATOR_SHOWN = 500
NO_ENABLED_RUNTIME = "Every runtime is disabled: choose one above to see what its settings would decide."
# U5: what the operator's ALLOW rules and pre-approvals answer of the unattended refusals.
RULES_ANSWER_EVERY_CALL = (
    "Rules answer every unattended call of {count} tool the gate alone would deny.",
    "Rules answer every unattended call of {count} tools the gate alone would deny.",
)
RULES_ANSWER_SOME_CALLS = (
    "Rules answer some unattended calls of {count} tool the gate alone would deny (the calls their "
    "patterns match); its other calls are still denied.",
    "Rules answer some unattended calls of {count} tools the gate alone would deny (the calls their "
    "patterns match); their other calls are still denied.",
)
# The runtime this user last chose on the simulator or the worklist (their session).
GATE_RUNTIME_KEY = "registry:gate-runtime"


# --- Gate simulator and worklist --------------------------------------------------------------


def outcome_label(result: policy.GateResult) -> str:
    """The simulator's words for what policy.gate_decision decided."""
    if result.reason == GateReason.ABOVE_CEILING:
        return OUTCOME_HIDDEN
    if result.reason == GateReason.UNATTENDED_NO_CHANNEL:
        return OUTCOME_DENIED_UNATTENDED
    return OUTCOME_NO_QUESTION if result.decision == ToolDecision.ALLOW else OUTCOME_ASKS


def _gate_form(request: HttpRequest, form_class: type[GateSettingsForm]) -> GateSettingsForm | None:
    """The settings form, bound to the query or to the default runtime
    (`selectors.runtime_default_for_gate`); unbound when every runtime is disabled (the
    user picks one); None if no runtime exists."""
    data = request.GET
    if "runtime" not in data:
        default = selectors.runtime_default_for_gate(remembered=request.session.get(GATE_RUNTIME_KEY))
        if default is None:
            return form_class() if AgentRuntime.objects.exists() else None
        data = data.copy()
        data["runtime"] = default.name
    return form_class(data)


def _remember_runtime(request: HttpRequest, runtime: AgentRuntime) -> None:
    """Keep a runtime the user chose (not one chosen for them), for their next visit."""
    if "runtime" in request.GET and request.session.get(GATE_RUNTIME_KEY) != runtime.name:
        request.session[GATE_RUNTIME_KEY] = runtime.name


@dataclass(frozen=True)
class SimulatedTool:
    """One row of the simulator: what names the tool, its axes, and the gate's outcome."""

    pk: int
    name: str
    server: str | None
    axes: policy.ToolAxes
    outcome: str
    reason: GateReason
    # U5, on unattended refusals: the ALLOW rules and pre-approvals that answer some of its
    # calls, and whether one answers every call.
    answered_by: tuple[extensions.AllowRule, ...] = ()
    every_call: bool = False


@dataclass(frozen=True)
class RulesAnswer:
    rules: tuple[extensions.AllowRule, ...]
    every_call: bool


def rules_answer(rules: Any, *, server: str | None, name: str, axes: policy.ToolAxes) -> RulesAnswer:
    """Which of `rules` (extensions.unattended_rules) answer a tool's unattended calls: a
    rule for every call answers nothing of a destructive tool (U3, U5: never wholesale)."""
    destructive = axes.effective_destructive == DestructiveBehavior.DESTRUCTIVE
    found = tuple(
        rule for rule in rules.get((server or "", name), ()) if not (rule.every_call and destructive)
    )
    return RulesAnswer(found, any(rule.every_call for rule in found))


def _axes(level: str, destructive: str, idempotency: str) -> policy.ToolAxes:
    return policy.ToolAxes(
        SideEffectLevel(level), DestructiveBehavior(destructive), IdempotencyBehavior(idempotency)
    )


@require_GET
@login_required
@permission_required("registry.view_tool", raise_exception=True)
def simulator_view(request: HttpRequest) -> HttpResponse:
    form = _gate_form(request, SimulatorForm)
    context: dict[str, Any] = {
        "form": form,
        "rows": [],
        "tab": "simulator",
        "no_enabled_runtime": NO_ENABLED_RUNTIME,
    }
    if form is not None and form.is_valid():
        runtime, ceiling, exempt = form.settings()
        _remember_runtime(request, runtime)
        attended = form.cleaned_data.get("mode") != UNATTENDED
        wanted = form.cleaned_data.get("outcome")
        counts: Counter[str] = Counter()
        answered: Counter[str] = Counter()
        rules = extensions.unattended_rules(runtime) if not attended else {}
        rows = []
        # Plain values, not model instances: a runtime may see thousands of tools.
        tools = selectors.tools_available_to(runtime=runtime).values_list(
            "pk", "name", "server__name", "side_effect_level", "destructive_behavior", "idempotency_behavior"
        )
        for pk, name, server, *axes_values in tools:
            axes = _axes(*axes_values)
            result = policy.gate_decision(axes, ceiling=ceiling, exempt_at_or_below=exempt, attended=attended)
            outcome = outcome_label(result)
            counts[outcome] += 1
            answer = RulesAnswer((), False)
            if outcome == OUTCOME_DENIED_UNATTENDED:
                answer = rules_answer(rules, server=server, name=name, axes=axes)
                if answer.rules:
                    answered["every" if answer.every_call else "some"] += 1
            if (not wanted or outcome == wanted) and len(rows) <= SIMULATOR_SHOWN:
                rows.append(
                    SimulatedTool(
                        pk, name, server, axes, outcome, result.reason, answer.rules, answer.every_call
                    )
                )
        context.update(
            runtime=runtime,
            ceiling=ceiling,
            exempt=exempt,
            attended=attended,
            rows=rows[:SIMULATOR_SHOWN],
            more_rows=len(rows) > SIMULATOR_SHOWN,
            summary=[(label, counts[label]) for label in OUTCOMES if counts[label]],
            total=sum(counts.values()),
            rules_answer=_rules_sentences(answered["every"], answered["some"]),
        )
    return render_page(request, "registry/simulator.html", context, "results")


def _rules_sentences(every: int, some: int) -> list[str]:
    sentences = [counted(RULES_ANSWER_EVERY_CALL, every)] if every else []
    return [*sentences, counted(RULES_ANSWER_SOME_CALLS, some)] if some else sentences


Named = tuple[str | None, str, policy.ToolAxes]  # server, name, axes


def _unattended_failures(tools: list[Named], ceiling: str, exempt: str) -> list[Named]:
    """Write tools the gate would deny with nobody to ask (T8: the worklist's forecast)."""
    return [
        tool
        for tool in tools
        if tool[2].level == SideEffectLevel.MUTATING
        and policy.gate_decision(tool[2], ceiling=ceiling, exempt_at_or_below=exempt, attended=False).decision
        == ToolDecision.DENY
    ]


@require_GET
@login_required
@permission_required("registry.view_tool", raise_exception=True)
def worklist_view(request: HttpRequest) -> HttpResponse:
    form = _gate_form(request, GateSettingsForm)
    can_review = request.user.has_perm("registry.change_tool")
    context: dict[str, Any] = {
        "form": form,
        "items": [],
        "tab": "worklist",
        "can_review": can_review,
        "no_enabled_runtime": NO_ENABLED_RUNTIME,
    }
    context.update(relay_findings_context(request))
    if form is not None and form.is_valid():
        runtime, ceiling, exempt = form.settings()
        _remember_runtime(request, runtime)
        available = selectors.tools_available_to(runtime=runtime)
        tools: list[Named] = [
            (server, name, _axes(*values))
            for server, name, *values in available.values_list(
                "server__name", "name", "side_effect_level", "destructive_behavior", "idempotency_behavior"
            )
        ]
        writes = available.filter(side_effect_level=SideEffectLevel.MUTATING)
        unreviewed = writes.filter(destructive_behavior=DestructiveBehavior.DESTRUCTIVE, review_finding="")
        pending = list(unreviewed.select_related("runtime")[: WORKLIST_SHOWN + 1])
        reviewed = list(
            writes.exclude(review_finding="")
            .select_related("runtime", "reviewed_by")
            .order_by("-reviewed_at", "name")[: WORKLIST_SHOWN + 1]
        )
        failing = _unattended_failures(tools, ceiling, exempt)
        # U5: what rules answer of those refusals; a tool they answer whole no longer fails.
        rules = extensions.unattended_rules(runtime)
        answers = [rules_answer(rules, server=server, name=name, axes=axes) for server, name, axes in failing]
        every = sum(1 for answer in answers if answer.every_call)
        some = sum(1 for answer in answers if answer.rules and not answer.every_call)
        context.update(
            runtime=runtime,
            ceiling=ceiling,
            exempt=exempt,
            writes=sum(1 for _server, _name, axes in tools if axes.level == SideEffectLevel.MUTATING),
            failing=len(failing) - every,
            forecast=counted(FORECAST, len(failing) - every),
            rules_answer=_rules_sentences(every, some),
            failing_if_exempt=len(_unattended_failures(tools, ceiling, SideEffectLevel.MUTATING)),
            items=[
                {
                    "tool": tool,
                    "form": ReviewForm(auto_id=f"id_review_{tool.pk}_%s") if can_review else None,
                    "recorded": False,
                }
                for tool in pending[:WORKLIST_SHOWN]
            ],
            more_pending=len(pending) > WORKLIST_SHOWN,
            reviewed=reviewed[:WORKLIST_SHOWN],
            more_reviewed=len(reviewed) > WORKLIST_SHOWN,
            return_to=request.get_full_path(),
        )
    return render_page(request, "registry/worklist.html", context, "results")
