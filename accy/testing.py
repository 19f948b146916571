"""Property-based and differential testing of accy programs, passes and kernels.

Strategies (hypothesis) that build *valid programs by construction* over the whole op set, the
inputs they need, tolerances stated once, and the checks accy's own differential suite runs —
public so that a researcher can test a rule, pass or kernel of their own the same way::

    from hypothesis import given
    from accy.testing import check_end_to_end, check_passes, programs_with_inputs

    @given(programs_with_inputs(max_nodes=6))
    def test_my_pipeline(case):
        program, inputs = case
        check_passes(program, inputs, pipeline="accy-contract,my-pass")  # meaning kept per pass
        check_end_to_end(program, inputs)             # prepare -> OpenCL == interpret

Per rule: a rewrite rule is checked alone as a one-pass pipeline over programs that contain its
pattern, e.g. ``check_passes(program, inputs, "saturate{rulesets=canonical rules=mul-one}")``
over ``programs_with_inputs(programs_with(lambda x: x * 1.0))``.

A failing example is shown as IR text (``example_text``), and shrinks to a small program.
Requires ``hypothesis`` (the ``test`` extra). The generator's engine is
:mod:`accy.program_gen`; the error model behind the tolerances is :mod:`accy.error_bounds`.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from hypothesis import currently_in_test_context, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accy.error_bounds import Comparison, error_bounds
from accy.errors import AccyError, PassFailure
from accy.ir.interpret import interpret
from accy.ir.ops import Op, OpKind
from accy.ir.printer import print_program
from accy.ir.program import Function, Program
from accy.ir.types import DType, TensorType
from accy.job import prepare
from accy.passes.base import Pass
from accy.passes.manager import Instrument, PassRecord
from accy.passes.registry import all_passes
from accy.passes.spec import Pipeline, parse_pipeline
from accy.product import Product
from accy.program_gen import Options, Pattern, generate_function, make_options
from accy.target import KernelStatus, TargetProfile

__all__ = [
    "ALL_OPS", "ELEMENTWISE_OPS", "TOLERANCES", "CheckResult", "DifferentialFailure",
    "ProgramInputs", "Tolerance", "assert_close", "check_determinism", "check_end_to_end",
    "check_passes", "dtypes", "example_text", "index_bounds", "inputs_for", "pipelines",
    "programs", "programs_with", "programs_with_inputs", "random_inputs", "shapes",
    "tensor_types", "unsupported_reason",
]


ProgramInputs = dict[str, tuple[np.ndarray, ...]]  # function name -> one array per parameter
ALL_OPS: tuple[Op, ...] = tuple(o for o in Op if o.kind is not OpKind.SOURCE)
ELEMENTWISE_OPS: tuple[Op, ...] = tuple(o for o in ALL_OPS if o.is_elementwise)


# ---- strategies -----------------------------------------------------------------------------


def dtypes(allowed: Sequence[DType] | None = None) -> st.SearchStrategy[DType]:
    """One of ``allowed`` (default: every dtype), shrinking toward the first.

    >>> from hypothesis import find
    >>> find(dtypes(), lambda d: d.is_int)
    DType.i32
    """
    return st.sampled_from(list(allowed) if allowed is not None else list(DType))


def shapes(max_rank: int = 3, max_dim: int = 4, min_rank: int = 0
           ) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes of ``min_rank..max_rank`` dims of size ``1..max_dim`` (shrinking toward ``()``)."""
    return st.lists(st.integers(1, max_dim), min_size=min_rank, max_size=max_rank).map(tuple)


def tensor_types(dtypes: Sequence[DType] | None = None, max_rank: int = 3,
                 max_dim: int = 4) -> st.SearchStrategy[TensorType]:
    """Tensor types over ``dtypes`` (default: all) and :func:`shapes`."""
    return st.builds(TensorType, shapes(max_rank, max_dim),
                     st.sampled_from(list(dtypes) if dtypes is not None else list(DType)))


def programs(max_nodes: int = 6, ops: Sequence[Op | OpKind | str] | None = None,
             dtypes: Sequence[DType | str] | None = None, max_rank: int = 3, max_dim: int = 4,
             allow_nan: bool = False, functions: int | tuple[int, int] = 1
             ) -> st.SearchStrategy[Program]:
    """Random valid programs: DAGs of up to ``max_nodes`` ops each, valid by construction.

    ``ops`` (ops, op kinds or names; default: every op) are built over leaves (parameters and
    small constants) of ``dtypes`` (default: all; bools come from comparisons when ``bool`` is
    left out; indices and labels are always i32/i64 parameters). Shapes broadcast, einsum
    specs use batch, contracted and repeated letters, reductions pick axes and keepdims,
    movement ops valid attributes; ``log``/``sqrt``/``rsqrt``/``reciprocal``/``pow`` bases and
    ``div`` denominators are guarded as ``abs(x) + 1`` (not counted in ``max_nodes``).
    Constants are halves in [-4, 4] (``nan``/``inf`` too with ``allow_nan``). ``functions``:
    how many functions (or a ``(min, max)`` range), named ``f`` or ``f0, f1, ...``.

    >>> from hypothesis import find
    >>> print(example_text(find(programs(ops=[Op.EXP]), lambda p: True)))
    func @f(%a: f32[]) -> (f32[]) {
      %0 = exp(%a) : f32[]
      return %0
    }
    <BLANKLINE>
    """
    opts = make_options(ops, dtypes, max_nodes=max_nodes, max_rank=max_rank, max_dim=max_dim,
                        allow_nan=allow_nan)
    return _programs(opts, functions, None, st.just(()))


def programs_with(pattern: Op | Pattern, *,
                  operand_types: Sequence[TensorType] | st.SearchStrategy | None = None,
                  **options: Any) -> st.SearchStrategy[Program]:
    """Random programs that contain ``pattern`` (for testing a rule that rewrites it).

    ``pattern`` is an :class:`~accy.ir.ops.Op` (built with random valid operands and
    attributes) or a builder callback taking traced values (:class:`accy.builder.Value`) and
    returning one; its operands, of ``operand_types`` (a sequence or a strategy for one;
    default: one random float type shared by all), are earlier values, parameters, or unary
    ops of them. Other ops come before and after it; the results always depend on it.
    ``options`` are those of :func:`programs`.

    >>> strategy = programs_with(lambda x, y: x * y + x * y,
    ...                          operand_types=[accy.f32[4], accy.f32[4]])
    """
    opts = make_options(options.pop("ops", None), options.pop("dtypes", None), **{
        k: options.pop(k) for k in ("max_nodes", "max_rank", "max_dim", "allow_nan")
        if k in options})
    functions = options.pop("functions", 1)
    if options:
        raise TypeError(f"unknown options {sorted(options)}")
    if isinstance(pattern, Op):
        if not opts.usable(pattern):
            raise ValueError(f"{pattern.value} cannot be built from dtypes "
                             f"{[d.value for d in opts.dtypes]}")
        return _programs(opts, functions, pattern, st.just(()))
    if isinstance(operand_types, st.SearchStrategy):
        types = operand_types
    elif operand_types is not None:
        types = st.just(tuple(operand_types))
    else:
        n = len(inspect.signature(pattern).parameters)
        floats = [d for d in opts.dtypes if d.is_float] or [DType.f32]
        types = tensor_types(floats, opts.max_rank, opts.max_dim).map(lambda t: (t,) * n)
    return _programs(opts, functions, pattern, types)


@st.composite
def _programs(draw: Any, opts: Options, functions: int | tuple[int, int],
              pattern: Op | Pattern | None, types: st.SearchStrategy,
              with_inputs: bool = False) -> Any:
    """A program (or, ``with_inputs``, a program and its inputs). Functions are list elements
    (after the one holding ``pattern``), each drawn with its inputs, so that shrinking can drop
    any of them with its inputs."""
    lo, hi = functions if isinstance(functions, tuple) else (functions, functions)
    head = [] if pattern is None else [draw(_function(opts, pattern, types, with_inputs))]
    rest = draw(st.lists(_function(opts, None, types, with_inputs),
                         min_size=max(lo - len(head), 1 - len(head)), max_size=hi - len(head)))
    fns, inputs = [], {}
    for i, (fn, ins) in enumerate([*head, *rest]):
        name = "f" if hi == 1 else f"f{i}"
        fns.append(Function(name, fn.params, fn.param_names, fn.results))
        if with_inputs:
            inputs[name] = ins["f"]
    program = Program(tuple(fns))
    if currently_in_test_context():
        note(example_text(program, inputs if with_inputs else None))
    return (program, inputs) if with_inputs else program


@st.composite
def _function(draw: Any, opts: Options, pattern: Op | Pattern | None,
              types: st.SearchStrategy, with_inputs: bool) -> tuple[Function, ProgramInputs]:
    fn = generate_function(draw, opts, "f", pattern, draw(types) if pattern else ())
    if not with_inputs:
        return fn, {}
    return fn, draw(inputs_for(Program((fn,)), allow_nan=opts.allow_nan))


def index_bounds(program: Program) -> dict[tuple[str, int], int]:
    """``(function, parameter index) -> n``: parameters used as gather/scatter-add indices or
    cross-entropy labels must lie in ``[0, n)`` (the smallest size they index)."""
    out: dict[tuple[str, int], int] = {}
    for fn in program.functions:
        for n in fn.nodes():
            if n.op in (Op.GATHER, Op.SCATTER_ADD):
                idx, size = n.srcs[1], n.srcs[0].type.shape[n.attr("axis")]
            elif n.op is Op.CROSS_ENTROPY:
                idx, size = n.srcs[1], n.srcs[0].type.shape[-1]
            else:
                continue
            if idx.op is Op.PARAM:
                key = (fn.name, idx.attr("index"))
                out[key] = min(out.get(key, size), size)
    for (name, i), n in out.items():
        if n == 0 and program.function(name).params[i].type.size:
            raise ValueError(f"function {name}: parameter {i} indexes an empty axis")
    return out


def _elements(dtype: DType, bound: int | None, allow_nan: bool) -> st.SearchStrategy:
    if bound is not None:
        return st.integers(0, bound - 1)
    if dtype is DType.bool:
        return st.booleans()
    if dtype.is_int:
        return st.integers(-6, 6)
    base = st.floats(-3, 3, width=8 * dtype.itemsize, allow_subnormal=False)
    return st.one_of(base, st.sampled_from([np.nan, np.inf, -np.inf])) if allow_nan else base


@st.composite
def _inputs(draw: Any, program: Program, allow_nan: bool) -> ProgramInputs:
    bounds = index_bounds(program)
    return {fn.name: tuple(
        draw(hnp.arrays(p.type.dtype.numpy, p.type.shape,
                        elements=_elements(p.type.dtype, bounds.get((fn.name, i)), allow_nan)))
        for i, p in enumerate(fn.params)) for fn in program.functions}


def inputs_for(program: Program, *, allow_nan: bool = False
               ) -> st.SearchStrategy[ProgramInputs]:
    """Inputs for every function of ``program``: ``{function name: (array per parameter)}``.

    Floats lie in [-3, 3] without subnormals (``nan``/``inf`` too with ``allow_nan``), ints in
    [-6, 6], and indices and labels in range (:func:`index_bounds`).
    """
    return _inputs(program, allow_nan)


def random_inputs(program: Program, rng: np.random.Generator, *, allow_nan: bool = False
                  ) -> ProgramInputs:
    """Like :func:`inputs_for`, drawn from a numpy ``rng`` (for loops outside hypothesis)."""
    bounds = index_bounds(program)
    out: ProgramInputs = {}
    for fn in program.functions:
        arrays = []
        for i, p in enumerate(fn.params):
            t, bound = p.type, bounds.get((fn.name, i))
            if bound is not None:
                a = rng.integers(0, bound, t.shape)
            elif t.dtype is DType.bool:
                a = rng.random(t.shape) < 0.5
            elif t.dtype.is_int:
                a = rng.integers(-6, 7, t.shape)
            else:
                a = rng.uniform(-3, 3, t.shape)
                if allow_nan:
                    a = np.where(rng.random(t.shape) < 0.1,
                                 rng.choice([np.nan, np.inf, -np.inf], t.shape), a)
            arrays.append(np.asarray(a, dtype=t.dtype.numpy))
        out[fn.name] = tuple(arrays)
    return out


@st.composite
def _cases(draw: Any, programs_: st.SearchStrategy[Program], allow_nan: bool
           ) -> tuple[Program, ProgramInputs]:
    program = draw(programs_)
    inputs = draw(inputs_for(program, allow_nan=allow_nan))
    if currently_in_test_context():
        note(_inputs_text(program, inputs))
    return program, inputs


def programs_with_inputs(programs_: st.SearchStrategy[Program] | None = None, *,
                         allow_nan: bool = False, **options: Any
                         ) -> st.SearchStrategy[tuple[Program, ProgramInputs]]:
    """``(program, inputs)`` pairs: ``programs_`` (default: :func:`programs` of ``options``)
    with :func:`inputs_for` it; ``allow_nan`` applies to both."""
    if programs_ is not None:
        return _cases(programs_, allow_nan)
    functions = options.pop("functions", 1)
    opts = make_options(options.pop("ops", None), options.pop("dtypes", None),
                        allow_nan=allow_nan, **options)
    return _programs(opts, functions, None, st.just(()), with_inputs=True)


def _option_values(info: Any) -> st.SearchStrategy:
    def one(t: Any) -> st.SearchStrategy:
        if info.choices is not None:
            return st.sampled_from(info.choices)
        return {bool: st.booleans(), int: st.integers(), str: st.text(),
                float: st.floats(allow_nan=False)}[t]

    element = one(info.element_type)
    return st.lists(element, max_size=3).map(tuple) if info.is_list else element


@st.composite
def _pipelines(draw: Any, max_passes: int) -> Pipeline:
    registry = all_passes()
    passes = []
    for name in draw(st.lists(st.sampled_from(sorted(registry)), max_size=max_passes)):
        cls = registry[name]
        options = {o.field: draw(_option_values(o)) for o in cls.options()
                   if draw(st.booleans())}
        try:
            passes.append(cls(**options))
        except (TypeError, ValueError):  # a pass that checks its options: use the defaults
            passes.append(cls())
    return Pipeline(tuple(sorted(passes, key=lambda p: p.stage.index)))


def pipelines(max_passes: int = 8) -> st.SearchStrategy[Pipeline]:
    """Pipelines of registered passes (in stage order) with random option values."""
    return _pipelines(max_passes)


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
    return print_program(program) + ("" if inputs is None else _inputs_text(program, inputs))


def _inputs_text(program: Program, inputs: ProgramInputs | Sequence[Any]) -> str:
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
             inputs: Sequence[np.ndarray], out: Comparison) -> None:
    rtol = {d: t.rtol for d, t in TOLERANCES.items()}
    bounds = error_bounds(program, inputs, rtol, function)
    if len(got) != len(want):
        out.problems.append(f"function {function}: {len(got)} results, want {len(want)}")
        return
    for i, (g, w, b) in enumerate(zip(got, want, bounds, strict=True)):
        tol = TOLERANCES.get(DType.from_numpy(np.asarray(w).dtype))
        out.judge(f"function {function} result {i}", g, w, b, tol.atol if tol else 0.0)


def assert_close(got: Sequence[Any], want: Sequence[np.ndarray], program: Program,
                 inputs: Sequence[Any], function: str | None = None) -> tuple[int, int]:
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
    _compare(program, fn.name, got, want, inputs, out)
    if out.problems:
        raise DifferentialFailure("results differ:\n  " + "\n  ".join(out.problems) + "\n"
                                  + example_text(program, {fn.name: tuple(inputs)}))
    return out.compared, out.skipped


# ---- checks ---------------------------------------------------------------------------------


def unsupported_reason(error: BaseException) -> str | None:
    """Why ``error`` means "no kernel for this op yet" (kernelization's "no kernel lowering"),
    or None when it is a real failure."""
    text = str(error)
    if isinstance(error, PassFailure) and "kernelization" in text and (
            "no kernel lowering" in text):
        return text.splitlines()[0]
    return None


def _pipeline(pipeline: str | Pipeline) -> Pipeline:
    return parse_pipeline(pipeline) if isinstance(pipeline, str) else pipeline


def check_end_to_end(program: Program, inputs: ProgramInputs | Sequence[Any],
                     device: str | None = None, pipeline: str | Pipeline = "accy-default"
                     ) -> CheckResult:
    """Prepare ``program`` for ``device`` (default ``ACCY_DEVICE`` or PoCL), run every function
    on OpenCL, and compare with :func:`accy.interpret` (see :func:`assert_close`).

    Returns ``unsupported`` when kernelization has no kernel lowering for an op yet, or a kernel
    is illegal for the device (e.g. f16 without ``cl_khr_fp16``); any other error raises
    :class:`DifferentialFailure`. ``DeviceError`` (no OpenCL) passes through.
    """
    from accy.backends.opencl.runtime import select_device

    runtime = select_device(device)
    target = TargetProfile.from_device(runtime.info)
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
        _compare(program, fn.name, got, want, by_fn[fn.name], out)
    if out.problems:
        raise _failure(f"end-to-end ({pipe.text()}) on {runtime.info.name}: OpenCL results "
                       f"differ from interpret:\n  " + "\n  ".join(out.problems), program, by_fn)
    return CheckResult("ok", compared=out.compared, skipped=out.skipped)


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
    by_fn = _by_function(program, inputs)
    check = _MeaningCheck(by_fn)
    pipe = _pipeline(pipeline)
    try:
        prepare(program, pipe, target=target, instruments=[check])
    except PassFailure as e:
        reason = unsupported_reason(e)
        if reason is None:
            raise _failure(f"passes ({pipe.text()}): {e}", program, by_fn) from e
        return CheckResult("unsupported", reason, check.result.compared, check.result.skipped,
                           tuple(check.changed))
    return CheckResult("ok", "", check.result.compared, check.result.skipped,
                       tuple(check.changed))


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
    done = subprocess.run([sys.executable, "-c", "import accy.testing as t; t._fingerprint_main()"],
                          input=payload, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise DifferentialFailure(f"determinism: the fresh process failed:\n{done.stderr}")
    return json.loads(done.stdout)


def _fingerprint_main() -> None:
    """Entry point of the fresh process of :func:`check_determinism` (JSON on stdin/stdout)."""
    from accy.ir.parser import parse_program

    job = json.load(sys.stdin)
    out = [fingerprints(parse_program(t), job["pipeline"]) for t in job["programs"]]
    json.dump(out, sys.stdout)
