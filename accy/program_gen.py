"""The engine behind ``accy.testing.programs``: random programs that are valid by construction.

A :class:`FunctionGenerator` grows one function op by op from a hypothesis ``draw``. Every op
picks its operands from the values made so far when their types fit, or makes a new leaf (a
parameter, or a small constant) of a type that fits, so no draw is ever rejected. Operands that
an op's domain needs positive (``log``, ``sqrt``, ``rsqrt``, ``reciprocal``, a ``div``
denominator, a ``pow`` base) are guarded as ``abs(x) + 1``; indices and labels are always new
parameters, for which ``accy.testing.inputs_for`` draws in-range values. Window ops (conv2d,
pools) take rank-4 ``[N, C, H, W]`` floats whatever ``max_rank`` says, with kernels shrunk to
fit the padded input, so every output dim is at least 1. Choices are ordered
so that shrinking reuses earlier values, keeps shapes equal and drops ops: a failing program
shrinks to a few readable lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from hypothesis import strategies as st

from accy.ir.node import Node, topological
from accy.ir.ops import Op, OpKind
from accy.ir.program import Function
from accy.ir.shapes import FLOAT_ONLY, infer
from accy.ir.types import DType, TensorType

Draw = Callable[[st.SearchStrategy[Any]], Any]
Pattern = Callable[..., Any]  # (*Values) -> Value, see accy.testing.programs_with

POSITIVE_OPERAND = {Op.LOG: 0, Op.SQRT: 0, Op.RSQRT: 0, Op.RECIPROCAL: 0, Op.DIV: 1, Op.POW: 0}
LETTERS = "abcdefghijklmnopqrstuvwxyz"
_ELEMENTWISE = (OpKind.UNARY, OpKind.BINARY, OpKind.COMPARE, OpKind.LOGICAL)
PREFERRED = (DType.f32, DType.i32, DType.f64, DType.i64, DType.bool, DType.f16)
_IS = {
    "any": lambda d: True,
    "numeric": lambda d: d is not DType.bool,
    "float": lambda d: d.is_float,
    "bool": lambda d: d is DType.bool,
}


def operand_kind(op: Op) -> str:
    """Which dtypes ``op``'s (first) operand may have: any, numeric, float or bool."""
    if op in FLOAT_ONLY or op in (Op.REDUCE_MEAN, Op.SOFTMAX, Op.LOG_SOFTMAX,
                                  Op.CROSS_ENTROPY):
        return "float"
    if op.kind is OpKind.LOGICAL:
        return "bool"
    if op in (Op.EQ, Op.NE, Op.SELECT, Op.CAST, Op.GATHER, Op.PAD) or op.kind is OpKind.MOVEMENT:
        return "any"
    if op.kind is OpKind.WINDOW:  # conv2d and the pools
        return "float"
    return "numeric"


@dataclass(frozen=True)
class Options:
    """What programs may contain (see ``accy.testing.programs``)."""

    ops: tuple[Op, ...]
    dtypes: tuple[DType, ...]
    max_nodes: int = 8
    max_rank: int = 3
    max_dim: int = 4
    allow_nan: bool = False

    def usable(self, op: Op) -> bool:
        """Whether ``op`` can be built (its kind is known) from leaves of the allowed dtypes."""
        if op.kind not in _MAKERS and op.kind not in _ELEMENTWISE:
            return False
        kind = operand_kind(op)
        if kind == "bool":  # bools come from comparisons when bool leaves are not allowed
            return True
        return any(_IS[kind](d) for d in self.dtypes)

    @property
    def index_dtypes(self) -> tuple[DType, ...]:
        return tuple(d for d in self.dtypes if d.is_int) or (DType.i32,)


def make_options(ops: Sequence[Op | OpKind | str] | None, dtypes: Sequence[DType | str] | None,
                 **sizes: Any) -> Options:
    """Normalize ``ops`` (ops, op kinds or names) and ``dtypes``; ValueError if none is usable."""
    chosen: list[Op] = []
    for x in ops if ops is not None else [o for o in Op if o.kind is not OpKind.SOURCE]:
        if isinstance(x, OpKind):
            chosen.extend(o for o in Op if o.kind is x)
        else:
            chosen.append(x if isinstance(x, Op) else Op.parse(x))
    given = [DType.parse(d) if isinstance(d, str) else d for d in dtypes or list(DType)]
    kinds = tuple(d for d in PREFERRED if d in given)  # shrinking favours the first
    opts = Options(tuple(dict.fromkeys(o for o in chosen if o.kind is not OpKind.SOURCE)),
                   kinds, **sizes)
    usable = tuple(o for o in opts.ops if opts.usable(o))
    if not usable:
        raise ValueError(f"no op of {[o.value for o in opts.ops]} can be built from dtypes "
                         f"{[d.value for d in kinds]}")
    if opts.max_nodes < 1 or opts.max_dim < 1 or opts.max_rank < 0:
        raise ValueError("max_nodes and max_dim must be >= 1 and max_rank >= 0")
    return Options(usable, kinds, opts.max_nodes, opts.max_rank, opts.max_dim, opts.allow_nan)


def _broadcastable(s: tuple[int, ...], t: tuple[int, ...]) -> bool:
    return all(a == b or a == 1 or b == 1 for a, b in zip(reversed(s), reversed(t),
                                                          strict=False))


class FunctionGenerator:
    """Grows one function from ``draw``; ``function(name)`` finishes it."""

    def __init__(self, draw: Draw, options: Options) -> None:
        self.draw = draw
        self.o = options
        self.params: list[Node] = []
        self.pool: list[Node] = []  # values later ops may use
        self.made: list[Node] = []  # op results, in order

    # ---- leaves -------------------------------------------------------------------------

    def shape(self, min_rank: int = 0, max_rank: int | None = None) -> tuple[int, ...]:
        top = self.o.max_rank if max_rank is None else max_rank
        rank = self.draw(st.integers(min(min_rank, top), top))
        return tuple(self.draw(st.integers(1, self.o.max_dim)) for _ in range(rank))

    def dtype(self, kind: str) -> DType:
        return self.draw(st.sampled_from([d for d in self.o.dtypes if _IS[kind](d)]))

    def param(self, t: TensorType, pooled: bool = True) -> Node:
        """A new parameter; indices and labels (``pooled=False``) are not reused as data."""
        p = Node(Op.PARAM, t, (), {"index": len(self.params)})
        self.params.append(p)
        if pooled:
            self.pool.append(p)
        return p

    def constant(self, t: TensorType) -> Node:
        if t.dtype.is_float:
            element = st.integers(-8, 8).map(lambda k: k / 2)
            if self.o.allow_nan:
                element = st.one_of(element, st.sampled_from([np.nan, np.inf, -np.inf]))
        elif t.dtype.is_int:
            element = st.integers(-5, 5)
        else:
            element = st.booleans()
        values = [self.draw(element) for _ in range(t.size)]
        arr = np.array(values, dtype=t.dtype.numpy).reshape(t.shape)
        return Node(Op.CONSTANT, t, (), {"value": arr.tobytes()})

    def fresh(self, t: TensorType, constant_ok: bool = True) -> Node:
        """A new leaf of type ``t`` (a bool that leaves may not be is a comparison)."""
        if t.dtype is DType.bool and DType.bool not in self.o.dtypes:
            x = self.fresh(t.with_dtype(self.dtype("numeric" if self.o.usable(Op.ADD)
                                                   else "any")), constant_ok)
            return self.node(Op.NE, x, self.constant(TensorType((), x.type.dtype)))
        if constant_ok and t.size <= 4 and self.draw(st.integers(0, 3)) == 3:
            return self.constant(t)
        return self.param(t)

    def operand(self, fits: Callable[[TensorType], bool], make: Callable[[], TensorType],
                constant_ok: bool = True) -> Node:
        """A value made so far whose type ``fits``, or a new leaf of type ``make()``."""
        found = [n for n in self.pool if fits(n.type)]
        i = self.draw(st.integers(0, len(found)))
        return found[i] if i < len(found) else self.fresh(make(), constant_ok)

    def of_kind(self, kind: str, min_rank: int = 0) -> Node:
        return self.operand(lambda t: _IS[kind](t.dtype) and t.rank >= min_rank,
                            lambda: TensorType(self.shape(min_rank), self.dtype_for(kind)))

    def dtype_for(self, kind: str) -> DType:
        if kind == "bool" and DType.bool not in self.o.dtypes:
            return DType.bool  # fresh() turns it into a comparison
        return self.dtype(kind)

    def partner(self, a: Node, dtype: DType | None = None) -> Node:
        """An operand of ``a``'s dtype (or ``dtype``) whose shape broadcasts with ``a``'s."""
        want = dtype or a.type.dtype
        return self.operand(lambda t: t.dtype is want and _broadcastable(t.shape, a.type.shape),
                            lambda: TensorType(self.partner_shape(a.type.shape), want))

    def partner_shape(self, s: tuple[int, ...]) -> tuple[int, ...]:
        """``s``, or a shape broadcasting with it: leading dims dropped, dims set to or from 1."""
        drop = self.draw(st.integers(0, len(s)))
        out = []
        for d in s[drop:]:
            how = self.draw(st.integers(0, 2))
            out.append(d if how == 0 else 1 if how == 1 or d != 1 else
                       self.draw(st.integers(1, self.o.max_dim)))
        return tuple(out)

    # ---- ops ----------------------------------------------------------------------------

    def node(self, op: Op, *srcs: Node, **attrs: Any) -> Node:
        t, attrs = infer(op, tuple(s.type for s in srcs), attrs)
        return Node(op, t, srcs, attrs)

    def positive(self, x: Node) -> Node:
        """``abs(x) + 1``: never zero, positive for floats (keeps log/sqrt/div/pow defined)."""
        one = self.constant_value(1, x.type.dtype)
        return self.node(Op.ADD, self.node(Op.ABS, x), one)

    @staticmethod
    def constant_value(value: Any, dtype: DType) -> Node:
        arr = np.array(value, dtype=dtype.numpy)
        return Node(Op.CONSTANT, TensorType((), dtype), (), {"value": arr.tobytes()})

    def step(self, op: Op) -> Node:
        """Build one ``op`` (with guards) over operands drawn from the pool; add it to the pool."""
        kind = op.kind
        if kind in _ELEMENTWISE:
            srcs = [self.of_kind(operand_kind(op))]
            if op.arity == 2:
                srcs.append(self.partner(srcs[0]))
                if self.draw(st.booleans()):
                    srcs.reverse()
            if op in POSITIVE_OPERAND:
                i = POSITIVE_OPERAND[op]
                srcs[i] = self.positive(srcs[i])
            out = self.node(op, *srcs)
        else:
            out = _MAKERS[kind](self, op)
        self.pool.append(out)
        self.made.append(out)
        return out

    def select(self, op: Op) -> Node:
        a = self.of_kind("any")
        b = self.partner(a)
        both = np.broadcast_shapes(a.type.shape, b.type.shape)
        cond = self.operand(lambda t: t.dtype is DType.bool and _broadcastable(t.shape, both),
                            lambda: TensorType(self.partner_shape(both), DType.bool))
        return self.node(op, cond, a, b)

    def cast(self, op: Op) -> Node:
        return self.node(op, self.of_kind("any"), dtype=self.dtype("any"))

    def reduce(self, op: Op) -> Node:
        x = self.of_kind(operand_kind(op))
        axes = self.draw(st.lists(st.integers(0, x.type.rank - 1), unique=True,
                                  max_size=x.type.rank)) if x.type.rank else []
        return self.node(op, x, axes=tuple(axes), keepdims=self.draw(st.booleans()))

    def einsum(self, op: Op) -> Node:
        """1-3 operands; each dim gets a new letter or one of equal size already used (batch,
        contraction, or a repeated letter within a term); output: letters in any order."""
        first = self.of_kind("numeric")
        dtype = first.type.dtype
        sizes: dict[str, int] = {}
        terms, operands = [], []
        for k in range(self.draw(st.integers(1, 3))):
            x = first if k == 0 else self.operand(
                lambda t: t.dtype is dtype,
                lambda: TensorType(self.einsum_shape(sizes), dtype))
            term = ""
            for d in x.type.shape:
                same = [c for c, s in sizes.items() if s == d]
                j = self.draw(st.integers(0, len(same)))
                if j == 0:
                    term += LETTERS[len(sizes)]
                    sizes[term[-1]] = d
                else:
                    term += same[j - 1]
            terms.append(term)
            operands.append(x)
        letters = list(sizes)
        out = self.draw(st.lists(st.sampled_from(letters), unique=True,
                                 max_size=min(len(letters), self.o.max_rank))) if letters else []
        return self.node(op, *operands, spec=",".join(terms) + "->" + "".join(out))

    def einsum_shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        dims = []
        for _ in range(self.draw(st.integers(0, self.o.max_rank))):
            known = list(sizes.values())
            j = self.draw(st.integers(0, len(known)))
            dims.append(known[j] if j < len(known) else self.draw(st.integers(1, self.o.max_dim)))
        return tuple(dims)

    def movement(self, op: Op) -> Node:
        if op is Op.CONCAT:
            return self.concat(op)
        x = self.of_kind("any", min_rank=1 if op is Op.SLICE else 0)
        shape = x.type.shape
        if op is Op.RESHAPE:
            return self.node(op, x, shape=self.factor(x.type.size))
        if op is Op.TRANSPOSE:
            return self.node(op, x, perm=tuple(self.draw(st.permutations(range(len(shape))))))
        if op is Op.BROADCAST:
            lead = self.shape(max_rank=self.o.max_rank - len(shape))
            dims = tuple(self.draw(st.integers(1, self.o.max_dim)) if d == 1 else d
                         for d in shape)
            return self.node(op, x, shape=lead + dims)
        starts, stops, steps = [], [], []
        for d in shape:
            starts.append(self.draw(st.integers(0, d - 1)))
            stops.append(d - self.draw(st.integers(0, d - 1 - starts[-1])))
            steps.append(self.draw(st.integers(1, 3)))
        return self.node(op, x, starts=tuple(starts), stops=tuple(stops), steps=tuple(steps))

    def factor(self, size: int) -> tuple[int, ...]:
        """A random shape of ``size`` elements (prime factors spread over the dims)."""
        primes, n, p = [], size, 2
        while n > 1:
            while n % p == 0:
                primes.append(p)
                n //= p
            p += 1
        rank = self.draw(st.integers(min(1, len(primes)), max(self.o.max_rank, 1)))
        dims = [1] * rank
        for p in primes:
            dims[self.draw(st.integers(0, rank - 1))] *= p
        return tuple(dims)

    def concat(self, op: Op) -> Node:
        x = self.of_kind("any", min_rank=1)
        axis = self.draw(st.integers(0, x.type.rank - 1))

        def fits(t: TensorType) -> bool:
            return t.dtype is x.type.dtype and t.rank == x.type.rank and all(
                a == b for i, (a, b) in enumerate(zip(t.shape, x.type.shape, strict=True))
                if i != axis)

        def make() -> TensorType:
            s = list(x.type.shape)
            s[axis] = self.draw(st.integers(1, self.o.max_dim))
            return TensorType(tuple(s), x.type.dtype)

        rest = [self.operand(fits, make) for _ in range(self.draw(st.integers(1, 2)))]
        return self.node(op, x, *rest, axis=axis)

    def indices(self, max_rank: int) -> Node:
        return self.param(TensorType(self.shape(max_rank=max_rank),
                                     self.draw(st.sampled_from(self.o.index_dtypes))), False)

    def indexing(self, op: Op) -> Node:
        x = self.of_kind("any" if op is Op.GATHER else "numeric", min_rank=1)
        axis = self.draw(st.integers(0, x.type.rank - 1))
        idx = self.indices(self.o.max_rank - x.type.rank + 1)
        if op is Op.GATHER:
            return self.node(op, x, idx, axis=axis)
        s = x.type.shape
        t = TensorType(s[:axis] + idx.type.shape + s[axis + 1:], x.type.dtype)
        updates = self.operand(lambda u: u == t, lambda: t, constant_ok=False)
        return self.node(op, x, idx, updates, axis=axis)

    def rowwise(self, op: Op) -> Node:
        x = self.of_kind("float", min_rank=1)
        return self.node(op, x, axis=self.draw(st.integers(0, x.type.rank - 1)))

    def loss(self, op: Op) -> Node:
        logits = self.of_kind("float", min_rank=1)
        labels = self.param(TensorType(logits.type.shape[:-1],
                                       self.draw(st.sampled_from(self.o.index_dtypes))), False)
        return self.node(op, logits, labels)

    # ---- sliding windows (NCHW; pads [top, left, bottom, right]) ------------------------

    def nchw(self) -> Node:
        """A float ``[N, C, H, W]`` operand (whatever ``max_rank`` says): a value made so far,
        or a new leaf with N <= 2, C <= ``max_dim`` and H, W <= ``2 * max_dim + 1`` (room for
        a dilated 3x3 window)."""
        def make() -> TensorType:
            top = self.o.max_dim
            dims = (self.draw(st.integers(1, min(2, top))), self.draw(st.integers(1, top)),
                    self.draw(st.integers(1, 2 * top + 1)), self.draw(st.integers(1, 2 * top + 1)))
            return TensorType(dims, self.dtype("float"))

        return self.operand(lambda t: t.dtype.is_float and t.rank == 4, make)

    def window(self, op: Op) -> Node:
        """conv2d, the pools (kernel 1-3, stride 1-2, pads 0-1 per side, dilation 1-2) and pad;
        kernels shrink to fit, so every output dim is at least 1."""
        if op is Op.PAD:
            x = self.of_kind("any", min_rank=1)
            pairs = [(self.draw(st.integers(0, 2)), self.draw(st.integers(0, 2)))
                     for _ in x.type.shape]
            value = self.constant(TensorType((), x.type.dtype))
            return self.node(op, x, value, pads=tuple(b for b, _ in pairs) +
                             tuple(a for _, a in pairs))
        x = self.nchw()
        n, c, h, w = x.type.shape
        kernel, dilations, pads = [], [], [0, 0, 0, 0]
        for i, size in enumerate((h, w)):
            if op is Op.CONV2D:
                pads[i], pads[2 + i] = self.draw(st.integers(0, 1)), self.draw(st.integers(0, 1))
                room = size + pads[i] + pads[2 + i]
                k = min(self.draw(st.integers(1, 3)), room)
                d = self.draw(st.integers(1, 2))
                dilations.append(d if d * (k - 1) + 1 <= room else 1)
            else:  # pads must stay below the kernel, so draw the kernel first
                k = self.draw(st.integers(1, min(3, size + 1)))
                pads[i] = self.draw(st.integers(0, min(1, k - 1)))
                pads[2 + i] = self.draw(st.integers(0, min(1, k - 1)))
                if pads[i] + pads[2 + i] < k - size:  # k == size + 1 >= 2: one pad fits
                    pads[2 + i] = 1
            kernel.append(k)
        strides = (self.draw(st.integers(1, 2)), self.draw(st.integers(1, 2)))
        if op is Op.CONV2D:
            groups = self.draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0]))
            o = groups * self.draw(st.integers(1, max(1, self.o.max_dim // groups)))
            wt = TensorType((o, c // groups, *kernel), x.type.dtype)
            weights = self.operand(lambda t: t == wt, lambda: wt)
            return self.node(op, x, weights, strides=strides, pads=tuple(pads),
                             dilations=tuple(dilations), groups=groups)
        attrs: dict[str, Any] = {"kernel": tuple(kernel), "strides": strides,
                                 "pads": tuple(pads)}
        if op is Op.AVG_POOL2D:
            attrs["count_include_pad"] = self.draw(st.booleans())
        return self.node(op, x, **attrs)

    # ---- patterns and finishing ---------------------------------------------------------

    def embed(self, pattern: Op | Pattern, types: Sequence[TensorType]) -> Node:
        """Build ``pattern`` here: an op through :meth:`step`, or a builder callback over
        operands of ``types`` (values made so far, new parameters, or a unary op of them)."""
        if isinstance(pattern, Op):
            return self.step(pattern)
        from accy.builder import Builder, FunctionBuilder, Value

        fb = FunctionBuilder(Builder(), "pattern", [], None, None)
        args = []
        for t in types:
            x = self.operand(lambda u, t=t: u == t, lambda t=t: t, constant_ok=False)
            wrap = [o for o in (Op.NEG, Op.ABS, Op.TANH, Op.EXP)
                    if o in self.o.ops and (t.dtype.is_float or o in (Op.NEG, Op.ABS))
                    and t.dtype is not DType.bool]
            k = self.draw(st.integers(0, len(wrap)))
            args.append(Value(fb, x if k == 0 else self.node(wrap[k - 1], x)))
        out = pattern(*args)
        node = out.node if isinstance(out, Value) else out
        if not isinstance(node, Node):
            raise TypeError(f"pattern returned {out!r}, not a Value")
        self.pool.append(node)
        self.made.append(node)
        return node

    def function(self, name: str) -> Function:
        """Finish: results are the last op, every other op no later op uses (so no drawn op
        is dead code), and maybe a few inner values."""
        results = [self.made[-1]]
        reached = set(topological(results))
        for n in reversed(self.made):
            if n not in reached:
                results.append(n)
                reached.update(topological((n,)))
        inner = [n for n in self.made if n not in results]
        if inner:
            extra = self.draw(st.lists(st.sampled_from(inner), unique=True, max_size=2))
            results.extend(extra)
        names = tuple(_param_name(i) for i in range(len(self.params)))
        return Function(name, tuple(self.params), names, tuple(results))


def _param_name(i: int) -> str:
    return LETTERS[i] if i < len(LETTERS) else f"p{i}"


_MAKERS: dict[OpKind, Callable[[FunctionGenerator, Op], Node]] = {
    OpKind.SELECT: FunctionGenerator.select,
    OpKind.CAST: FunctionGenerator.cast,
    OpKind.REDUCE: FunctionGenerator.reduce,
    OpKind.EINSUM: FunctionGenerator.einsum,
    OpKind.MOVEMENT: FunctionGenerator.movement,
    OpKind.INDEXING: FunctionGenerator.indexing,
    OpKind.ROWWISE: FunctionGenerator.rowwise,
    OpKind.LOSS: FunctionGenerator.loss,
    OpKind.WINDOW: FunctionGenerator.window,
}


def _spanned(gen: FunctionGenerator, build: Callable[[], Node]) -> st.SearchStrategy[Node]:
    """``build()`` as one hypothesis draw, so that shrinking can delete a whole step."""

    @st.composite
    def one(draw: Draw) -> Node:
        outer, gen.draw = gen.draw, draw
        try:
            return build()
        finally:
            gen.draw = outer

    return one()


def generate_function(draw: Draw, options: Options, name: str,
                      pattern: Op | Pattern | None = None,
                      pattern_types: Sequence[TensorType] = ()) -> Function:
    """One random function of 1 to ``options.max_nodes`` drawn ops (guards not counted);
    with ``pattern``, one of the steps builds the pattern and the results depend on it.

    Steps are drawn like list elements (a "go on" choice, then the step as one draw), which
    lets hypothesis shrink a program by deleting steps anywhere in it.
    """
    gen = FunctionGenerator(draw, options)

    def random_step() -> Node:
        return gen.step(gen.draw(st.sampled_from(options.ops)))

    def go_on(weight: int) -> bool:  # shrinks toward stopping
        return len(gen.made) < options.max_nodes and draw(st.integers(0, weight)) != 0

    if pattern is not None:
        while go_on(2):
            draw(_spanned(gen, random_step))
        draw(_spanned(gen, lambda: gen.embed(pattern, pattern_types)))
    else:
        draw(_spanned(gen, random_step))
    while go_on(4):
        draw(_spanned(gen, random_step))
    return gen.function(name)
