"""The differential checks behind :mod:`accy.testing`: tolerances, comparison, and checks that a
program keeps its meaning pass by pass, end to end on OpenCL, and across processes.

Everything here is public through :mod:`accy.testing` (which adds the hypothesis strategies);
this module itself does not need hypothesis. The error model behind the tolerances is
:mod:`accy.error_bounds`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from accy.error_bounds import Comparison, error_bounds
from accy.errors import AccyError, CapabilityMismatchError, PassFailure
from accy.ir.interpret import interpret
from accy.ir.printer import print_program
from accy.ir.program import Program, Stage
from accy.ir.types import DType
from accy.job import prepare
from accy.passes.base import Pass
from accy.passes.manager import Instrument, PassRecord
from accy.passes.spec import Pipeline, parse_pipeline
from accy.product import Product
from accy.target import DEVICE_TYPES, KernelStatus, TargetProfile, resolve_precision

ProgramInputs = dict[str, tuple[np.ndarray, ...]]  # function name -> one array per parameter


# ---- tolerances (stated once) ---------------------------------------------------------------


@dataclass(frozen=True)
class Tolerance:
    """How much a correct implementation may round, per float dtype.

    ``rtol``: rounding allowed per op, relative to the magnitude of the op's terms (``|a|+|b|``
    for an add, ``sum(|x|)·sqrt(n)`` for a reduction or contraction of ``n`` terms, the result
    for the rest); errors of operands propagate by each op's slope (:mod:`accy.error_bounds`).
    ``atol``: absolute slack per element (underflow, values near zero).
    """

    rtol: float
    atol: float


TOLERANCES: dict[DType, Tolerance] = {
    DType.f16: Tolerance(rtol=4e-3, atol=1e-3),
    DType.f32: Tolerance(rtol=1e-5, atol=1e-6),  # ~170 ulp per op: OpenCL's exp/pow/erf ulps
    DType.f64: Tolerance(rtol=1e-12, atol=1e-12),
}
# int and bool results compare exactly; every dtype skips elements the bounds mark unstable


class DifferentialFailure(AssertionError):
    """A check found that a program's meaning changed; the message shows the program text."""


@dataclass(frozen=True)
class CheckResult:
    """What a check did: ``ok``, or ``unsupported`` (with why) when no kernel exists yet."""

    status: Literal["ok", "unsupported"]
    detail: str = ""
    compared: int = 0  # elements compared
    skipped: int = 0  # unstable elements skipped
    passes_changed: tuple[str, ...] = ()  # check_passes: passes that changed the program
    matches: int = 0  # check_rule: how often the rule matched while saturating (0: not fired)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def example_text(program: Program, inputs: ProgramInputs | None = None) -> str:
    """The IR text of ``program`` (and its inputs, when given), as failing examples show it.

    >>> print(example_text(accy.parse_program("func @f(%a: f32[]) -> (f32[]) { return %a }")))
    func @f(%a: f32[]) -> (f32[]) {
      return %a
    }
    <BLANKLINE>
    """
    return print_program(program) + ("" if inputs is None else inputs_text(program, inputs))


def inputs_text(program: Program, inputs: ProgramInputs | Sequence[Any]) -> str:
    """``inputs`` as the comment lines :func:`example_text` appends to the program text."""
    lines = []
    for fn in program.functions:
        arrays = _by_function(program, inputs).get(fn.name, ())
        for pname, a in zip(fn.param_names, arrays, strict=False):
            lines.append(f"// {fn.name} %{pname} = {np.asarray(a).tolist()!r}\n")
    return "".join(lines)


def _by_function(program: Program, inputs: ProgramInputs | Sequence[Any]
                 ) -> dict[str, tuple[np.ndarray, ...]]:
    """Inputs keyed by function name (a plain sequence is the only function's inputs)."""
    if isinstance(inputs, Mapping):
        return {f.name: tuple(inputs[f.name]) for f in program.functions}
    return {program.function().name: tuple(inputs)}


# ---- comparison -----------------------------------------------------------------------------


def _compare(program: Program, function: str, got: Sequence[Any], want: Sequence[np.ndarray],
             inputs: Sequence[np.ndarray], out: Comparison, precision: str = "ieee") -> None:
    rtol = {d: t.rtol for d, t in TOLERANCES.items()}
    bounds = error_bounds(program, inputs, rtol, function, precision)
    if len(got) != len(want):
        out.problems.append(f"function {function}: {len(got)} results, want {len(want)}")
        return
    for i, (g, w, b) in enumerate(zip(got, want, bounds, strict=True)):
        tol = TOLERANCES.get(DType.from_numpy(np.asarray(w).dtype))
        out.judge(f"function {function} result {i}", g, w, b, tol.atol if tol else 0.0)


def assert_close(got: Sequence[Any], want: Sequence[np.ndarray], program: Program,
                 inputs: Sequence[Any], function: str | None = None,
                 precision: str = "ieee") -> tuple[int, int]:
    """Assert that ``got`` and ``want`` (results of ``function`` on ``inputs``) agree.

    Floats may differ by both sides' error bounds (:data:`TOLERANCES`, scaled by the magnitude
    of the terms) plus ``atol``; ``nan`` matches ``nan`` and infinities match exactly; ints and
    bools are exact; elements the bounds mark unstable are skipped. Returns (compared,
    skipped); raises :class:`DifferentialFailure` listing the first differing element.

    >>> p = accy.parse_program("func @f(%a: f32[2]) -> (f32[2]) {\\n"
    ...     "  %0 = exp(%a) : f32[2]\\n  return %0\\n}")
    >>> assert_close([np.float32([1, 2.7182817])], [np.float32([1, 2.718282])], p,
    ...              [np.float32([0, 1])])
    (2, 0)
    """
    fn = program.function(function)
    out = Comparison()
    _compare(program, fn.name, got, want, inputs, out, precision)
    if out.problems:
        raise DifferentialFailure("results differ:\n  " + "\n  ".join(out.problems) + "\n"
                                  + example_text(program, {fn.name: tuple(inputs)}))
    return out.compared, out.skipped


# ---- checks ---------------------------------------------------------------------------------


def unsupported_reason(error: BaseException) -> str | None:
    """Why ``error`` means "not for this target": no kernel for an op yet (kernelization's "no
    kernel lowering"), or a pass told to refuse what the target lacks (a
    ``CapabilityMismatchError``, e.g. ``dtype-legalization{f64=error}``); None when it is a
    real failure."""
    text = str(error)
    if not isinstance(error, PassFailure):
        return None
    if isinstance(error.__cause__, CapabilityMismatchError) or (
            "kernelization" in text and "no kernel lowering" in text):
        return text.splitlines()[0]
    return None


def precision_of(pipeline: Pipeline, target: TargetProfile | None) -> str:
    """The contraction precision policy a pipeline's kernelization uses on ``target`` (``f32``
    resolved by :func:`accy.target.resolve_precision`; "ieee" without a kernelization): what
    the error bounds of its results must allow (``kernelization{precision=tf32}``)."""
    policy = next((getattr(p, "precision", "ieee") for p in pipeline.passes
                   if p.name == "kernelization"), "ieee")
    return resolve_precision(policy, target or TargetProfile())


def _pipeline(pipeline: str | Pipeline) -> Pipeline:
    return parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline


def check_end_to_end(program: Program, inputs: ProgramInputs | Sequence[Any],
                     device: str | None = None, pipeline: str | Pipeline = "accy-default",
                     device_type: str | None = None) -> CheckResult:
    """Prepare ``program`` for ``device`` (default ``ACCY_DEVICE`` or PoCL), run every function
    on OpenCL, and compare with :func:`accy.interpret` (see :func:`assert_close`).

    ``device_type`` (``"gpu"``, ``"cpu"``, ...): prepare for the device's profile with that type
    instead of its own, so a CPU device (PoCL) runs and checks the kernels built for GPUs:
    their tiles, prefetches, work-group reductions and unrolled rows (:func:`typed_as`).

    Returns ``unsupported`` when kernelization has no kernel lowering for an op yet, or a kernel
    is illegal for the device (e.g. f64 without ``cl_khr_fp64``); any other error raises
    :class:`DifferentialFailure`. ``DeviceError`` (no OpenCL) passes through.
    """
    from accy.backends.registry import get_backend

    backend = get_backend()
    runtime, target = backend.open(device)
    target = typed_as(target, device_type)
    pipe = _pipeline(pipeline)
    by_fn = _by_function(program, inputs)
    try:
        job = prepare(program, pipe, target=target)
    except PassFailure as e:
        reason = unsupported_reason(e)
        if reason is not None:
            return CheckResult("unsupported", reason)
        raise _failure(f"end-to-end ({pipe.text()}): preparing failed: {e}", program,
                       by_fn) from e
    illegal = [f"{s.entry}: {s.status.value}" for s in job.kernel_summaries()
               if s.status is not KernelStatus.legal]
    if illegal:
        return CheckResult("unsupported", "illegal for the target: " + "; ".join(illegal))
    out = Comparison()
    for fn in program.functions:
        want = interpret(program, by_fn[fn.name], function=fn.name)
        try:
            got = job.run(*by_fn[fn.name], function=fn.name, device=runtime)
        except AccyError as e:
            raise _failure(f"end-to-end: running {fn.name} failed: {e}", program, by_fn) from e
        _compare(program, fn.name, got, want, by_fn[fn.name], out,
                 precision_of(pipe, target))
    if out.problems:
        raise _failure(f"end-to-end ({pipe.text()}) on {backend.describe_device(runtime)}: results "
                       f"differ from interpret:\n  " + "\n  ".join(out.problems), program, by_fn)
    return CheckResult("ok", compared=out.compared, skipped=out.skipped)


def typed_as(target: TargetProfile, device_type: str | None) -> TargetProfile:
    """``target`` with ``device_type`` (None: as it is); a ValueError names the valid ones."""
    if device_type is None or device_type == target.device_type:
        return target
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device type {device_type!r}: one of {', '.join(DEVICE_TYPES)}")
    return dataclasses.replace(target, device_type=device_type)


def _failure(message: str, program: Program, inputs: ProgramInputs,
             after: Program | None = None) -> DifferentialFailure:
    text = message + "\n--- program" + (" before" if after is not None else "") + ":\n"
    text += example_text(program, inputs)
    if after is not None:
        text += "--- program after:\n" + print_program(after)
    return DifferentialFailure(text)


class _MeaningCheck(Instrument):
    """After every pass that changes the program, compare ``interpret`` before and after."""

    def __init__(self, inputs: ProgramInputs) -> None:
        self.inputs = inputs
        self.before: Program | None = None
        self.changed: list[str] = []
        self.result = Comparison()

    def before_pass(self, p: Pass, product: Product) -> None:
        self.before = product.program

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        before, after = self.before, product.program
        if before is None or after == before:
            return
        self.changed.append(p.spec())
        what = f"pass {p.spec()} (stage {p.stage.value}) changed the meaning of the program"
        names = [f.name for f in before.functions]
        if [f.name for f in after.functions] != names or any(
                f.params != g.params for f, g in zip(before.functions, after.functions,
                                                      strict=True)):
            raise _failure(f"{what}: its functions or parameters changed", before, self.inputs,
                           after)
        out = Comparison()
        for name in names:
            args = self.inputs[name]
            want = interpret(before, args, function=name)
            try:
                got = interpret(after, args, function=name)
            except AccyError as e:
                raise _failure(f"{what}: interpreting the result failed: {e}", before,
                               self.inputs, after) from e
            _compare(before, name, got, want, args, out)
        if out.problems:
            raise _failure(f"{what}:\n  " + "\n  ".join(out.problems), before, self.inputs,
                           after)
        self.result.compared += out.compared
        self.result.skipped += out.skipped


def check_passes(program: Program, inputs: ProgramInputs | Sequence[Any],
                 pipeline: str | Pipeline = "accy-default", *,
                 target: TargetProfile | None = None) -> CheckResult:
    """Run ``pipeline`` and check that every pass that changes the program keeps its meaning.

    After each such pass, :func:`accy.interpret` of the program after it must agree with the
    program before it (within :func:`assert_close`'s tolerances, judged on the program before).
    The :class:`DifferentialFailure` names the first pass that changed the meaning and prints
    the program before and after it. A pass that fails raises too, except kernelization's "no
    kernel lowering" (``unsupported``: the passes before it were checked).
    """
    return _check_pipeline(program, inputs, _pipeline(pipeline), target, [])


def _check_pipeline(program: Program, inputs: ProgramInputs | Sequence[Any], pipe: Pipeline,
                    target: TargetProfile | None, instruments: Sequence[Instrument]
                    ) -> CheckResult:
    """:func:`check_passes` of ``pipe`` with more ``instruments`` (after the meaning check)."""
    by_fn = _by_function(program, inputs)
    check = _MeaningCheck(by_fn)
    # up to the last stage the pipeline has passes in: a partial pipeline (one rule's
    # saturate) leaves ops, such as pad, that later stages do not allow
    until = max((p.stage for p in pipe.passes), key=lambda s: s.index, default=Stage.target)
    try:
        prepare(program, pipe, target=target, until=until,
                instruments=[check, *instruments])
    except PassFailure as e:
        reason = unsupported_reason(e)
        if reason is None:
            raise _failure(f"passes ({pipe.text()}): {e}", program, by_fn) from e
        return CheckResult("unsupported", reason, check.result.compared, check.result.skipped,
                           tuple(check.changed))
    return CheckResult("ok", "", check.result.compared, check.result.skipped,
                       tuple(check.changed))


class _PassStats(Instrument):
    """Keeps the statistics of the last pass that ran."""

    def __init__(self) -> None:
        self.stats: dict[str, Any] = {}

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None:
        self.stats = dict(record.stats)


def _rule_pipeline(rule: str, **options: Any) -> Pipeline:
    """The one-pass pipeline that applies the named rewrite ``rule`` alone: ``saturate`` with
    its rule set, ``rules=<rule>``, and ``finite-math``/``fast-math`` on as the rule's policy
    (``rewrites.rule_info(rule).policy``) needs. ``options`` are other ``saturate`` options
    (e.g. ``cost="nodes"``, ``iterations=4``), in their pipeline-text spelling.

    >>> _rule_pipeline("add-zero").text()
    'saturate{rulesets=canonical rules=add-zero finite-math=true}'
    """
    import rewrites  # egglog: imported when a rule is checked, not with this module

    rewrites.load()
    info = rewrites.rule_info(rule)
    flags = {"finite-math": {"finite-math": "true"}, "fast-math": {"fast-math": "true"}}
    opts = {"rulesets": info.ruleset, "rules": rule, **flags.get(info.policy, {}),
            **{k.replace("_", "-"): v for k, v in options.items()}}
    text = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in opts.items())
    return parse_pipeline(f"saturate{{{text}}}")


def check_rule(program: Program, inputs: ProgramInputs | Sequence[Any], rule: str, *,
               target: TargetProfile | None = None, **options: Any) -> CheckResult:
    """Apply the named rewrite ``rule`` alone and check that ``interpret`` results keep their
    meaning: ``saturate{rulesets=<its rule set> rules=<rule>}``, with ``finite-math=true`` or
    ``fast-math=true`` where the rule's policy (``rewrites.rule_info(rule).policy``) needs it;
    ``options`` are other ``saturate`` options (``cost="nodes"``, ``iterations=4``).

    Like :func:`check_passes`, judged on the program before, within accy's tolerances; the
    :class:`DifferentialFailure` starts with ``rule <name> (<policy>, rule set <set>)`` and
    prints the program before and after. ``saturate`` keeps the extraction only when it is
    strictly cheaper, so the program changes only where the rule pays off under the cost model
    (``cost=`` in ``options`` picks another). A rule that does not match passes trivially: the
    result's ``matches`` says how often it matched (0: it never fired, e.g. its pattern was
    absent or the prefilter saw it cannot fire; rules that only reorder operands never run
    alone), and ``passes_changed`` is non-empty when the program changed.
    """
    import rewrites

    pipe = _rule_pipeline(rule, **options)
    info = rewrites.rule_info(rule)
    stats = _PassStats()
    try:
        result = _check_pipeline(program, inputs, pipe, target, [stats])
    except DifferentialFailure as e:
        raise DifferentialFailure(f"rule {rule} ({info.policy}, rule set {info.ruleset}): "
                                  f"{e}") from e.__cause__
    matches = stats.stats.get("rules-fired", {}).get(rule, 0)
    return CheckResult(result.status, result.detail, result.compared, result.skipped,
                       result.passes_changed, matches)


def fingerprints(program: Program, pipeline: str | Pipeline = "accy-default") -> dict[str, Any]:
    """Stage stamps and kernel sources of preparing ``program`` (up to the memory stage with
    ``unsupported`` set when no kernel lowering exists yet)."""
    pipe = _pipeline(pipeline)
    try:
        job = prepare(program, pipe)
    except PassFailure as e:
        if unsupported_reason(e) is None:
            raise
        return {"stamps": prepare(program, pipe, until="memory").stamps(), "unsupported": True}
    return {"stamps": job.stamps(), "unsupported": False,
            "sources": [job.kernel_source(i) for i in range(job.kernel_count)]}


def check_determinism(programs: Program | Sequence[Program],
                      pipeline: str | Pipeline = "accy-default", *,
                      fresh_process: bool = True) -> CheckResult:
    """Prepare each program twice (and, with ``fresh_process``, once more in a new Python
    process with another hash seed): stamps and kernel sources must be identical."""
    batch = [programs] if isinstance(programs, Program) else list(programs)
    text = _pipeline(pipeline).text()
    first = [fingerprints(p, text) for p in batch]
    runs = [("again", [fingerprints(p, text) for p in batch])]
    if fresh_process:
        runs.append(("in a new process", _fingerprints_elsewhere(batch, text)))
    for how, other in runs:
        for p, a, b in zip(batch, first, other, strict=True):
            if a != b:
                raise _failure(f"determinism: preparing {how} gave different results:\n"
                               f"  first:  {a}\n  second: {b}", p, {})
    unsupported = sum(f["unsupported"] for f in first)
    return CheckResult("unsupported" if unsupported == len(batch) else "ok",
                       f"{unsupported} of {len(batch)} unsupported")


def _fingerprints_elsewhere(batch: list[Program], pipeline: str) -> list[dict[str, Any]]:
    payload = json.dumps({"pipeline": pipeline, "programs": [print_program(p) for p in batch]})
    env = dict(os.environ, PYTHONHASHSEED=str(12345 + len(batch)))
    code = "import accy.differential as d; d._fingerprint_main()"
    done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True,
                          text=True, env=env, check=False)
    if done.returncode != 0:
        raise DifferentialFailure(f"determinism: the fresh process failed:\n{done.stderr}")
    return json.loads(done.stdout)


def _fingerprint_main() -> None:
    """Entry point of the fresh process of :func:`check_determinism` (JSON on stdin/stdout)."""
    from accy.ir.parser import parse_program

    job = json.load(sys.stdin)
    out = [fingerprints(parse_program(t), job["pipeline"]) for t in job["programs"]]
    json.dump(out, sys.stdout)
