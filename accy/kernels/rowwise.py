"""row-softmax: softmax, log-softmax (along the last axis) and cross-entropy, one row per set
of work-items, with the group's elementwise prologue and epilogue fused.

Each row is shared by up to ``ROW_THREADS`` work-items (``CPU_ROW_THREADS`` on a CPU, for rows
the CPU form below does not take; several short rows share a work-group). Rows short enough for
every work-item to hold its share in registers (``HELD_VALUES``) are read once: the row
maximum, then the sum of ``exp(x - max)`` are combined through local memory, and the outputs
computed from the held values. On a GPU a row that does not fit takes more work-items, up to
the target's work-group limit, and held rows are read with scalar loads: neighbouring
work-items read neighbouring elements, so every load is coalesced (``vload4`` from a ``float*``
is not known to be 16-byte aligned, and NVIDIA's driver splits it into strided scalar loads: a
held 16384-element row ran at 42% of copy bandwidth on an H200 with ``vload4``, 97% with scalar
loads). Local memory holds fewer values than the registers of a work-group (48 KiB against 1024
work-items x ``HELD_VALUES``), so it is not used as a row cache. Longer rows take the online
form: one pass keeps a running maximum and a sum rescaled to it, the (max, sum) pairs are
combined, and a second pass reads the row again (backwards, so it starts with what is most
likely cached) for the outputs. Both follow the interpreter's numerics: shift by the row
maximum when it is finite (by 0 otherwise), so rows of infinities and NaNs come out as numpy's
do. On a CPU, rows whose prologue computes on whole vectors
(:func:`~accy.kernels.reduction.cpu_lanes`) take one work-item each, streaming the row three
times with ``native_vector_bytes`` loads into independent vector accumulators: the maximum, the
sum of ``exp(x - shift)``, the outputs (the row stays in cache between passes: several times
faster on PoCL than work-groups of 1024 work-items a row, and than numpy; papers/kernels.md,
"Thirty-fifth session"). A plain f32 softmax (no epilogue) stores each
``exp(x - shift)`` in its output in the second pass and the third scales it there
(:func:`kept_exp`): one ``exp`` an element instead of two, the pass's main cost.
Cross-entropy writes each row's loss to scratch memory and a second kernel takes their
mean in a fixed order; its row kernel takes ``outline.thread_blocks``
(``loss-lowering{row-sparse-cross-entropy-thread-blocks=N}``): N work-groups walking the sets
of rows in a grid-stride loop instead of one work-group per set.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.kernels import exprs, reduction  # the CPU form's pieces, read when called
from accy.kernels.flat import LaneEvaluator, flat_leaves, vector_width, vectorizable
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Call,
    Cond,
    Expr,
    Id,
    If,
    Kernel,
    KernelArg,
    Lane,
    Store,
    Var,
    VectorLoad,
    VectorStore,
    add,
    idx,
    mul,
)
from accy.kernels.loopnest import implemented_ops
from accy.kernels.workgroup import (
    LOCAL_SIZE,
    GroupBuilder,
    Ids,
    Split,
    both,
    combine_kernel,
    combiner,
    coords_of,
    guard,
    heavy_node,
    local_reduce,
    local_size,
    ops_supported,
    pow2ceil,
    read_at_output_only,
    store_partials,
    tree,
    work_ids,
)
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

ROW_THREADS = 256  # work-items per row at most on a GPU (capped by the target)
# On a CPU PoCL runs a work-group's items as SIMD lanes of loops: wider groups are faster (a
# 1024 x 16384 softmax on 2 cores: 48 ms at 1024 work-items per row, 58 at 4096, 127 at 256)
CPU_ROW_THREADS = 1024
HELD_VALUES = 32  # row elements per work-item kept in registers; longer rows go online
REVERSE_SECOND_PASS = True  # the online form's second pass reads each work-item's units last first
ROWWISE = (Op.SOFTMAX, Op.LOG_SOFTMAX, Op.CROSS_ENTROPY)


@dataclass(frozen=True)
class Rows:
    """A rowwise group's op and how its rows are laid on work-items."""

    node: Node  # softmax, log_softmax or cross_entropy
    rows: int
    n: int  # row length
    lanes: int  # elements per read (vector loads), 1 for scalar reads
    split: Split  # rows as outputs, row vectors (or elements) as units
    held: int  # units per work-item held in registers, 0 for the online form
    cpu: bool  # the CPU form: one work-item per row, vector passes (see the module)

    @property
    def x(self) -> Node:
        return self.node.srcs[0]

    @property
    def units(self) -> int:
        return self.n // self.lanes


def analyse(group: FusionGroup, target: TargetProfile) -> Rows | None:
    """The :class:`Rows` of a rowwise group this generator takes, else None."""
    node = heavy_node(group)
    if group.kind is not ScheduleKind.rowwise or node is None or node.op not in ROWWISE:
        return None
    x = node.srcs[0]
    if not x.type.dtype.is_float or x.type.rank == 0:
        return None
    if node.op is not Op.CROSS_ENTROPY and node.attr("axis") % x.type.rank != x.type.rank - 1:
        return None
    if not ops_supported(group) or not read_at_output_only(group, node):
        return None
    n = x.type.shape[-1]
    rows = math.prod(x.type.shape[:-1])
    if n == 0 or rows == 0:
        return None
    inside = set(group.nodes)
    leaves = flat_leaves(x, inside) or []
    lanes = vector_width([lf.type.dtype for lf in leaves if not is_inlined(lf)]
                         + [x.type.dtype], target)
    if n % lanes or not vectorizable([x], inside, lanes):
        lanes = 1
    cpu = reduction.cpu_lanes(x, inside, n, target)
    if cpu:
        return Rows(node, rows, n, cpu, Split(rows, n // cpu, 1, 1, 1, n // cpu, True), 0, True)
    if target.device_type == "cpu":
        threads = min(local_size(target, CPU_ROW_THREADS), pow2ceil(n // lanes))
    else:
        threads = _gpu_held_threads(n, target)
        if threads:
            lanes = 1
        else:
            threads = min(local_size(target, ROW_THREADS), pow2ceil(n // lanes))
    units = n // lanes
    width = max(1, min(local_size(target, LOCAL_SIZE) // threads, pow2ceil(rows)))
    s = Split(rows, units, width, threads, 1, units, True)
    per_item = -(-units // threads)
    held = per_item if per_item * lanes <= HELD_VALUES else 0
    return Rows(node, rows, n, lanes, s, held, False)


def _gpu_held_threads(n: int, target: TargetProfile) -> int:
    """The fewest work-items per row, from ``ROW_THREADS`` up to the target's work-group
    limit, that hold a row of ``n`` elements in registers; 0 when the row is too long."""
    threads = min(local_size(target, ROW_THREADS), pow2ceil(n))
    most = local_size(target, target.max_work_group_size)
    while threads * HELD_VALUES < n:
        if threads >= most:
            return 0
        threads *= 2
    return threads


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return analyse(group, target) is not None


class _RowBuilder:
    """Statements of one row kernel: reads, row statistics, outputs."""

    def __init__(self, group: FusionGroup, outline: KernelOutline, shape: Rows,
                 blocks: int = 0) -> None:
        self.group, self.shape, self.blocks = group, shape, blocks
        self.b = GroupBuilder(group, outline)
        self.em = self.b.em
        self.dtype = shape.x.type.dtype
        self.loop = ExitStack()  # blocks > 0: the grid-stride loop over the launch's groups
        index = None
        if blocks:
            first = self.em.bind(Id("group", 0), INDEX, prefix="grp")
            index = self.loop.enter_context(
                self.em.strided(first, idx(shape.split.groups), blocks))
        self.ids: Ids = work_ids(self.em, shape.split, index)
        self.row = self.ids.clamped
        self.row_coords = coords_of(self.row, shape.x.type.shape[:-1], self.em)
        self.addf = combiner(Op.REDUCE_SUM, self.dtype)

    @staticmethod
    def maxf(a: Expr, b: Expr) -> Expr:
        """The row maximum ignores NaNs (``fmax``): they reach the sum, and through it every
        output of their row, as in numpy."""
        return Call("fmax", (a, b))

    def bind(self, e: Expr, prefix: str = "r") -> Expr:
        return self.em.bind(e, self.dtype, prefix=prefix)

    def geometry(self) -> LaunchGeometry:
        """Close the grid-stride loop, if any (a barrier ends each trip, so no work-item
        writes the next rows' partials into local memory still being read); the launch."""
        split = self.shape.split
        if not self.blocks:
            return split.geometry
        if split.local > 1:
            self.em.emit(Barrier())
        self.loop.close()
        return LaunchGeometry((self.blocks * split.local,), (split.local,))

    def const(self, value: float) -> Expr:
        return exprs.const(value, self.dtype)

    # reading the row ------------------------------------------------------------------
    def read(self, u: Expr) -> list[Expr]:
        """The prologue's values at unit ``u`` of the row (``lanes`` of them)."""
        s, x = self.shape, self.shape.x
        if s.lanes > 1:
            at = self.em.bind(add(mul(self.row, idx(s.units)), u), INDEX, prefix="vi")
            ev = LaneEvaluator(self.em, set(self.group.nodes), self.b.arg_of, x.type.size,
                               s.lanes, at)
            return [ev.value(x, lane) for lane in range(s.lanes)]
        coords, flat = self.element(u)
        self.b.at(flat, coords, x.type.shape)
        return [self.b.value(x, coords)]

    def element(self, col: Expr) -> tuple[tuple[Expr, ...], Expr]:
        """Coordinates and flat index of element ``col`` of the row."""
        if self.shape.n == 1:
            col = idx(0)
        flat = self.em.bind(add(mul(self.row, idx(self.shape.n)), col), INDEX, prefix="f")
        return (*self.row_coords, col), flat

    def reduce(self, values: tuple[Expr, ...], op: str) -> tuple[Expr, ...]:
        """Combine per-work-item values over the row's work-items."""
        s, ids = self.shape.split, self.ids
        if s.count == 1:
            return values
        if op == "pair":
            combine = self.pair
            dtypes = (self.dtype, self.dtype)
        else:
            f = self.maxf if op == "max" else self.addf
            combine = lambda a, b, bind: (bind(f(a[0], b[0]), self.dtype),)  # noqa: E731
            dtypes = (self.dtype,)
        names = tuple(self.em.fresh(f"row{op}") for _ in values)
        return local_reduce(self.em, names, dtypes, values, combine, lid=ids.lid,
                            base=ids.base, ly=ids.ly, stride=1, count=s.count, size=s.local)

    def rescale(self, m: Expr, to: Expr) -> Expr:
        """``exp(m - to)``, and 1 where ``m == to`` (so equal infinities count once)."""
        return Cond(Bin("==", m, to), self.const(1.0), Call("exp", (Bin("-", m, to),)))

    def pair(self, a: tuple[Expr, ...], b: tuple[Expr, ...],
             bind: Callable[[Expr, DType], Expr]) -> tuple[Expr, ...]:
        """Combine two (max, sum rescaled to that max) pairs."""
        m = bind(self.maxf(a[0], b[0]), self.dtype)
        s = bind(Bin("+", Bin("*", a[1], self.rescale(a[0], m)),
                     Bin("*", b[1], self.rescale(b[0], m))), self.dtype)
        return m, s

    def shift_of(self, m: Expr) -> Expr:
        """The row maximum if finite, else 0 (the interpreter's shift)."""
        return self.bind(Cond(Call("isfinite", (m,)), m, self.const(0.0)), "shift")

    # the two forms ----------------------------------------------------------------------
    def held(self) -> tuple[Expr, Expr, list[tuple[Expr, Expr | None, list[Expr], list[Expr]]]]:
        """Read the row once into registers: ``(shift, sum, [(unit, guard, xs, exps)])``."""
        s = self.shape
        threads = s.split.count
        slots = []
        for k in range(s.held):
            u = add(self.ids.ly, idx(k * threads))
            ok: Expr | None = None
            if (k + 1) * threads > s.units:
                ok = self.em.bind(Bin("<", u, idx(s.units)), DType.bool, prefix="inside")
                u = self.em.bind(Call("min", (u, idx(s.units - 1))), INDEX, prefix="u")
            elif not isinstance(u, Var):
                u = self.em.bind(u, INDEX, prefix="u")
            slots.append((u, ok, self.read(u)))
        lowest = self.const(-np.inf)
        masked = [v if ok is None else self.bind(Cond(ok, v, lowest))
                  for _, ok, xs in slots for v in xs]
        (m,) = self.reduce((self.bind(tree(masked, self.maxf, self.bind), "m"),), "max")
        shift = self.shift_of(m)
        out = []
        for u, ok, xs in slots:
            es = [self.bind(Call("exp", (Bin("-", v, shift),)), "e") for v in xs]
            out.append((u, ok, xs, es))
        zero = self.const(0.0)
        terms = [e if ok is None else self.bind(Cond(ok, e, zero))
                 for _, ok, _, es in out for e in es]
        (total,) = self.reduce((self.bind(tree(terms, self.addf, self.bind), "s"),), "sum")
        return shift, total, out

    def online(self) -> tuple[Expr, Expr]:
        """One pass keeping a running (max, sum rescaled to it): ``(shift, sum)``.

        The running max moves only when a read exceeds it (a branch, rare once it has
        settled), so each element costs one ``exp``. NaNs need no max of their own: they
        reach the sum, and so every output of their row.
        """
        s, em = self.shape, self.em
        m_acc = em.accumulator(self.dtype, self.const(-np.inf))
        s_acc = em.accumulator(self.dtype, self.const(0.0))
        with em.strided(self.ids.ly, self.stop(), s.split.count) as u:
            xs = self.read(u)
            most = tree(list(xs), self.maxf, self.bind)
            em.emit(If(Bin(">", most, Var(m_acc)), (
                Assign(s_acc, Bin("*", Var(s_acc), self.rescale(Var(m_acc), most))),
                Assign(m_acc, most))))
            terms = [self.bind(self.rescale(v, Var(m_acc)), "e") for v in xs]
            em.emit(Assign(s_acc, Bin("+", Var(s_acc), tree(terms, self.addf, self.bind))))
        m, total = self.reduce((Var(m_acc), Var(s_acc)), "pair")
        shift = self.shift_of(m)
        return shift, self.bind(Bin("*", total, self.rescale(m, shift)), "s")

    def vectors(self, keep: str | None = None) -> tuple[Expr, Expr]:
        """The CPU form's first two passes over the row: ``(shift, sum)``; with ``keep`` (an
        f32 output laid out as the row) the second stores each ``exp(x - shift)`` there."""
        em, lanes = self.em, self.shape.lanes
        count = min(reduction.CPU_ACCUMULATORS, self.shape.units)
        maxima = reduction.vector_accumulators(em, self.dtype, lanes, self.const(-np.inf), count)
        self.stream(maxima, lambda acc, v, _: self.maxf(acc, v))
        shift = self.shift_of(reduction.vector_fold(em, maxima, self.maxf, self.dtype, lanes))
        sums = reduction.vector_accumulators(em, self.dtype, lanes, self.const(0.0), count)

        def exp(v: Expr, u: Expr) -> Expr:
            e: Expr = Call("exp", (Bin("-", v, shift),))
            if keep is not None:
                e = em.bind(e, self.dtype, prefix="e", lanes=lanes)
                em.emit(VectorStore(keep, self.unit(u), self.dtype,
                                    tuple(Lane(e, i) for i in range(lanes))))
            return e

        self.stream(sums, lambda acc, v, u: self.addf(acc, exp(v, u)))
        return shift, reduction.vector_fold(em, sums, self.addf, self.dtype, lanes)

    def stream(self, accs: list[str], f: Callable[[Expr, Expr, Expr], Expr]) -> None:
        """``acc = f(acc, vector, its unit)`` over the row's vectors, the accumulators in
        turn."""
        units, step = self.shape.units, len(accs)
        whole = units // step * step

        def update(acc: str, u: Expr) -> None:
            self.em.emit(Assign(acc, f(Var(acc), self.vector(u), u)))

        with self.em.strided(idx(0), idx(whole), step) as k:
            for j, acc in enumerate(accs):
                update(acc, add(k, idx(j)) if j else k)
        if whole < units:
            with self.em.strided(idx(whole), idx(units), 1) as k:
                update(accs[0], k)

    def unit(self, u: Expr) -> Expr:
        """Vector ``u`` of the row as an index of whole vectors of the row-major rows."""
        return self.em.bind(add(mul(self.row, idx(self.shape.units)), u), INDEX, ("unit", u),
                            "vi")

    def vector(self, u: Expr) -> Expr:
        """The prologue's value at vector ``u`` of the row, as one vector."""
        s = self.shape
        return reduction.VectorEvaluator(self.em, set(self.group.nodes), self.b.arg_of,
                                         s.x.type.size, s.lanes, self.unit(u)).value(s.x)

    def backwards(self, k: Var) -> Expr:
        """The work-item's units in reverse order as ``k`` steps forwards: the second pass
        starts with what the first read last, the most likely to be still cached."""
        threads, ly = self.shape.split.count, self.ids.ly
        last = self.em.bind(add(ly, mul(Bin("/", Bin("-", idx(self.shape.units - 1), ly),
                                            idx(threads)), idx(threads))), INDEX, prefix="last")
        return self.em.bind(Bin("-", add(last, ly), k), INDEX, prefix="u")

    def stop(self) -> Expr:
        units = idx(self.shape.units)
        if self.ids.valid is None:
            return units
        return self.em.bind(Cond(self.ids.valid, units, idx(0)), INDEX, prefix="stop")

    # outputs ----------------------------------------------------------------------------
    def store(self, outline: KernelOutline, u: Expr, ok: Expr | None, ys: list[Expr]
              ) -> list[KernelArg]:
        """The epilogue over the outputs ``ys`` of unit ``u`` of the row, stored."""
        s, node = self.shape, self.shape.node
        outs = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot)
                in enumerate(zip(self.group.outputs, outline.output_slots, strict=True))]
        values: list[list[Expr]] = [[] for _ in outs]
        flats = []
        for lane, y in enumerate(ys):
            col = u if s.lanes == 1 else self.em.bind(add(mul(u, idx(s.lanes)), idx(lane)),
                                                      INDEX, prefix="col")
            coords, flat = self.element(col)
            flats.append(flat)
            self.b.at(flat, coords, self.group.domain)
            self.b.seed(node, coords, self.bind(y, "y"))
            for i, n in enumerate(self.group.outputs):
                values[i].append(self.b.value(n, coords))
        if s.lanes > 1:
            at = self.em.bind(add(mul(self.row, idx(s.units)), u), INDEX, prefix="vo")
            stores = [VectorStore(a.name, at, a.dtype, tuple(vs)) for a, vs in zip(
                outs, values, strict=True)]
        else:
            stores = [Store(a.name, flats[0], vs[0]) for a, vs in zip(outs, values, strict=True)]
        guard(self.em, both(ok, self.ids.valid), stores)
        return outs

    def outputs(self, shift: Expr, total: Expr, inverse: Expr | None, x: Expr) -> Expr:
        """Softmax (``exp(x - shift) * inverse``) or log-softmax of element ``x``."""
        if self.shape.node.op is Op.LOG_SOFTMAX:
            return Bin("-", Bin("-", x, shift), self.log_sum(total))
        assert inverse is not None
        return Bin("*", Call("exp", (Bin("-", x, shift),)), inverse)

    def inverse(self, total: Expr) -> Expr | None:
        """``1 / sum`` for softmax (one division per row instead of one per element)."""
        if self.shape.node.op is not Op.SOFTMAX:
            return None
        return self.bind(Bin("/", self.const(1.0), total), "inv")

    def log_sum(self, total: Expr) -> Expr:
        key = ("log-sum", total)
        hit = self.em.lookup(key)
        return hit if hit is not None else self.em.bind(Call("log", (total,)), self.dtype, key,
                                                        "ls")


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    """One kernel for (log-)softmax; a row-loss kernel and a mean kernel for cross-entropy."""
    shape = analyse(group, target)
    assert shape is not None, "row-softmax built for a group it does not accept"
    blocks = outline.thread_blocks if shape.node.op is Op.CROSS_ENTROPY else 0
    r = _RowBuilder(group, outline, shape, blocks)
    ops = implemented_ops(group)
    kept = kept_exp(group, outline, shape)
    if shape.cpu:
        shift, total = r.vectors(kept)
    elif shape.held:
        shift, total, slots = r.held()
    else:
        shift, total = r.online()
    if shape.node.op is Op.CROSS_ENTROPY:
        return _cross_entropy(r, group, outline, kind, target, shift, total, ops)
    outs: list[KernelArg] = []
    inverse = r.inverse(total)
    if shape.cpu:
        with r.em.strided(idx(0), idx(shape.units), 1) as k:
            y = r.em.bind(r.outputs(shift, total, inverse, r.vector(k)) if kept is None else
                          Bin("*", VectorLoad(kept, r.unit(k), shape.lanes), inverse),
                          r.dtype, prefix="y", lanes=shape.lanes)
            outs = r.store(outline, k, None, [Lane(y, lane) for lane in range(shape.lanes)])
    elif shape.held:
        for u, ok, xs, es in slots:
            if inverse is not None:
                ys = [Bin("*", e, inverse) for e in es]
            else:
                ys = [r.outputs(shift, total, None, v) for v in xs]
            outs = r.store(outline, u, ok, ys)
    else:
        with r.em.strided(r.ids.ly, r.stop(), shape.split.count) as k:
            u = r.backwards(k) if REVERSE_SECOND_PASS else k
            ys = [r.outputs(shift, total, inverse, v) for v in r.read(u)]
            outs = r.store(outline, u, None, ys)
    return (Kernel(outline.entry, outline.work_item, kind, group.domain,
                   tuple([*r.b.args, *outs]), r.em.body(), shape.split.geometry, ops),)


def kept_exp(group: FusionGroup, outline: KernelOutline, shape: Rows) -> str | None:
    """The output the CPU form keeps ``exp(x - shift)`` in between its second and third
    passes (each element's ``exp`` then computed once; the third pass scales it in place),
    else None: an f32 softmax that is the group's only output, no epilogue after it (its
    argument ``out0``, as :meth:`_RowBuilder.store` names the outputs)."""
    if not (shape.cpu and shape.node.op is Op.SOFTMAX and tuple(group.outputs) == (shape.node,)
            and shape.node.type.dtype is DType.f32 and len(outline.output_slots) == 1):
        return None
    return "out0"


def _cross_entropy(r: _RowBuilder, group: FusionGroup, outline: KernelOutline,
                   kind: ScheduleKind, target: TargetProfile, shift: Expr, total: Expr,
                   ops: tuple) -> tuple[Kernel, ...]:
    shape = r.shape
    labels = shape.node.srcs[1]
    label = r.em.bind(Call("clamp", (r.b.index_value(labels, r.row_coords), idx(0),
                                     idx(shape.n - 1))), INDEX, prefix="label")
    coords, flat = r.element(label)
    r.b.at(flat, coords, shape.x.type.shape)
    picked = r.b.value(shape.x, coords)
    loss = r.bind(Bin("-", r.log_sum(total), Bin("-", picked, shift)), "loss")
    scratch = KernelArg("scratch0", r.dtype, True, -1, shape.rows)
    store_partials(r.b, scratch, 1, loss, r.ids)
    geometry = r.geometry()
    first = Kernel(f"{outline.entry}_rows", outline.work_item, kind, group.domain,
                   tuple([*r.b.args, scratch]), r.em.body(), geometry, ops)
    losses = Split(1, shape.rows, 1, 1, shape.rows, 1, True)
    second = combine_kernel(group, outline, kind, target, scratch, losses, Op.REDUCE_SUM,
                            shape.node, shape.rows)
    return first, second


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "row-softmax",
        "softmax/log-softmax along the last axis and cross-entropy: rows on work-groups, "
        "row max and sum combined in local memory, rows held in registers or read online",
        accepts, build))


_register()
