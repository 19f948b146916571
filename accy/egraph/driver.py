"""Budgeted equality saturation: iteration, e-node and time limits, rollback, run reports.

egglog has neither a node nor a time limit, so ``saturate`` runs one iteration at a time: one
step of the selected rules followed by ``TYPE_RULES`` (so every new e-class has its type
before the next step), then it counts e-nodes (rows of the tensor and operand-list
constructors) and e-classes (rows of ``tensor.type``: one per tensor e-class; both from one
size command) and reads the time. The e-graph is checkpointed (``push``) before the first
step (unless the caller can put a small input back itself: ``restore``) and before every
step that starts within a sixteenth of the node limit (a push copies the whole e-graph,
rules included, so not before every step); a
step that ends above the node limit is rolled back (``pop``) to the last checkpoint, with the
iterations after it, and saturation stops. The stop reason is one of

``saturated``        a step changed nothing: every selected rule is exhausted;
``iteration_limit``  ``iterations`` steps ran and were kept;
``node_limit``       a step grew the e-graph past ``node_limit`` e-nodes and the bounded steps
                     after it (below) ran out, or the next step was predicted to end above
                     twice the limit (e-nodes times the last step's growth factor), or the
                     input alone reaches it;
``time_limit``       the last step ended past ``time_limit_s`` (it is kept: its time is spent
                     either way), or the next step was predicted to (the last step's time
                     scaled by the larger of its growth in e-nodes and its growth in time over
                     the step before, at most 16x). egglog cannot be interrupted, so not
                     starting such a step is how runs stay in budget; a step far dearer than
                     its trend (rules that start feeding each other) can still end past the
                     limit, and ``match_limit`` bounds what one step applies.

``no_gain``          the caller's ``on_step`` said so: its extractions found nothing cheaper
                     for ``patience`` kept steps in a row (the ``saturate`` pass's
                     ``patience``, ``accy.passes.rewriting``): the rules still fire, but
                     what they add does not pay.

``report.predicted`` tells a stop before a step from a stop after one.

Bounded steps: a step that overshoots the node limit is rolled back, and then the run goes on
with every later step bounded by egglog's backoff scheduler (a rule matching more than
``report.bounded_match_limit`` times in a step sits that step out), the limit being the
overshooting step's largest rule match count scaled by the room left over the growth it
caused, halved again on each further overshoot (at most ``_BOUNDED_RETRIES``). So when the
very first step overshoots (one explosive rule), the rules that fit still run and the run
keeps a good iteration instead of the input; the run stops (``node_limit``) when a bounded
step changes nothing. Each bounded step gets a fresh scheduler, so no ban outlives its step.

The report has e-nodes and e-classes after every iteration and, for every selected rule, its
matches and search-and-apply time (from egglog's run reports, by the rule's name) summed
over the kept iterations. ``match_limit`` turns on egglog's backoff scheduler (a rule that
matches more than that in a step is banned for a few steps).

Determinism: with equal inputs and no time-limit stop, the same rules fire in the same order,
so the e-graph is the same and so is the program ``convert.extract`` takes from it (whose tie
breaks ignore e-class ids). Runs stopped by time depend on the machine's speed.

Memory: egglog has no "commit", so each checkpoint stays on egglog's push stack until the
caller pops it (``report.checkpoints`` of them) or drops the e-graph: bounded by
``iterations * node_limit`` rows, and small below a sixteenth of the limit.

The budget's defaults are ``accy.egraph.defaults``'s, the ones the ``saturate`` pass uses.

Dangling e-nodes: on large e-graphs run with ``match_limit``, a step can leave e-nodes whose
operand is an e-class id that no row has as its output (issue #13; the 734-node program in
tests/egraph/data, from step 9 on). The likely cause is egglog's backoff scheduler, which
keeps a banned rule's matches as raw e-class ids until the ban ends (5 steps after a ban,
doubling with each ban) and then applies them without canonicalizing, while incremental
rebuilds only fix rows that hold ids merged since the last rebuild. Such an e-node is equal
to the same e-node over the live e-class, so ``convert.read_egraph`` drops it
(``EClassGraph.dangling`` counts them, the pass's ``dangling-e-nodes`` statistic).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, get_args

from egglog import (
    EGraph,
    Ruleset,
    Schedule,
    back_off,
    bindings,
    eq,
    ruleset,
    run,
    unstable_combine_rulesets,
)
from egglog.egraph_state import span

from accy.egraph.convert import ProgramEGraph
from accy.egraph.defaults import DEFAULT_ITERATIONS, DEFAULT_NODE_LIMIT, DEFAULT_TIME_LIMIT_S
from accy.egraph.rules import RULES, RULESETS, NamedRule, RuleSet, on_unregister
from accy.egraph.sorts import (
    FULL_EGG_NAME,
    LIST_CONS_EGG_NAME,
    LIST_NIL_EGG_NAME,
    SIGNATURES,
    TYPE_EGG_NAME,
    TYPE_RULES,
    Tensor,
    new_egraph,
)
from accy.egraph.steps import StepOutcome, run_schedule
from accy.errors import EGraphError

__all__ = [
    "DEFAULT_ITERATIONS", "DEFAULT_NODE_LIMIT", "DEFAULT_TIME_LIMIT_S", "IterationStats",
    "RuleStats", "SaturationReport", "StopReason", "egglog_ruleset", "egraph_size",
    "equivalent", "saturate", "select_rules",
]

StopReason = Literal["saturated", "no_gain", "iteration_limit", "node_limit", "time_limit"]
_STOP_REASONS: tuple[str, ...] = get_args(StopReason)
_MAX_PREDICTED_GROWTH = 16.0  # cap on the growth factor used to predict the next step's time
_NODE_OVERSHOOT = 2.0  # skip a step predicted to end above this many times the node limit
_CHECKPOINT_GROWTH = 16  # checkpoint before a step once e-nodes x this exceeds the node limit
_BOUNDED_RETRIES = 4  # overshoots after which a run stops (each one halves the match limit)


@dataclass(frozen=True)
class IterationStats:
    """One iteration: the e-graph after it, all rules' matches in it, and its time."""

    index: int  # 1-based
    e_nodes: int
    e_classes: int
    matches: int
    seconds: float
    kept: bool  # False: rolled back (it, or a step after it, overshot the node limit)


@dataclass(frozen=True)
class RuleStats:
    """One selected rule over the kept iterations."""

    name: str
    ruleset: str
    matches: int
    seconds: float


@dataclass(frozen=True)
class SaturationReport:
    """What one saturation did and why it stopped; ``to_dict()`` is JSON-ready."""

    stop_reason: StopReason
    iterations: tuple[IterationStats, ...]
    rules: tuple[RuleStats, ...]
    initial_e_nodes: int
    initial_e_classes: int
    e_nodes: int  # at the end, after any rollback
    e_classes: int
    seconds: float
    iteration_limit: int
    node_limit: int
    time_limit_s: float
    predicted: bool = False  # True: stopped before a step predicted to overshoot a limit
    checkpoints: int = 1  # pushes the run left on the e-graph (pop them to drop the run)
    bounded_match_limit: int | None = None  # steps after an overshoot ran with this limit

    @property
    def rolled_back(self) -> bool:
        return any(not it.kept for it in self.iterations)

    @property
    def rolled_back_iterations(self) -> int:
        return sum(not it.kept for it in self.iterations)

    @property
    def kept_iterations(self) -> int:
        return sum(it.kept for it in self.iterations)

    def matches(self) -> dict[str, int]:
        """Matches per rule name (every selected rule, zero included)."""
        return {r.name: r.matches for r in self.rules}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        """A human-readable summary: stop reason, e-graph growth, rules that fired."""
        lines = [
            f"saturation: {self.stop_reason} after {self.kept_iterations} iterations"
            f"{f' ({self.rolled_back_iterations} rolled back)' if self.rolled_back else ''}"
            f"{' (next one predicted to overshoot)' if self.predicted else ''}, "
            f"{self.initial_e_nodes} -> {self.e_nodes} e-nodes, "
            f"{self.initial_e_classes} -> {self.e_classes} e-classes, {self.seconds:.3f} s "
            f"(limits: {self.iteration_limit} iterations, {self.node_limit} e-nodes, "
            f"{self.time_limit_s:g} s)",
            "  iteration  e-nodes  e-classes  matches  seconds",
        ]
        for it in self.iterations:
            lines.append(f"  {it.index:>9}  {it.e_nodes:>7}  {it.e_classes:>9}  {it.matches:>7}"
                         f"  {it.seconds:>7.3f}{'' if it.kept else '  rolled back'}")
        fired = sorted((r for r in self.rules if r.matches), key=lambda r: (-r.matches, r.name))
        lines.append(f"  rules that fired: {len(fired)} of {len(self.rules)}")
        lines += [f"    {r.name:<32} {r.ruleset:<16} {r.matches:>8} matches  {r.seconds:.3f} s"
                  for r in fired]
        return "\n".join(lines)


_CONSTRUCTORS = frozenset({FULL_EGG_NAME, LIST_NIL_EGG_NAME, LIST_CONS_EGG_NAME,
                           *(sig.egg_name for sig in SIGNATURES.values())})


def select_rules(rulesets: Iterable[str | RuleSet], rules: Iterable[str] | None = None,
                 disable: Iterable[str] = ()) -> tuple[NamedRule, ...]:
    """The rules of ``rulesets``, restricted to ``rules`` and without ``disable``.

    ``rules`` and ``disable`` name rules or rule sets among the selected ones; anything else
    is a ``KeyError`` that lists the valid names. The order is the rule sets' order, then the
    order in which each set's rules were added.
    """
    sets: list[RuleSet] = []
    for rs in rulesets:
        if isinstance(rs, str):
            if rs not in RULESETS:
                raise KeyError(f"unknown rule set {rs!r}; valid rule sets: "
                               f"{', '.join(sorted(RULESETS)) or '(none registered)'}")
            rs = RULESETS[rs]
        if all(rs is not s for s in sets):
            sets.append(rs)
    chosen = [r for s in sets for r in s.rules]
    by_set = {s.name: {r.name for r in s.rules} for s in sets}
    present = {r.name for r in chosen}

    def expand(names: Iterable[str], option: str) -> set[str]:
        out: set[str] = set()
        for n in ([names] if isinstance(names, str) else names):
            if n in by_set:
                out |= by_set[n]
            elif n in present:
                out.add(n)
            else:
                where = ("is not in the selected rule sets" if n in RULES or n in RULESETS
                         else "is unknown")
                valid = ", ".join([*sorted(by_set), *sorted(present)])
                raise KeyError(f"{option}=: rule {n!r} {where}; valid names: {valid}")
        return out

    keep = expand(rules, "rules") if rules is not None else present
    drop = expand(disable, "disable")
    return tuple(r for r in chosen if r.name in keep and r.name not in drop)


_EGG_RULESETS: dict[tuple[int, ...], tuple[tuple[NamedRule, ...], Ruleset]] = {}
_EGG_RULES: dict[int, tuple[NamedRule, Ruleset]] = {}  # id(rule) -> a ruleset of it alone


@on_unregister
def _forget(rs: RuleSet) -> None:
    """Drop the egglog rulesets holding rules of the unregistered set ``rs``."""
    gone = {id(r) for r in rs.rules}
    for key in [k for k, (rules, _) in _EGG_RULESETS.items() if gone & {id(r) for r in rules}]:
        del _EGG_RULESETS[key]
    for key in gone & _EGG_RULES.keys():
        del _EGG_RULES[key]


def _named(prefix: str, text: str, taken: Iterable[Ruleset]) -> str:
    """``prefix-<digest of text>-<n>``: equal names but other rule objects (a rule set built
    twice) get a ruleset of their own."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
    same = sum(rs.__egg_ident__.name.startswith(f"{prefix}-{digest}-") for rs in taken)
    return f"{prefix}-{digest}-{same}"


def _rule_ruleset(rule: NamedRule) -> Ruleset:
    """An egglog ruleset holding ``rule`` alone (cached)."""
    cached = _EGG_RULES.get(id(rule))
    if cached is None:
        name = _named("accy-rule", f"{rule.ruleset}/{rule.name}",
                      (rs for _, rs in _EGG_RULES.values()))
        rs = ruleset(*rule.egg_rules, name=name) if rule.egg_rules else ruleset(name=name)
        cached = _EGG_RULES[id(rule)] = (rule, rs)  # keeps the rule alive: its id stays valid
    return cached[1]


def egglog_ruleset(rules: Sequence[NamedRule]) -> Ruleset:
    """One egglog ruleset running exactly ``rules`` (cached, so reruns reuse it): the rule
    sets of each rule alone, combined. An e-graph declares a rule once, however many
    selections (an ablation's, one rule left out at a time) run it; a new selection is one
    command."""
    key = tuple(id(r) for r in rules)
    cached = _EGG_RULESETS.get(key)
    if cached is None:
        name = _named("accy-rules", "\n".join(f"{r.ruleset}/{r.name}" for r in rules),
                      (rs for _, rs in _EGG_RULESETS.values()))
        parts = [_rule_ruleset(r) for r in rules]
        rs = unstable_combine_rulesets(*parts, name=name) if parts else ruleset(name=name)
        cached = _EGG_RULESETS[key] = (tuple(rules), rs)  # keeps the rules alive: ids stay valid
    return cached[1]


def egraph_size(egraph: EGraph) -> tuple[int, int]:
    """(e-nodes, tensor e-classes) of an e-graph whose types are up to date."""
    # One size command for every table: asking table by table (``EGraph.function_size``)
    # costs ~0.1 ms of Python per table, 55 tables, every iteration.
    (out,) = egraph._state.run_program(bindings.PrintSize(span(1), None))
    sizes = dict(out.sizes)
    return sum(sizes.get(name, 0) for name in _CONSTRUCTORS), sizes.get(TYPE_EGG_NAME, 0)


def _check_limits(iterations: int, node_limit: int, time_limit_s: float,
                  match_limit: int | None) -> None:
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0:
        raise ValueError(f"iterations must be a non-negative int, got {iterations!r}")
    if isinstance(node_limit, bool) or not isinstance(node_limit, int) or node_limit < 1:
        raise ValueError(f"node_limit must be a positive int, got {node_limit!r}")
    if not time_limit_s > 0:
        raise ValueError(f"time_limit_s must be positive, got {time_limit_s!r}")
    if match_limit is not None and (not isinstance(match_limit, int) or match_limit < 1):
        raise ValueError(f"match_limit must be a positive int or None, got {match_limit!r}")


def _step(rules: Sequence[NamedRule], match_limit: int | None, *,
          persistent: bool = True) -> Schedule:
    user = egglog_ruleset(rules)
    scheduler = None
    if match_limit:
        scheduler = back_off(match_limit=match_limit)
        scheduler = scheduler.persistent() if persistent else scheduler
    return run(user, scheduler=scheduler) + run(TYPE_RULES)


def _run_step(eg: EGraph, step: Schedule, rule_of: dict[str, NamedRule]) -> StepOutcome:
    try:
        out = run_schedule(eg, step, rule_of)
        if out.fired is None:  # a schedule run_schedule does not take apart: egglog's report
            out = replace(out, fired=_per_rule(out.report, rule_of))
        return out
    except BaseException as e:
        eg.pop()  # back to the last checkpoint, then say what went wrong
        if "Illegal merge attempted for function tensor.type" in str(e):
            raise EGraphError("a rule united tensors of different types (its right-hand side "
                              "carries a wrong type argument)") from e
        raise EGraphError(f"saturation failed in a rule: {type(e).__name__}: {e}") from e


def saturate(
    target: ProgramEGraph | EGraph,
    rulesets: RuleSet | str | Iterable[RuleSet | str],
    *,
    rules: Iterable[str] | None = None,
    disable: Iterable[str] = (),
    iterations: int = DEFAULT_ITERATIONS,
    node_limit: int = DEFAULT_NODE_LIMIT,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    match_limit: int | None = None,
    on_step: Callable[[SaturationReport], bool | StopReason | None] | None = None,
    capped: Iterable[str] = (),
    capped_iterations: int | None = None,
    restore: Callable[[], None] | None = None,
    dormant: Iterable[str] = (),
) -> SaturationReport:
    """Saturate ``target`` with the selected rules within the budget (module docstring).

    ``rulesets`` are rule sets or their registered names; ``rules`` and ``disable`` narrow
    them by rule or rule-set name (``select_rules``). The e-graph is changed in place.
    ``on_step`` is called after every step that is kept, with the report so far (the
    saturation worker extracts there, so that a step it cannot interrupt loses nothing);
    when it returns False the run stops there (``time_limit``, predicted: the caller's own
    work after the next step would end past its deadline); when it returns a stop reason
    (``no_gain``: its extractions stopped paying) the run stops there with that reason.
    The rules named in ``capped`` (multi-pattern rules) run only in the first
    ``capped_iterations`` iterations (None: in every one), as Tensat caps them.
    ``restore`` puts the input back into the e-graph (the caller's own ``pop``, ``push`` and
    reload): given it, a small input (e-nodes x 16 within the node limit) is not pushed as
    the first checkpoint, and a rollback to the input calls it instead of ``pop``; a push and
    a pop cost more than most small runs' rule steps.
    ``dormant`` names selected rules known never to match in this run
    (``accy.passes.prefilter.dormant``): they are not run (nor need to be declared in the
    e-graph) and are reported with no matches.
    """
    _check_limits(iterations, node_limit, time_limit_s, match_limit)
    eg = target.egraph if isinstance(target, ProgramEGraph) else target
    if isinstance(rulesets, RuleSet | str):
        rulesets = [rulesets]
    selected = select_rules(rulesets, rules, disable)
    quiet = frozenset(dormant)
    running = [r for r in selected if r.name not in quiet]
    rule_of = {egg: r for r in running for egg in r.egg_names}
    step = _step(running, match_limit)
    if capped_iterations is not None and (not isinstance(capped_iterations, int)
                                          or capped_iterations < 0):
        raise ValueError(f"capped_iterations must be a non-negative int or None, "
                         f"got {capped_iterations!r}")
    capped = frozenset(capped)
    capped_at = capped_iterations if capped & {r.name for r in running} else None
    later = _step([r for r in running if r.name not in capped], match_limit)
    start = time.perf_counter()
    run_schedule(eg, run(TYPE_RULES))  # terms registered by hand get their types too
    nodes0, classes0 = nodes, classes = egraph_size(eg)
    history: list[IterationStats] = []
    fired: list[dict[str, list[float]]] = []  # per iteration: [matches, seconds] per rule
    # checkpoints: (len(history) when taken, e-nodes, e-classes, pushed); the first, the
    # input, is restored by ``restore`` rather than pushed when the input is small
    pushed = restore is None or nodes * _CHECKPOINT_GROWTH > node_limit
    if pushed:
        eg.push()
    checkpoints = [(0, nodes, classes, pushed)]
    reason: StopReason = "iteration_limit"
    previous_nodes = nodes
    predicted = False
    bounded: int | None = None  # the match limit of bounded steps, after an overshoot
    overshoots = 0

    def report_now() -> SaturationReport:
        return _report(reason, history, fired, selected, nodes0, classes0, nodes, classes,
                       time.perf_counter() - start, iterations, node_limit, time_limit_s,
                       predicted, sum(c[3] for c in checkpoints), bounded)

    while len(history) < iterations:
        if nodes >= node_limit:
            reason, predicted = "node_limit", True
            break
        if history and history[-1].kept:  # after a rollback the trend says nothing
            growth = history[-1].e_nodes / max(previous_nodes, 1)
            if nodes * growth > _NODE_OVERSHOOT * node_limit:
                reason, predicted = "node_limit", True
                break
            if _predicted_end(history, growth, start) > time_limit_s:
                reason, predicted = "time_limit", True
                break
        t0 = time.perf_counter()
        if not checkpoints or (checkpoints[-1][0] < len(history)
                               and nodes * _CHECKPOINT_GROWTH > node_limit):
            eg.push()
            checkpoints.append((len(history), nodes, classes, True))
        capped_off = capped_at is not None and len(history) >= capped_at
        report = _run_step(eg, later if capped_off else step, rule_of)
        after_nodes, after_classes = egraph_size(eg)
        now = time.perf_counter()
        fired.append(report.fired)
        history.append(IterationStats(len(history) + 1, after_nodes, after_classes,
                                      int(sum(v[0] for v in fired[-1].values())), now - t0,
                                      kept=True))
        done = not report.updated and report.can_stop  # nothing changed
        if not done and after_nodes > node_limit:
            kept, nodes, classes, pushed = checkpoints.pop()
            if pushed:
                eg.pop()  # back to the last checkpoint
            else:
                restore()  # the input, put back by the caller: still the checkpoint
                checkpoints.append((kept, nodes, classes, False))
            history[kept:] = [replace(it, kept=False) for it in history[kept:]]
            reason = "node_limit"
            # Bound the steps from here on (egglog's backoff: a rule matching more than the
            # limit in a step sits it out), so that an explosive first step still leaves a
            # good iteration to keep rather than the input: the limit scales the largest
            # rule's matches by the room left over the growth seen, halving on each overshoot.
            most = max((v[0] for v in fired[-1].values()), default=1)
            room = max(node_limit - nodes, 1) / max(after_nodes - nodes, 1)
            limit = max(1, int(most * room / 2))
            was = bounded
            bounded = limit if bounded is None else max(1, min(limit, bounded // 2))
            overshoots += 1
            if (overshoots > _BOUNDED_RETRIES or was == 1
                    or time.perf_counter() - start > time_limit_s):
                break
            step = _step(running, bounded, persistent=False)
            later = _step([r for r in running if r.name not in capped], bounded,
                          persistent=False)
            continue
        previous_nodes, nodes, classes = nodes, after_nodes, after_classes
        if bounded is not None and not report.updated:
            reason = "node_limit"  # what fits the match limit is done; the rest overshoots
            break
        said = on_step(report_now()) if on_step is not None else None
        if said is False:
            reason, predicted = "time_limit", True  # the caller predicts its own work late
            break
        if isinstance(said, str):
            if said not in _STOP_REASONS:
                raise ValueError(f"on_step returned {said!r}: a stop reason is one of "
                                 f"{', '.join(_STOP_REASONS)}")
            reason = said
            break
        if done:
            reason = "saturated"
            break
        if now - start > time_limit_s:
            reason = "time_limit"
            break
    return report_now()


def _report(reason: StopReason, history: list[IterationStats],
            fired: list[dict[str, list[float]]], selected: Sequence[NamedRule], nodes0: int,
            classes0: int, nodes: int, classes: int, seconds: float, iterations: int,
            node_limit: int, time_limit_s: float, predicted: bool, checkpoints: int,
            bounded: int | None) -> SaturationReport:
    totals = {r.name: [0, 0.0] for r in selected}
    for it, per_rule in zip(history, fired, strict=True):
        for name, (count, secs) in per_rule.items():
            if it.kept:
                totals[name][0] += int(count)
                totals[name][1] += secs
    return SaturationReport(
        stop_reason=reason,
        iterations=tuple(history),
        rules=tuple(RuleStats(r.name, r.ruleset, int(totals[r.name][0]), totals[r.name][1])
                    for r in selected),
        initial_e_nodes=nodes0, initial_e_classes=classes0, e_nodes=nodes, e_classes=classes,
        seconds=seconds, iteration_limit=iterations, node_limit=node_limit,
        time_limit_s=time_limit_s, predicted=predicted, checkpoints=checkpoints,
        bounded_match_limit=bounded,
    )


def _per_rule(report: Any, rule_of: dict[str, NamedRule]) -> dict[str, list[float]]:
    """[matches, seconds] per accy rule name in one egglog run report (type rules left out)."""
    matches, times = report.num_matches_per_rule, report.search_and_apply_time_per_rule
    out: dict[str, list[float]] = {}
    for decl in (*matches, *(d for d in times if d not in matches)):
        rule = rule_of.get(getattr(decl, "name", None) or "")
        if rule is not None:
            entry = out.setdefault(rule.name, [0, 0.0])
            entry[0] += matches.get(decl, 0)
            entry[1] += times[decl].total_seconds() if decl in times else 0.0
    return out


def _predicted_end(history: Sequence[IterationStats], growth: float, start: float) -> float:
    """When the next step would end: the last step's time scaled by the larger of its growth
    in e-nodes and its growth in time over the step before (between 1 and the cap)."""
    last = history[-1]
    factor = max(1.0, growth)
    if len(history) > 1 and history[-2].seconds > 0:
        factor = max(factor, last.seconds / history[-2].seconds)
    return time.perf_counter() - start + last.seconds * min(factor, _MAX_PREDICTED_GROWTH)


def equivalent(lhs: Tensor, rhs: Tensor, rulesets: RuleSet | str | Iterable[RuleSet | str],
               **budget: Any) -> tuple[bool, SaturationReport]:
    """Whether the rules prove ``lhs == rhs`` within the budget (``saturate``'s keywords).

    The way a rule's test proves an equivalence on concrete terms::

        x = Tensor.param(0, "f32[4]")
        proved, report = equivalent(Tensor.neg(Tensor.neg(x, "f32[4]"), "f32[4]"), x,
                                    canonical, rules=["neg-neg"])
    """
    eg = new_egraph()
    eg.register(lhs, rhs)
    report = saturate(eg, rulesets, **budget)
    return eg.check_bool(eq(lhs).to(rhs)), report
