"""row-fused: a row group (:mod:`accy.kernels.rowgroup`: reductions and (log-)softmax along
the same rows with the elementwise ops between and after them, e.g. a layer norm, an RMS norm,
a log-softmax and the NLL of its rows) as one kernel.

On a GPU rows are laid on work-items as in the row-softmax generator
(:mod:`accy.kernels.rowwise`): up to ``ROW_THREADS`` work-items per row, more when that holds
the row in registers, several short rows per work-group. Each level of row statistics (those
reading no other, then those reading only those, ...) is accumulated per work-item in the
reductions' dtype (f32) and combined over the row's work-items through local memory
(:func:`~accy.kernels.workgroup.local_reduce`, a fixed order, so equal inputs give bit-equal
results); a mean divides by the row length, as the tree reduction does; a (log-)softmax takes
its row maximum (NaNs ignored) and shift as the row-softmax generator does. Every later value
reads the row's results (the builder answers a reduction with its row value). Rows of at most
``HELD_VALUES`` per work-item are read from memory once: the values of each element are bound
at the kernel's top level, so every level and the outputs reuse them from registers. Longer
rows read the row again for each level and for the outputs (a layer norm: three passes). The
outputs (full rows and per-row values) are written last. On a CPU one work-item takes a row,
with no barriers: vector passes where the ops allow (:mod:`accy.kernels.rowfused_cpu`),
scalar loops otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.ir.walk import Pending
from accy.kernels import exprs, rowfused_cpu, rowgroup
from accy.kernels.ir import (
    INDEX,
    Assign,
    Bin,
    Call,
    Cond,
    Expr,
    Kernel,
    KernelArg,
    Store,
    Var,
    add,
    idx,
    mul,
)
from accy.kernels.loopnest import implemented_ops
from accy.kernels.rowwise import HELD_VALUES, ROW_THREADS, _gpu_held_threads
from accy.kernels.workgroup import (
    LOCAL_SIZE,
    GroupBuilder,
    Split,
    both,
    combiner,
    coords_of,
    guard,
    identity,
    local_reduce,
    local_size,
    ops_supported,
    pow2ceil,
    tree,
    work_ids,
)
from accy.plans import FusionGroup, KernelOutline, ScheduleKind
from accy.target import TargetProfile

CPU_ROW_ITEMS = 1  # work-items per row on a CPU: no barriers (see the module)


@dataclass(frozen=True)
class RowPlan:
    """A row group and how its rows are laid on work-items."""

    rows: rowgroup.RowGroup
    count: int  # rows
    split: Split  # rows as outputs, row elements as units
    held: int  # elements per work-item held in registers, 0: one pass per level and outputs
    cpu: int  # lanes of the CPU vector form (:mod:`accy.kernels.rowfused_cpu`), 0: not


def analyse(group: FusionGroup, target: TargetProfile) -> RowPlan | None:
    """The :class:`RowPlan` of a group this generator takes, else None: a row group with
    more than one reduction, or with an output along the rows (a single reduction writing
    only its result is the tree reduction's)."""
    if group.kind is not ScheduleKind.reduction or not ops_supported(group):
        return None
    rows = rowgroup.analyse(group.nodes, group.outputs)
    if rows is None:
        return None
    if len(rows.stats) == 1 and all(o.type.shape != rows.full for o in group.outputs):
        return None
    n, count = rows.n, math.prod(rows.prefix)
    if n == 0 or count == 0:
        return None
    lanes = rowfused_cpu.cpu_lanes(group, rows, target)
    if lanes:
        units = n // lanes
        return RowPlan(rows, count, Split(count, units, 1, 1, 1, units, True), 0, lanes)
    if target.device_type == "cpu":
        threads = CPU_ROW_ITEMS
    else:
        threads = _gpu_held_threads(n, target) or min(local_size(target, ROW_THREADS),
                                                      pow2ceil(n))
    width = max(1, min(local_size(target, LOCAL_SIZE) // threads, pow2ceil(count)))
    split = Split(count, n, width, threads, 1, n, True)
    per_item = -(-n // threads)
    return RowPlan(rows, count, split, per_item if per_item <= HELD_VALUES else 0, 0)


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return analyse(group, target) is not None


class _Builder(GroupBuilder):
    """A group builder answering each reduction with its row's value once computed, and a
    (log-)softmax from its row's shift and sum (the row-softmax generator's numerics)."""

    def __init__(self, group: FusionGroup, outline: KernelOutline) -> None:
        super().__init__(group, outline)
        self.row_values: dict[Node, Expr] = {}
        self.shifts: dict[Node, Expr] = {}
        self.sums: dict[Node, Expr] = {}

    def _open(self, node, coords):
        hit = self.row_values.get(node)
        if hit is not None:
            return hit
        if node in self.sums:
            key = (node, coords)
            memo = self.em.lookup(key)
            if memo is not None:
                return memo
            shift, total, dt = self.shifts[node], self.sums[node], node.type.dtype
            if node.op is Op.LOG_SOFTMAX:
                ls = self.em.bind(Call("log", (total,)), dt, ("log-sum", node), "ls")
                f = lambda x: Bin("-", Bin("-", x, shift), ls)  # noqa: E731
            else:
                inv = self.em.bind(Bin("/", exprs.const(1.0, dt), total), dt, ("inv", node), "inv")
                f = lambda x: Bin("*", Call("exp", (Bin("-", x, shift),)), inv)  # noqa: E731
            return Pending([(node.srcs[0], coords)], self._open,
                           lambda args: self.em.bind(f(args[0]), dt, key))
        return super()._open(node, coords)


def _fmax(a: Expr, b: Expr) -> Expr:
    """A (log-)softmax's row maximum ignores NaNs, as in the row-softmax generator."""
    return Call("fmax", (a, b))


def _source(b: _Builder, st: rowgroup.RowStat, coords: tuple[Expr, ...]) -> Expr:
    """The value a row statistic accumulates at element ``coords``."""
    x = b.value(st.node.srcs[0], coords)
    if st.stat != "expsum":
        return x
    return b.em.bind(Call("exp", (Bin("-", x, b.shifts[st.node]),)), st.node.type.dtype,
                     prefix="e")


def _finish(b: _Builder, st: rowgroup.RowStat, total: Expr, n: int) -> None:
    """Record a row statistic's combined value for what reads it."""
    dt, node = st.node.type.dtype, st.node
    if st.stat == "max":
        b.shifts[node] = b.em.bind(Cond(Call("isfinite", (total,)), total, exprs.const(0.0, dt)),
                                   dt, prefix="shift")
    elif st.stat == "expsum":
        b.sums[node] = b.em.bind(total, dt, prefix="s")
    else:
        if node.op is Op.REDUCE_MEAN:
            total = Bin("/", total, exprs.const(n, dt))
        b.row_values[node] = b.em.bind(total, dt, prefix="row")


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    plan = analyse(group, target)
    assert plan is not None, "row-fused built for a group it does not accept"
    rows, s = plan.rows, plan.split
    b = _Builder(group, outline)
    em = b.em
    ids = work_ids(em, s)
    row = ids.clamped
    row_coords = coords_of(row, rows.prefix, em)
    full = rows.full

    def element(col: Expr) -> tuple[tuple[Expr, ...], Expr]:
        """Coordinates of element ``col`` of the row, with the builder's fast path there."""
        if rows.n == 1:
            col = idx(0)
        flat = em.bind(add(mul(row, idx(rows.n)), col), INDEX, prefix="f")
        coords = (*row_coords, col)
        b.at(flat, coords, full)
        return coords, flat

    store_vectors = None
    if plan.cpu:
        store_vectors = rowfused_cpu.build_rows(b, group, rows, plan.cpu, row, rowfused_cpu.Hooks(
            lambda col: element(col)[0], _source, _finish, _fmax, combiner))
    slots: list[tuple[Expr, Expr | None]] = []  # held form: (element, in range)
    for k in range(plan.held):
        u: Expr = add(ids.ly, idx(k * s.count))
        ok: Expr | None = None
        if (k + 1) * s.count > rows.n:
            ok = em.bind(Bin("<", u, idx(rows.n)), DType.bool, prefix="inside")
            u = em.bind(Call("min", (u, idx(rows.n - 1))), INDEX, prefix="u")
        elif not isinstance(u, Var):
            u = em.bind(u, INDEX, prefix="u")
        slots.append((u, ok))

    for level in () if plan.cpu else rows.levels:
        ops = [Op.REDUCE_MAX if st.node.op is Op.REDUCE_MAX or st.stat == "max"
               else Op.REDUCE_SUM for st in level]
        dtypes = [st.node.type.dtype for st in level]
        fs = [_fmax if st.stat == "max" else combiner(op, dt)
              for st, op, dt in zip(level, ops, dtypes, strict=True)]
        if plan.held:
            parts = []
            for r, op, dt, f in zip(level, ops, dtypes, fs, strict=True):
                terms = []
                for u, ok in slots:
                    coords, _ = element(u)
                    v = _source(b, r, coords)
                    terms.append(v if ok is None else em.bind(Cond(ok, v, identity(op, dt)), dt))
                parts.append(tree(terms, f, lambda e, dt=dt: em.bind(e, dt, prefix="p")))
        else:
            accs = [em.accumulator(dt, identity(op, dt)) for op, dt in zip(ops, dtypes,
                                                                          strict=True)]
            stop: Expr = idx(rows.n)
            if ids.valid is not None:
                stop = em.bind(Cond(ids.valid, stop, idx(0)), INDEX, prefix="stop")
            with em.strided(ids.ly, stop, s.count) as u:
                coords, _ = element(u)
                for r, acc, f in zip(level, accs, fs, strict=True):
                    em.emit(Assign(acc, f(Var(acc), _source(b, r, coords))))
            parts = [Var(a) for a in accs]
        if s.count > 1:
            def combine(a, c, bind, fs=fs, dtypes=dtypes):
                return tuple(bind(f(x, y), dt) for f, x, y, dt in zip(fs, a, c, dtypes,
                                                                     strict=True))

            names = tuple(em.fresh("rowred") for _ in level)
            parts = list(local_reduce(em, names, tuple(dtypes), tuple(parts), combine,
                                      lid=ids.lid, base=ids.base, ly=ids.ly, stride=1,
                                      count=s.count, size=s.local))
        for st, total in zip(level, parts, strict=True):
            _finish(b, st, total, rows.n)

    outs = [KernelArg(f"out{i}", o.type.dtype, True, slot) for i, (o, slot)
            in enumerate(zip(group.outputs, outline.output_slots, strict=True))]
    # per-row outputs, written by the row's first work-item
    stores = []
    for a, o in zip(outs, group.outputs, strict=True):
        if o.type.shape != full:
            coords = tuple(row_coords) + ((idx(0),) if len(o.type.shape) > len(rows.prefix)
                                          else ())
            b.at(row, coords, o.type.shape)
            stores.append(Store(a.name, row, b.value(o, coords)))
    if stores:
        guard(em, ids.writer(), stores)

    def store_row(u: Expr, ok: Expr | None) -> None:
        coords, flat = element(u)
        guard(em, both(ok, ids.valid), [
            Store(a.name, flat, b.value(o, coords))
            for a, o in zip(outs, group.outputs, strict=True) if o.type.shape == full])

    if store_vectors is not None:
        store_vectors([(a, o) for a, o in zip(outs, group.outputs, strict=True)
                       if o.type.shape == full])
    elif any(o.type.shape == full for o in group.outputs):
        if plan.held:
            for u, ok in slots:
                store_row(u, ok)
        else:
            stop = idx(rows.n)
            if ids.valid is not None:
                stop = em.bind(Cond(ids.valid, stop, idx(0)), INDEX, prefix="stop")
            with em.strided(ids.ly, stop, s.count) as u:
                store_row(u, None)
    return (Kernel(outline.entry, outline.work_item, kind, group.domain,
                   tuple([*b.args, *outs]), em.body(), s.geometry, implemented_ops(group)),)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "row-fused",
        "row groups (reductions along the same rows with the elementwise ops between and "
        "after them: layer norm, RMS norm, softmax): one work-group per row (or several "
        "short rows), each level of reductions combined in local memory, rows held in "
        "registers or read again per level",
        accepts, build))


_register()
