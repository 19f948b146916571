"""Running a saturation step on an e-graph without egglog-python's per-call conversion.

``EGraph.run(schedule)`` converts the schedule to an egglog command on every call, walking
every rule of every rule set it names to see whether the e-graph has it already (hashing each
rule's whole declaration tree), and translates the report's rule names back to declarations
the same way: for a small program that was most of a step (issue #15). A *plain* schedule
(runs of rule sets in sequence, no scheduler, no ``until``) becomes the same command every
time, so it is converted once; once the e-graph has registered these very rule sets
(egglog-python's own record, kept across ``push``/``pop``; the declarations compared by
identity), the command runs directly and the report is read by rule name.
Any other schedule, or an e-graph without the rule sets yet, goes through ``EGraph.run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from egglog import EGraph, Schedule, bindings
from egglog.declarations import CombinedRulesetDecl

_COMMANDS: dict[Any, tuple[Any, tuple[Any, ...]] | None] = {}  # decl -> (command, rule sets)
_MAX_COMMANDS = 64


@dataclass(frozen=True)
class StepOutcome:
    """What the saturation driver reads of one run."""

    updated: bool
    can_stop: bool
    fired: dict[str, list[float]] | None  # rule name -> [matches, seconds]; None: see report
    report: Any = None  # egglog's RunReport, when the run went through ``EGraph.run``


def run_schedule(eg: EGraph, schedule: Schedule, rule_of: dict[str, Any] | None = None
                 ) -> StepOutcome:
    """Run ``schedule`` on ``eg``. ``fired`` counts matches and seconds per rule, keyed by the
    ``name`` of ``rule_of[declaration name]`` (rules not in ``rule_of`` are left out); it is
    None when the run went through ``EGraph.run`` (``report`` then holds egglog's report)."""
    decl = schedule.schedule
    if decl not in _COMMANDS:
        rulesets = _plain_rulesets(decl)
        _COMMANDS[decl] = (None if rulesets is None
                           else (eg._state._schedule_to_egg(decl), rulesets))
        while len(_COMMANDS) > _MAX_COMMANDS:
            del _COMMANDS[next(iter(_COMMANDS))]
    entry = _COMMANDS[decl]
    state = eg._state
    if entry is None or not _has(state, schedule, entry[1]):
        report = eg.run(schedule)  # registers the rule sets in this e-graph
        return StepOutcome(report.updated, report.can_stop, None, report)
    (out,) = state.run_program(bindings.RunSchedule(entry[0]))
    raw = out.report
    fired: dict[str, list[float]] = {}
    if rule_of:
        decls = state.rule_name_to_command_decl
        times, matches = raw.search_and_apply_time_per_rule, raw.num_matches_per_rule
        for egg in (*matches, *(k for k in times if k not in matches)):
            rule = rule_of.get(getattr(decls[egg], "name", None) or "")
            if rule is not None:
                counts = fired.setdefault(rule.name, [0, 0.0])
                counts[0] += matches.get(egg, 0)
                counts[1] += times[egg].total_seconds() if egg in times else 0.0
    return StepOutcome(raw.updated, raw.can_stop, fired)


def _has(state: Any, schedule: Schedule, rulesets: tuple[Any, ...]) -> bool:
    """Whether the e-graph has registered these very rule sets (the declarations the schedule
    carries, by identity: a rule set defined again under the same name is new to it)."""
    mine, known = schedule.__egg_decls__._rulesets, state.__egg_decls__._rulesets

    def same(r: Any) -> bool:
        k, m = known.get(r), mine.get(r)
        if r not in state.rulesets or k is None:
            return False
        # a combined rule set is registered as an equal copy (its parts' names): the same if
        # every part is the very rule set (this check by identity alone failed for every
        # combined one, so each step took EGraph.run's slow path)
        return k is m or (isinstance(m, CombinedRulesetDecl) and k == m
                          and all(same(part) for part in m.rulesets))

    return all(same(r) for r in rulesets)


def _plain_rulesets(decl: Any) -> tuple[Any, ...] | None:
    """The rule sets a schedule of plain runs in sequence names; None for any other."""
    kind = type(decl).__name__
    if kind == "SequenceDecl":
        parts = [_plain_rulesets(d) for d in decl.schedules]
        return None if any(p is None for p in parts) else tuple(r for p in parts for r in p)
    if kind == "RunDecl" and decl.scheduler is None and not decl.until:
        return (decl.ruleset,)
    return None
