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

Per rule: ``check_rule(program, inputs, "mul-one")`` applies one named rewrite rule alone
(``saturate`` with only that rule, its float policy enabled) and checks the program keeps its
meaning; run it over programs that contain the rule's pattern,
``programs_with_inputs(programs_with(lambda x: x * 1.0))``. Its result's ``matches`` says
whether the rule fired (a rule that does not match passes trivially).

A failing example is shown as IR text (``example_text``), and shrinks to a small program.
Requires ``hypothesis`` (the ``test`` extra). The generator's engine is
:mod:`accy.program_gen`; tolerances and checks live in :mod:`accy.differential` (the error
model behind the tolerances is :mod:`accy.error_bounds`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
from hypothesis import currently_in_test_context, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from accy.differential import (
    TOLERANCES,
    CheckResult,
    DifferentialFailure,
    ProgramInputs,
    Tolerance,
    assert_close,
    check_determinism,
    check_end_to_end,
    check_passes,
    check_rule,
    example_text,
    inputs_text,
    unsupported_reason,
)
from accy.ir.ops import Op, OpKind
from accy.ir.program import Function, Program
from accy.ir.types import DType, TensorType
from accy.passes.registry import all_passes
from accy.passes.spec import Pipeline
from accy.program_gen import Options, Pattern, generate_function, make_options

__all__ = [
    "ALL_OPS", "ELEMENTWISE_OPS", "TOLERANCES", "CheckResult", "DifferentialFailure",
    "ProgramInputs", "Tolerance", "assert_close", "check_determinism", "check_end_to_end",
    "check_passes", "check_rule", "dtypes", "example_text", "index_bounds", "inputs_for",
    "pipelines", "programs", "programs_with", "programs_with_inputs", "random_inputs", "shapes",
    "tensor_types", "unsupported_reason",
]


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
        note(inputs_text(program, inputs))
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
    """Values of one option within its declared range (``OptionInfo.check``)."""
    low = info.minimum if info.minimum is not None else info.above
    high = info.maximum

    def one(t: Any) -> st.SearchStrategy:
        if info.choices is not None:
            return st.sampled_from(info.choices)
        if t is int and info.power_of_two:
            top = int(high).bit_length() - 1 if high is not None else 62
            return st.integers(0, top).map(lambda e: 2**e)  # filtered to the range below
        if t is int:
            return st.integers(None if low is None else int(low),
                               None if high is None else int(high))
        if t is float:
            return st.floats(low, high, allow_nan=not info.finite,
                             allow_infinity=not info.finite, exclude_min=info.above is not None)
        return {bool: st.booleans(), str: st.text(min_size=int(info.nonempty))}[t]

    element = one(info.element_type)
    values = (st.lists(element, min_size=int(info.nonempty), max_size=3).map(tuple)
              if info.is_list else element)
    return values.filter(lambda v: _allowed(info, v))


def _allowed(info: Any, value: Any) -> bool:
    try:
        info.check(value)
    except ValueError:
        return False
    return True


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
