"""Pieces shared by the work-group generators (:mod:`accy.kernels.reduction`,
:mod:`accy.kernels.rowwise`): an emitter with strided loops and vector variables, a loop-nest
builder whose flat-index fast path follows the shape being iterated, local-memory reductions,
and the shape checks that decide which fusion groups those generators take.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.types import DType
from accy.kernels import exprs
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Call,
    Cond,
    Expr,
    For,
    Id,
    If,
    Kernel,
    KernelArg,
    Let,
    Lit,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    add,
    idx,
    linear,
    mul,
    row_major,
)
from accy.kernels.loopnest import Emitter, LoopNestBuilder, _Scope, implemented_ops
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

# Values one work-item folds in each step of a local-memory reduction: three barriers reduce
# 1024 values, where a binary tree needs ten.
FAN_IN = 32
# The last values of a local reduction (at most this many) are folded by every work-item
# itself; more are folded by one, which shares the result through local memory (a barrier
# costs less than every work-item repeating 32 combines of an online softmax).
SHARED_FOLD = 8

Combine = Callable[[tuple[Expr, ...], tuple[Expr, ...], Callable[[Expr, DType], Expr]],
                   tuple[Expr, ...]]


def pow2ceil(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


def is_outer_broadcast(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether ``src`` broadcast to ``dst`` repeats whole blocks: element ``i`` of the result
    is element ``i % size(src)`` of ``src`` (a scalar, or broadcasting along leading dims)."""
    if math.prod(src) == 1:
        return True
    if len(src) > len(dst):
        return False
    padded = (1,) * (len(dst) - len(src)) + tuple(src)
    return any(all(d == 1 for d in padded[:k]) and padded[k:] == tuple(dst[k:])
               for k in range(len(dst) + 1))


def is_light(node: Node) -> bool:
    """Elementwise and movement ops (what fusion puts around one heavy op)."""
    return node.op.is_elementwise or node.op.kind is OpKind.MOVEMENT


def heavy_node(group: FusionGroup) -> Node | None:
    """The one op of the group that is neither elementwise nor movement, if exactly one."""
    heavy = [n for n in group.nodes if not is_light(n)]
    return heavy[0] if len(heavy) == 1 else None


def read_at_output_only(group: FusionGroup, node: Node) -> bool:
    """Whether every path from ``node`` to the group's outputs is elementwise, so ``node`` is
    only ever needed at the coordinates of the output element being computed."""
    inside = set(group.nodes)
    downstream = {node}
    for n in group.nodes:  # operands before users
        if n is not node and any(s in downstream for s in n.srcs):
            if not n.op.is_elementwise:
                return False
            downstream.add(n)
    return all(n.type.shape == node.type.shape for n in downstream if n in inside)


def ops_supported(group: FusionGroup) -> bool:
    """Whether every elementwise op of the group has a kernel expression."""
    for n in group.nodes:
        if n.op.is_elementwise:
            operand = n.srcs[1] if n.op is Op.SELECT else n.srcs[0]
            if not exprs.supported(n.op, operand.type.dtype):
                return False
    return True


def identity(op: Op, dtype: DType) -> Lit:
    """The neutral element of a sum or max reduction."""
    if op is Op.REDUCE_MAX:
        if dtype.is_float:
            return exprs.const(-np.inf, dtype)
        return Lit(int(np.iinfo(dtype.numpy).min), dtype)
    return exprs.const(0, dtype)


def combiner(op: Op, dtype: DType) -> Callable[[Expr, Expr], Expr]:
    """``a (+|max) b`` for a sum or max reduction (max propagates NaN like numpy)."""
    binary = Op.MAX if op is Op.REDUCE_MAX else Op.ADD
    return lambda a, b: exprs.elementwise(binary, [a, b], dtype, dtype)


class GroupEmitter(Emitter):
    """An :class:`Emitter` that also binds vectors and opens strided loops."""

    def bind(self, e: Expr, dtype: DType, key: tuple | None = None, prefix: str = "v",
             lanes: int = 1) -> Expr:
        """``e`` as a variable in the outermost scope its inputs allow (a vector if lanes > 1)."""
        if isinstance(e, Lit | Var):
            return e
        home = self._home(e)
        var = self.fresh(prefix)
        home.body.append(Let(var, dtype, e, lanes=lanes))
        home.defined = home.defined | {var}
        if key is not None:
            home.memo[key] = Var(var)
        return Var(var)

    @contextmanager
    def strided(self, start: Expr, stop: Expr, step: int) -> Iterator[Var]:
        """``for (long k = start; k < stop; k += step)``; yields ``k``."""
        var = self.fresh("k")
        outer = self.scopes[-1]
        self.scopes.append(_Scope(frozenset({var})))
        yield Var(var)
        inner = self.scopes.pop()
        outer.body.append(For(var, start, stop, tuple(inner.body), step))

    def top(self, s: Stmt) -> None:
        """Append to the kernel's outermost scope (where ``__local`` arrays must be)."""
        self.scopes[0].body.append(s)

    def body(self) -> tuple[Stmt, ...]:
        return tuple(self.scopes[0].body)


class GroupBuilder(LoopNestBuilder):
    """A loop-nest builder for generators that evaluate values at coordinates they choose.

    Inputs shaped like ``flat_shape`` read at ``coords`` load at ``flat_id`` (no index
    arithmetic); :meth:`at` moves that fast path to the shape being iterated.
    """

    def __init__(self, group: FusionGroup, outline: KernelOutline) -> None:
        super().__init__(group, outline)
        self.em: GroupEmitter = GroupEmitter()
        self.flat_shape: tuple[int, ...] | None = group.domain

    def at(self, flat: Expr, coords: tuple[Expr, ...], shape: tuple[int, ...] | None) -> None:
        """Load values of ``shape`` read at ``coords`` at ``flat`` (None: no fast path)."""
        self.flat_id, self.coords, self.flat_shape = flat, coords, shape

    def _outside(self, node: Node, coords: tuple[Expr, ...], key: tuple) -> Expr:
        if node.type.size == 1 and node.op is Op.CONSTANT:
            return exprs.const(node.value.reshape(-1)[0].item(), node.type.dtype)
        at = (self.flat_id if coords == self.coords and node.type.shape == self.flat_shape
              else linear(coords, row_major(node.type.shape)))
        return self.em.bind(Load(self.arg_of[node], at), node.type.dtype, key)

    def seed(self, node: Node, coords: tuple[Expr, ...], value: Expr) -> None:
        """Make ``value(node, coords)`` return ``value`` (a result computed another way)."""
        self.em.scopes[0].memo[(node, coords)] = value


def coords_of(flat: Expr, shape: tuple[int, ...], em: GroupEmitter) -> tuple[Expr, ...]:
    """Row-major coordinates of ``flat`` in ``shape``; size-1 dims are the literal 0, which is
    what elementwise broadcasting reads them at."""
    out: list[Expr] = []
    strides = row_major(shape)
    outer = next((i for i, d in enumerate(shape) if d != 1), len(shape))
    for i, (s, d) in enumerate(zip(strides, shape, strict=True)):
        if d == 1:
            out.append(idx(0))
            continue
        c = Bin("/", flat, idx(s)) if s != 1 else flat
        if i != outer:
            c = Bin("%", c, idx(d))
        out.append(em.bind(c, INDEX, prefix="c"))
    return tuple(out)


def local_reduce(em: GroupEmitter, names: tuple[str, ...], dtypes: tuple[DType, ...],
                 values: tuple[Expr, ...], combine: Combine, *, lid: Expr, base: Expr,
                 ly: Expr, stride: int, count: int, size: int) -> tuple[Expr, ...]:
    """Combine ``values`` over ``count`` work-items of a work-group (``count`` a power of two).

    Work-item ``ly`` of the set has local id ``base + ly * stride``; the group has ``size``
    work-items. Each step folds up to ``FAN_IN`` values per work-item in a fixed order, so
    results are deterministic; every work-item gets the result. Tuples combine together (e.g. an
    online softmax's max and sum).
    """
    for name, dtype in zip(names, dtypes, strict=True):
        em.top(LocalArray(name, dtype, size))
    for name, v in zip(names, values, strict=True):
        em.emit(Store(name, lid, v))
    em.emit(Barrier())
    n = count
    while n > SHARED_FOLD:
        fan = min(n, FAN_IN)
        active = n // fan
        body, acc = _fold(em, names, dtypes, combine, lid, fan, active * stride)
        body.extend(Store(nm, lid, Var(a)) for nm, a in zip(names, acc, strict=True))
        em.emit(If(Bin("<", ly, idx(active)), tuple(body)))
        em.emit(Barrier())
        n = active
    body, acc = _fold(em, names, dtypes, combine, base, n, stride)
    for st in body:
        em.emit(st)
    for a in acc:
        em.scopes[-1].defined = em.scopes[-1].defined | {a}
    return tuple(Var(a) for a in acc)


def _fold(em: GroupEmitter, names: tuple[str, ...], dtypes: tuple[DType, ...],
          combine: Combine, first: Expr, n: int, step: int) -> tuple[list[Stmt], list[str]]:
    """Statements folding local elements ``first + j * step`` (j < n) into new variables."""
    acc = [em.fresh("acc") for _ in names]
    body: list[Stmt] = [Let(a, dt, Load(nm, first), mutable=True)
                        for a, nm, dt in zip(acc, names, dtypes, strict=True)]
    if n == 1:
        return body, acc
    j = em.fresh("j")
    inner: list[Stmt] = []

    def bind(e: Expr, dtype: DType) -> Expr:
        var = em.fresh("t")
        inner.append(Let(var, dtype, e))
        return Var(var)

    at = add(first, mul(Var(j), idx(step)))
    other = tuple(bind(Load(nm, at), dt) for nm, dt in zip(names, dtypes, strict=True))
    new = combine(tuple(Var(a) for a in acc), other, bind)
    inner.extend(Assign(a, e) for a, e in zip(acc, new, strict=True))
    body.append(For(j, idx(1), idx(n), tuple(inner)))
    return body, acc


def simple_combine(op: Op, dtype: DType) -> Combine:
    """A :data:`Combine` of one value under a sum or max."""
    f = combiner(op, dtype)
    return lambda a, b, bind: (bind(f(a[0], b[0]), dtype),)


# reductions laid on work-groups ------------------------------------------------------------
LOCAL_SIZE = 256  # work-items per work-group of a reduction (capped by the target)
GROUPS_PER_CU = 16  # work-groups per compute unit that a reduction of few outputs fills
MIN_PER_THREAD = 64  # units per work-item at least before a reduction is split further
OUTPUTS_PER_GROUP = 32  # outputs side by side in a work-group when they are contiguous


@dataclass(frozen=True)
class Split:
    """A reduction of ``outputs`` x ``units`` on work-groups of ``width`` x ``count`` items.

    Work-item ``(lx, ly)`` of group ``g`` reduces output ``(g // chunks) * width + lx`` over
    units ``c * chunk + ly``, stepping by ``count``, for ``c = g % chunks``. ``units_fastest``:
    neighbouring work-items take neighbouring units (local id ``lx * count + ly``), else
    neighbouring outputs (``ly * width + lx``): whichever are neighbours in memory. With more
    than one chunk a second kernel combines the ``chunks`` partials of each output.
    """

    outputs: int
    units: int
    width: int
    count: int
    chunks: int
    chunk: int
    units_fastest: bool

    @property
    def local(self) -> int:
        return self.width * self.count

    @property
    def groups(self) -> int:
        return -(-self.outputs // self.width) * self.chunks

    @property
    def geometry(self) -> LaunchGeometry:
        return LaunchGeometry((self.groups * self.local,), (self.local,))


def local_size(target: TargetProfile, wanted: int) -> int:
    """``wanted`` capped by the target, as a power of two."""
    cap = max(1, min(wanted, target.max_work_group_size))
    return 1 << (cap.bit_length() - 1)


def split(outputs: int, units: int, units_fastest: bool, target: TargetProfile,
          chunked: bool = True) -> Split:
    """Lay a reduction on work-groups (see :class:`Split`); ``chunked`` allows splitting
    each output's units over several work-groups to fill the device."""
    local = local_size(target, LOCAL_SIZE)
    count = min(local, pow2ceil(units))
    if units_fastest:
        width = min(local // count, pow2ceil(outputs))
    else:
        width = min(local, pow2ceil(outputs), OUTPUTS_PER_GROUP)
        count = min(local // width, count)
    row_groups = -(-outputs // width)
    chunks = 1
    if chunked:
        wanted = -(-GROUPS_PER_CU * target.compute_units // row_groups)
        chunks = max(1, min(wanted, units // (count * MIN_PER_THREAD)))
    chunk = -(-units // chunks)
    chunk = -(-chunk // count) * count
    return Split(outputs, units, width, count, -(-units // chunk), chunk, units_fastest)


@dataclass(frozen=True)
class Ids:
    """The indices of a work-item in a :class:`Split` launch."""

    lid: Expr  # local id
    lx: Expr  # which of the group's outputs
    ly: Expr  # which of the output's work-items
    output: Expr  # the output this work-item reduces (may run past the last)
    clamped: Expr  # ... clamped to a real output, safe for loads
    chunk: Expr
    valid: Expr | None  # output < outputs, None when always true
    units_fastest: bool  # as in the Split
    count: int  # work-items per output

    @property
    def base(self) -> Expr:
        """Local id of the output's first work-item (see :func:`local_reduce`)."""
        return mul(self.lx, idx(self.count)) if self.units_fastest else self.lx

    def writer(self) -> Expr | None:
        """The condition of the one work-item per output that stores its result."""
        first = None if isinstance(self.ly, Lit) else Bin("==", self.ly, idx(0))
        return both(first, self.valid)


def both(a: Expr | None, b: Expr | None) -> Expr | None:
    """``a && b`` where None means true."""
    if a is None or b is None:
        return b if a is None else a
    return Bin("&&", a, b)


def work_ids(em: GroupEmitter, s: Split, group: Expr | None = None) -> Ids:
    """Bind the indices of a work-item of launch ``s``, in work-group ``group`` (default: the
    work-item's own; a loop variable where work-groups walk the launch's groups)."""
    if group is None:
        group = em.bind(Id("group", 0), INDEX, prefix="grp")
    lid: Expr = idx(0)
    lx: Expr = idx(0)
    ly: Expr = idx(0)
    if s.local > 1:
        lid = em.bind(Id("local", 0), INDEX, prefix="lid")
    if s.width == 1:
        ly = lid
    elif s.count == 1:
        lx = lid
    else:
        fast, slow = ("ly", "lx") if s.units_fastest else ("lx", "ly")
        inner = s.count if s.units_fastest else s.width
        first = em.bind(Bin("%", lid, idx(inner)), INDEX, prefix=fast)
        second = em.bind(Bin("/", lid, idx(inner)), INDEX, prefix=slow)
        lx, ly = (second, first) if s.units_fastest else (first, second)
    outer = group if s.chunks == 1 else em.bind(Bin("/", group, idx(s.chunks)), INDEX,
                                                prefix="og")
    chunk = idx(0) if s.chunks == 1 else em.bind(Bin("%", group, idx(s.chunks)), INDEX,
                                                 prefix="ch")
    output = outer if s.width == 1 else em.bind(add(mul(outer, idx(s.width)), lx), INDEX,
                                                prefix="o")
    valid: Expr | None = None
    clamped = output
    if s.outputs % s.width:
        valid = em.bind(Bin("<", output, idx(s.outputs)), DType.bool, prefix="ok")
        clamped = em.bind(Call("min", (output, idx(s.outputs - 1))), INDEX, prefix="oc")
    return Ids(lid, lx, ly, output, clamped, chunk, valid, s.units_fastest, s.count)


def reduce_phase(builder: GroupBuilder, s: Split, op: Op, dtype: DType,
                 source: Callable[[Expr, Var], Expr]) -> tuple[Expr, Ids]:
    """Emit the reduction of ``source(clamped output, unit)`` into ``builder``; returns the
    total (every work-item holds it) and the indices."""
    em = builder.em
    ids = work_ids(em, s)
    start = mul(ids.chunk, idx(s.chunk))
    stop: Expr = idx(s.units) if s.chunks == 1 else add(start, idx(s.chunk))
    if s.chunks > 1 and s.chunks * s.chunk > s.units:
        stop = Call("min", (stop, idx(s.units)))
    if ids.valid is not None:
        stop = Cond(ids.valid, stop, start)
    acc = em.accumulator(dtype, identity(op, dtype))
    f = combiner(op, dtype)
    with em.strided(add(start, ids.ly), em.bind(stop, INDEX, prefix="stop"), s.count) as u:
        em.emit(Assign(acc, f(Var(acc), source(ids.clamped, u))))
    if s.count == 1:
        return Var(acc), ids
    (total,) = local_reduce(em, (em.fresh("part"),), (dtype,), (Var(acc),),
                            simple_combine(op, dtype), lid=ids.lid, base=ids.base, ly=ids.ly,
                            stride=1 if s.units_fastest else s.width, count=s.count,
                            size=s.local)
    return total, ids


def tree(values: list[Expr], f: Callable[[Expr, Expr], Expr],
         bind: Callable[[Expr], Expr] = lambda e: e) -> Expr:
    """``f`` over ``values`` pairwise, ((v0 f v1) f (v2 f v3)) ..., each step bound by
    ``bind`` (so an operand that ``f`` repeats, like a NaN-propagating max, is not copied;
    by default steps are nested expressions)."""
    while len(values) > 1:
        values = [bind(f(values[i], values[i + 1])) if i + 1 < len(values) else values[i]
                  for i in range(0, len(values), 2)]
    return values[0]


def store_outputs(builder: GroupBuilder, group: FusionGroup, output_slots: tuple[int, ...],
                  node: Node, result: Expr, ids: Ids) -> list[KernelArg]:
    """Compute the group's outputs at output ``ids.clamped`` with ``node`` = ``result`` (the
    epilogue), stored by the writing work-item; returns the output arguments."""
    domain = group.domain
    coords = coords_of(ids.clamped, domain, builder.em)
    builder.at(ids.clamped, coords, domain)
    builder.seed(node, coords, builder.em.bind(result, node.type.dtype, prefix="r"))
    outs, stores = [], []
    for i, (n, slot) in enumerate(zip(group.outputs, output_slots, strict=True)):
        outs.append(KernelArg(f"out{i}", n.type.dtype, True, slot))
        stores.append(Store(f"out{i}", ids.clamped, builder.value(n, coords)))
    guard(builder.em, ids.writer(), stores)
    return outs


def guard(em: GroupEmitter, cond: Expr | None, stmts: list[Stmt]) -> None:
    """Emit ``stmts``, under ``if (cond)`` unless ``cond`` is None."""
    if cond is None:
        for st in stmts:
            em.emit(st)
    else:
        em.emit(If(cond, tuple(stmts)))


def combine_kernel(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                   target: TargetProfile, scratch: KernelArg, partials: Split, op: Op,
                   node: Node, divisor: int) -> Kernel:
    """The second pass of a split reduction: each output's ``partials.chunks`` partials (in
    ``scratch``) combined in a fixed order, divided by ``divisor``, then the epilogue."""
    builder = GroupBuilder(group, outline)
    reader = KernelArg(scratch.name, scratch.dtype, False, -1, scratch.scratch_elems)
    s = split(partials.outputs, partials.chunks, True, target, chunked=False)
    chunks, dtype = partials.chunks, scratch.dtype

    def source(o: Expr, u: Var) -> Expr:
        return builder.em.bind(Load(reader.name, add(mul(o, idx(chunks)), u)), dtype)

    total, ids = reduce_phase(builder, s, op, dtype, source)
    result = total if divisor == 1 else Bin("/", total, exprs.const(divisor, dtype))
    outs = store_outputs(builder, group, outline.output_slots, node, result, ids)
    return Kernel(f"{outline.entry}_combine", outline.work_item, kind, group.domain,
                  tuple([*builder.args, reader, *outs]), builder.em.body(), s.geometry,
                  implemented_ops(group))


def store_partials(builder: GroupBuilder, scratch: KernelArg, chunks: int, total: Expr,
                   ids: Ids) -> None:
    """Write each work-group's partial result to ``scratch[output * chunks + chunk]``."""
    at = add(mul(ids.output, idx(chunks)), ids.chunk)
    guard(builder.em, ids.writer(), [Store(scratch.name, at, total)])
