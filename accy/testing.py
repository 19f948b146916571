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

import functools
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from hypothesis import currently_in_test_context, note
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import accy.differential as _differential
from accy.differential import (
    TOLERANCES,
    CheckResult,
    DifferentialFailure,
    ProgramInputs,
    Tolerance,
    assert_close,
    check_determinism,
    example_text,
    inputs_text,
    unsupported_reason,
)
from accy.ir.interpret import function_inputs
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
    "option_values", "pipelines", "program_inputs", "prerequisites", "programs", "programs_with",
    "programs_with_inputs", "random_inputs", "shapes", "tensor_types", "unsupported_reason",
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
    movement ops valid attributes, conv2d and pools rank-4 NCHW floats and windows that fit
    (``pad`` any rank); ``log``/``sqrt``/``rsqrt``/``reciprocal``/``pow`` bases and
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


# ---- inputs in every accepted form -------------------------------------------------------


def program_inputs(program: Program, inputs: Sequence[Any] | Mapping[str, Any]
                   ) -> ProgramInputs:
    """``inputs`` as ``{function name: (array per parameter)}``, from any form that
    :func:`accy.interpret` takes too (:func:`accy.ir.interpret.function_inputs`): a sequence
    of the only function's arrays in parameter order, a mapping from its parameter names to
    arrays, or a mapping from function names to either. The checks below take all three."""
    names = {f.name for f in program.functions}
    only = program.functions[0] if len(program.functions) == 1 else None
    by_function = (isinstance(inputs, Mapping) and bool(inputs) and set(inputs) <= names
                   and not (only is not None and set(inputs) == set(only.param_names)))
    chosen = [f for f in program.functions if f.name in inputs] if by_function else [
        program.function()]
    out: ProgramInputs = {}
    for fn in chosen:
        given = function_inputs(program, inputs, fn.name)
        if isinstance(given, Mapping):
            if set(given) != set(fn.param_names):
                raise ValueError(f"function {fn.name}: inputs by name must be exactly its "
                                 f"parameters {list(fn.param_names)}, got {sorted(given)}")
            given = [given[n] for n in fn.param_names]
        out[fn.name] = tuple(given)
    return out


def _any_inputs(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    @functools.wraps(check)
    def wrapped(program: Program, inputs: Sequence[Any] | Mapping[str, Any], *args: Any,
                **kwargs: Any) -> CheckResult:
        return check(program, program_inputs(program, inputs), *args, **kwargs)

    wrapped.__doc__ = (check.__doc__ or "") + (
        "\n\n    ``inputs``: any form :func:`program_inputs` takes (positional sequence, "
        "parameter name -> array, or function name -> either).")
    return wrapped


check_end_to_end = _any_inputs(_differential.check_end_to_end)
check_passes = _any_inputs(_differential.check_passes)
check_rule = _any_inputs(_differential.check_rule)


# ---- pipelines --------------------------------------------------------------------------------

# pass -> the passes that make the plans it needs (``Product.require`` in its ``run``). A pass of
# one's own may say the same with a class attribute ``requires = ("fusion-planning", ...)``.
PASS_PREREQUISITES: dict[str, tuple[str, ...]] = {
    "schedule-planning": ("fusion-planning",),
    "bufferization-planning": ("fusion-planning", "schedule-planning"),
    "memory-space-planning": ("bufferization-planning",),
    "layout-planning": ("bufferization-planning",),
    "kernel-outlining-planning": ("schedule-planning", "bufferization-planning"),
    "kernelization": ("kernel-outlining-planning",),
    "backend-legalization": ("kernelization",),
}
RUN_REQUIRES = ("backend-legalization",)  # running a prepared job needs its legality report
PREPARE_REQUIRES = ("conv-lowering",)  # every pipeline: pad may not reach the dispatch stage


def prerequisites(name: str) -> tuple[str, ...]:
    """The passes ``name`` needs earlier in a pipeline: its class's ``requires`` when it has
    one, else :data:`PASS_PREREQUISITES` (none for an unknown pass)."""
    declared = getattr(all_passes().get(name), "requires", None)
    return tuple(declared) if declared is not None else PASS_PREREQUISITES.get(name, ())


def _closure(names: Sequence[str]) -> list[str]:
    out: dict[str, None] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out[name] = None
            todo.extend(prerequisites(name))
    return list(out)


def _subsets(items: Sequence[str], min_size: int = 0) -> st.SearchStrategy[tuple[str, ...]]:
    return st.lists(st.sampled_from(list(items)), min_size=min_size, max_size=len(items),
                    unique=True).map(tuple)


def _powers_of_two(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.sampled_from([1 << k for k in range(lo.bit_length() - 1, hi.bit_length())])


def _valid_values() -> dict[tuple[str, str], st.SearchStrategy]:
    """(pass, option field) -> values the option accepts and every valid program runs with
    (cheap ones: small saturation limits). ``error`` policies of dtype-legalization are left
    out: they refuse programs by design."""
    from accy.egraph.cost import COST_MODELS
    from accy.passes.kernel.kernelization import GENERATORS
    from accy.passes.tensor.activation_lowering import LOWERABLE
    from accy.passes.tensor.einsum_lowering import _DEFAULTS
    from accy.passes.tensor.saturate import DEFAULT_RULESETS

    limits = {"iterations": st.integers(1, 12), "node_limit": st.integers(200, 20_000),
              "time_limit": st.floats(0.05, 2.0), "max_elements": st.integers(0, 1 << 16)}
    out: dict[tuple[str, str], st.SearchStrategy] = {}
    for name in ("constant-fold", "canonicalize", "saturate"):
        out.update({(name, k): v for k, v in limits.items()})
    blocks = st.integers(0, 64)  # 0: the generator chooses
    out.update({
        ("constant-fold", "disable"): _subsets(["fold-exp", "fold-neg", "fold-add"]),
        ("canonicalize", "disable"): _subsets(["mul-one", "neg-neg", "add-zero"]),
        ("saturate", "rulesets"): _subsets(DEFAULT_RULESETS, min_size=1),
        ("saturate", "rules"): st.just(()),
        ("saturate", "disable"): st.just(()),  # valid names depend on the drawn rulesets
        ("saturate", "match_limit"): st.integers(0, 1000),
        ("saturate", "cost"): st.sampled_from(sorted(COST_MODELS)),
        ("activation-lowering", "ops"): _subsets(LOWERABLE),
        ("einsum-lowering", "exact_state_limit"): st.integers(
            _DEFAULTS.exact_state_limit, 2 * _DEFAULTS.exact_state_limit),
        ("einsum-lowering", "beam_width"): st.integers(1, 8),
        ("einsum-lowering", "auto_beam_width"): st.integers(0, 8),
        # a limit below an einsum's output is the user's error (the pass says so): none, or
        # limits random programs' einsums fit; a bounded search budget
        ("einsum-lowering", "memory_limit"): st.sampled_from([0, 1 << 16, 1 << 24]),
        ("einsum-lowering", "max_time"): st.sampled_from([0.0, 0.05]),
        ("einsum-lowering", "max_repeats"): st.integers(0, 8),
        ("indexing-lowering", "gather_thread_blocks"): blocks,
        ("indexing-lowering", "scatter_thread_blocks"): blocks,
        ("loss-lowering", "row_sparse_cross_entropy_thread_blocks"): blocks,
        ("dtype-legalization", "f16"): st.sampled_from(["promote", "keep"]),
        ("dtype-legalization", "f64"): st.sampled_from(["keep", "demote"]),
        ("dtype-legalization", "i64"): st.sampled_from(["keep", "demote"]),
        ("kernel-outlining-planning", "work_group_size"): _powers_of_two(1, 1024),
        ("kernel-outlining-planning", "max_name_ops"): st.integers(0, 8),
        ("kernelization", "disable"): _subsets([g for g in GENERATORS if g != "loop-nest"]),
        ("layout-planning", "alignment"): _powers_of_two(1, 256),
    })
    return out


def _declared(info: Any) -> st.SearchStrategy | None:
    """Values within the option's declared range (:class:`~accy.passes.base.OptionInfo`:
    ``minimum``/``above``/``maximum``, ``choices``, ``power_of_two``), an open or very large
    upper end capped at four times the default (cheap enough to run); None for an option that
    declares nothing numeric or chosen."""
    choices = info.choices
    if choices is not None:
        element: st.SearchStrategy = st.sampled_from(list(choices))
    elif info.element_type in (int, float) and (
            info.minimum is not None or info.above is not None or info.maximum is not None):
        low = info.minimum if info.minimum is not None else info.above
        default = info.default if not info.is_list else None
        base = default if isinstance(default, int | float) and default > 0 else 16
        high = min(info.maximum if info.maximum is not None else math.inf,
                   max(low if low is not None else 0, 4 * base))
        if info.element_type is int and info.power_of_two:
            element = st.integers(0, int(high).bit_length() - 1).map(lambda e: 1 << e)
        elif info.element_type is int:
            element = st.integers(None if low is None else math.ceil(low), int(high))
        else:
            element = st.floats(low, high, allow_nan=False, allow_infinity=False,
                                exclude_min=info.above is not None and info.minimum is None)
    else:
        return None
    values = (st.lists(element, min_size=int(info.nonempty), max_size=3, unique=True).map(tuple)
              if info.is_list else element)
    return values.filter(lambda v: _allowed(info, v))


def _allowed(info: Any, value: Any) -> bool:
    try:
        info.check(value)
    except ValueError:
        return False
    return True


def option_values(cls: type, info: Any, table: dict | None = None) -> st.SearchStrategy:
    """Valid values of option ``info`` of pass class ``cls``: :func:`_valid_values` (cheap
    values for accy's passes), else its declaration (:func:`_declared`), else both values of a
    ``bool``, else only its default (a range accy cannot know)."""
    table = _valid_values() if table is None else table
    if (cls.name, info.field) in table:
        return table[(cls.name, info.field)].filter(lambda v: _allowed(info, v))
    declared = _declared(info)
    if declared is not None:
        return declared
    if info.type is bool:
        return st.booleans()
    return st.just(info.default)


def _ordered(names: list[str], registry: dict[str, type]) -> list[str]:
    """Stage order; within a stage the order of ``accy-default`` (unknown passes after, in
    the drawn order), moved later where a prerequisite would come after its user."""
    from accy.passes.spec import parse_pipeline

    canonical = [p.name for p in parse_pipeline("accy-default").passes]
    rank = {n: (registry[n].stage.index, canonical.index(n) if n in canonical
                else len(canonical) + i) for i, n in enumerate(names)}
    out: list[str] = []
    waiting = sorted(names, key=rank.__getitem__)
    while waiting:  # the lowest-ranked pass whose prerequisites are all placed
        ready = next((n for n in waiting if set(prerequisites(n)) <= set(out)), waiting[0])
        out.append(ready)
        waiting.remove(ready)
    return out


@st.composite
def _pipelines(draw: Any, max_passes: int, runnable: bool) -> Pipeline:
    registry = all_passes()
    table = _valid_values()
    chosen = draw(st.lists(st.sampled_from(sorted(registry)), max_size=max_passes, unique=True))
    names = _closure([*chosen, *PREPARE_REQUIRES, *(RUN_REQUIRES if runnable else ())])
    passes = []
    for name in _ordered([n for n in names if n in registry], registry):
        cls = registry[name]
        options = {o.field: draw(option_values(cls, o, table)) for o in cls.options()
                   if draw(st.booleans())}
        try:
            passes.append(cls(**options))
        except (TypeError, ValueError):  # a user's pass refusing a value: its defaults
            passes.append(cls())
    return Pipeline(tuple(passes))


def pipelines(max_passes: int = 8, *, runnable: bool = True) -> st.SearchStrategy[Pipeline]:
    """Pipelines that prepare every valid program: up to ``max_passes`` registered passes
    (yours too) drawn with their prerequisites (:func:`prerequisites`) and ``conv-lowering``
    (``pad`` must be lowered before the dispatch stage), in stage order, with option values in
    their valid ranges (:func:`option_values`). ``runnable`` (default) adds
    what running needs (kernelization, backend-legalization and theirs), so
    ``prepare(program, pipeline).run(*inputs)`` works wherever the target supports the
    program's dtypes; without it, pipelines may stop short of kernels.
    """
    return _pipelines(max_passes, runnable)
