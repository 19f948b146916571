"""Rule ablation: which rewrite rules matter for which programs.

For every suite program (and seed) the default pipeline runs under these configurations of
the rewrite rules (what the three rewrite passes -- ``constant-fold``'s egglog step,
``canonicalize`` and ``saturate`` -- may use):

``all``              every rule the policy enables (the default pipeline);
``none``             no rules at all (constant folding by evaluation still runs);
``-R``               without rule set ``R`` (``saturate{disable=R}``; for ``canonical`` and
                     ``fold`` also in ``canonicalize`` / ``constant-fold``);
``only:R``           rule set ``R`` alone;
``-rule:X``          without rule ``X`` -- run for every rule that fired in the ``all`` run of
                     that program (a rule that never fires cannot change the result), as a
                     second sweep after the first.

Each run records the extracted cost, kernel count, bytes moved, e-graph size, saturation
time, stop reason, the rules that fired, and the measured kernel time on the device
(:mod:`accy.experiments.measure`). A rule or rule set *matters* for a program when removing it
changes the extracted cost, the kernel count or the bytes moved; it *changes the program*
when a stage fingerprint differs (e.g. commuted operands) without any of those. Kernel times
are paired: each configuration's kernels are timed interleaved with ``all``'s in the same
task, and the summary reports the median of the call-by-call ratios (with quartiles);
configurations whose kernels are identical to ``all``'s (equal target-stage fingerprints) are
not timed twice, and the spread of their separate timings against ``all``'s is reported as
the noise floor of unpaired comparisons.

``policy`` picks the floating-point policy of the rules (``default``: exact and stable rules;
``finite-math``; ``fast-math``: also reassociation, distributivity, einsum re-pathing).

Saturation budgets are the passes' iteration and e-node limits only: every rewrite pass gets
``time-limit`` = :data:`TIME_LIMIT_S`, a guard against hangs rather than a budget, so what a
configuration extracts does not depend on the speed (or load) of the machine running it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from accy.experiments import measure
from accy.experiments.executor import Executor, Task
from accy.experiments.runner import SweepOptions, executor_for, run_tasks
from accy.experiments.suite import benchmarks
from accy.passes.base import Pass

__all__ = ["Config", "configurations", "pipeline_for", "run", "rule_configurations",
           "summarize"]

Policy = Literal["default", "finite-math", "fast-math"]
KIND_ORDER = {"all": 0, "none": 1, "without-ruleset": 2, "only-ruleset": 3, "without-rule": 4}


def saturate_rulesets() -> tuple[str, ...]:
    """The rule sets ``saturate`` uses by default."""
    from accy.passes.tensor.saturate import DEFAULT_RULESETS

    return tuple(DEFAULT_RULESETS)


def ruleset_of(rule: str) -> str:
    """The rule set a rule belongs to."""
    import rewrites

    rewrites.load()
    return rewrites.rule_info(rule).ruleset


@dataclass(frozen=True)
class Config:
    """One configuration of the rules: its name, kind and the rule (set) it is about."""

    name: str
    kind: str  # a key of KIND_ORDER
    target: str = ""

    @property
    def order(self) -> int:
        return KIND_ORDER[self.kind]


def configurations(rulesets: Sequence[str] | None = None) -> list[Config]:
    """``all``, ``none``, and ``-R`` and ``only:R`` for each of ``rulesets`` (default: all)."""
    sets = tuple(rulesets) if rulesets else saturate_rulesets()
    unknown = [r for r in sets if r not in saturate_rulesets()]
    if unknown:
        raise KeyError(f"unknown rule sets {unknown}; valid: {', '.join(saturate_rulesets())}")
    return [Config("all", "all"), Config("none", "none"),
            *(Config(f"-{r}", "without-ruleset", r) for r in sets),
            *(Config(f"only:{r}", "only-ruleset", r) for r in sets)]


def rule_configurations(rules: Sequence[str]) -> list[Config]:
    return [Config(f"-rule:{r}", "without-rule", r) for r in sorted(set(rules))]


def _flags(policy: Policy) -> dict[str, bool]:
    return {"finite_math": policy in ("finite-math", "fast-math"),
            "fast_math": policy == "fast-math"}


TIME_LIMIT_S = 300.0
"""The rewrite passes' time limit in the studies' pipelines (see the module doc)."""


def pipeline_for(config: Config, policy: Policy = "default",
                 base: str = "accy-default") -> str:
    """The pipeline text of ``config``: ``base`` with its rewrite passes' options changed."""
    every = saturate_rulesets()
    flags = _flags(policy)
    if config.kind == "all":
        off: tuple[str, ...] = ()
    elif config.kind == "none":
        off = every
    elif config.kind == "without-ruleset":
        off = (config.target,)
    elif config.kind == "only-ruleset":
        off = tuple(r for r in every if r != config.target)
    else:
        off = (config.target,)
    owner = {r: r for r in every}
    if config.kind == "without-rule":
        owner = {config.target: ruleset_of(config.target)}

    def for_pass(ruleset: str) -> tuple[str, ...]:
        """What of ``off`` belongs to the one rule set a contract-stage pass uses."""
        return tuple(x for x in off if owner.get(x) == ruleset)

    def edit(p: Pass) -> Pass:
        if p.name == "saturate":
            return measure.with_options(p, disable=off, time_limit=TIME_LIMIT_S, **flags)
        if p.name == "canonicalize":
            return measure.with_options(p, disable=for_pass("canonical"),
                                        time_limit=TIME_LIMIT_S, **flags)
        if p.name == "constant-fold":
            return measure.with_options(p, disable=for_pass("fold"), time_limit=TIME_LIMIT_S)
        return p

    return measure.edit_pipeline(base, edit).text()


def ablation_task(program: str, size: str, seed: int, config: str, kind: str, target: str,
                  policy: str, pipeline: str, device: str | None, repeats: int,
                  run: bool, baseline: str | None = None) -> dict[str, Any]:
    """One (program, configuration, seed): :func:`accy.experiments.measure.measure_program`,
    its kernels timed interleaved with those of ``baseline`` (the ``all`` pipeline)."""
    return measure.measure_program(
        program, size, seed, pipeline, device=device, repeats=repeats, run=run,
        extra={"config": config, "kind": kind, "target": target, "policy": policy},
        paired=baseline)


def _tasks(options: SweepOptions, configs: Sequence[Config], policy: Policy,
           programs: Sequence[str]) -> list[Task]:
    tasks = []
    base = pipeline_for(Config("all", "all"), policy)
    for program in programs:
        for c in configs:
            text = pipeline_for(c, policy)
            for seed in options.seeds:
                tasks.append(Task(
                    (program, c.order, c.name, seed), "accy.experiments.ablation:ablation_task",
                    {"program": program, "size": options.suite, "seed": seed, "config": c.name,
                     "kind": c.kind, "target": c.target, "policy": policy, "pipeline": text,
                     "device": options.device, "repeats": options.repeats, "run": options.run,
                     "baseline": None if c.kind == "all" else base}))
    return tasks


def fired_rules(row: dict[str, Any]) -> set[str]:
    """Every rule that fired in any rewrite pass of a row."""
    return {r for stats in row["rewrites"].values() for r in stats["rules_fired"]}


def row_key(row: dict[str, Any]) -> tuple[str, int, str, int]:
    return row["program"], KIND_ORDER[row["kind"]], row["config"], row["seed"]


def run(options: SweepOptions, *, rulesets: Sequence[str] | None = None,
        per_rule: bool = True, rules: Sequence[str] | None = None,
        policy: Policy = "default", executor: Executor | None = None) -> dict[str, Any]:
    """Run the ablation sweep and return the result document (module docstring).

    ``rulesets`` limits the ``-R``/``only:R`` configurations; ``per_rule`` adds the ``-rule:X``
    sweep for rules that fired, limited to ``rules`` when given.
    """
    programs = [b.name for b in benchmarks(options.programs)]
    ex = executor or executor_for(options)
    try:
        result = run_tasks("ablation", _tasks(options, configurations(rulesets), policy,
                                              programs), options, ex, "ablation: rule sets")
        if per_rule:
            second = []
            for program in programs:
                fired = set().union(*(fired_rules(r) for r in result["rows"]
                                      if r["program"] == program and r["config"] == "all"))
                if rules is not None:
                    fired &= set(rules)
                second += _tasks(options, rule_configurations(sorted(fired)), policy,
                                 [program])
            more = run_tasks("ablation", second, options, ex, "ablation: rules")
            result["rows"] += more["rows"]
            result["failed"] += more["failed"]
    finally:
        if executor is None:
            ex.close()
    result["rows"].sort(key=row_key)
    result["options"]["extra"] = {"rulesets": list(rulesets) if rulesets else None,
                                  "per_rule": per_rule, "rules": list(rules) if rules else None,
                                  "policy": policy}
    result["summary"] = summarize(result["rows"])
    return result


# ---- summary ---------------------------------------------------------------------------------


def _mean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.fmean(vals) if vals else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _effect(row: dict[str, Any], base: dict[str, Any]) -> str:
    if (row["cost"]["extracted"], row["kernels"], row["bytes_moved"]) != (
            base["cost"]["extracted"], base["kernels"], base["bytes_moved"]):
        return "matters"
    return "changes-program" if row["stages"] != base["stages"] else "none"


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per program and configuration: cost, kernels, bytes and kernel time relative to
    ``all``, the effect of each configuration, and per rule (set) the programs it matters
    for. Kernel time is the best of the ``repeats`` calls (interference from other processes
    only ever adds time), averaged over seeds; its ratio to ``all`` is the paired ratio (the
    median of the call-by-call ratios, timed interleaved with ``all``'s kernels in one task)
    where there is one. The noise
    floor compares the separately timed runs of configurations whose kernels are identical
    to ``all``'s: what an unpaired comparison would mistake for an effect."""
    programs: dict[str, dict[str, Any]] = {}
    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault((r["program"], r["config"]), []).append(r)
    matters: dict[str, list[str]] = {}
    for (program, config), group in by.items():
        base_group = by.get((program, "all"))
        if not base_group:
            continue
        base, first = base_group[0], group[0]
        kernel_ms = _mean([g["measured"]["kernel_ms_min"] for g in group])
        base_ms = _mean([g["measured"]["kernel_ms_min"] for g in base_group])
        paired = _mean([g["measured"].get("paired_ratio") for g in group])
        spread = [_mean([g["measured"].get(f"paired_ratio_{q}") for g in group])
                  for q in ("q1", "q3")]
        effect = _effect(first, base)
        same = first["stages"].get("target") == base["stages"].get("target")
        entry = {
            "kind": first["kind"], "target": first["target"],
            "same_kernels": same,
            "cost": first["cost"]["extracted"], "initial_cost": first["cost"]["initial"],
            "cost_ratio": _ratio(first["cost"]["extracted"], base["cost"]["extracted"]),
            "kernels": first["kernels"], "bytes_moved": first["bytes_moved"],
            "bytes_ratio": _ratio(first["bytes_moved"], base["bytes_moved"]),
            "e_nodes": first["e_nodes"], "stop_reason": first["stop_reason"],
            "kernel_ms": kernel_ms,
            "kernel_ms_ratio": paired if paired is not None else _ratio(kernel_ms, base_ms),
            "kernel_ms_ratio_quartiles": spread if None not in spread else None,
            "saturation_s": _mean([g["measured"]["saturation_s"] for g in group]),
            "correct": all(g["correct"] is not False for g in group),
            "effect": effect,
        }
        programs.setdefault(program, {})[config] = entry
        if effect == "matters" and first["kind"] in ("without-ruleset", "without-rule"):
            matters.setdefault(first["target"], []).append(program)
    order = {name: i for i, name in enumerate(p for p, _ in by)}
    noise = [abs(math.log(r["measured"]["kernel_ms_min"] / b["measured"]["kernel_ms_min"]))
             for (p, c), group in by.items() if c != "all" and (p, "all") in by
             for r, b in zip(group, by[(p, "all")], strict=False)
             if r["stages"].get("target") == b["stages"].get("target")
             and r["measured"]["kernel_ms_min"] and b["measured"]["kernel_ms_min"]]
    return {
        "noise": {"configurations": len(noise),
                  "median_ratio": math.exp(statistics.median(noise)) if noise else None,
                  "max_ratio": math.exp(max(noise)) if noise else None},
        "programs": {p: dict(sorted(c.items(), key=lambda kv: (KIND_ORDER[kv[1]["kind"]],
                                                               kv[0])))
                     for p, c in sorted(programs.items(), key=lambda kv: order[kv[0]])},
        "matters": {k: sorted(v) for k, v in sorted(matters.items())},
    }
