"""tiled-contraction: two-operand einsums that are batched matrix products, as tiled kernels.

Every letter of ``einsum(spec, x, y)`` falls in one class: batch (both operands and the
output), M (one operand and the output), N (the other operand and the output) or K (both
operands, summed). The einsum is then ``C[b, m, n] = sum_k X[b, m, k] * Y[b, k, n]`` over
strided views: the letters of a class are flattened into one index when their strides chain
(``bij,jk->bik``: ``b,i`` become one M index), an M or N letter whose strides do not chain
becomes a batch dimension with stride 0 in the other operand, and transposed operands are
read through their strides, never copied. Anything else (a repeated letter in one operand, a
letter in only one operand and not the output, summed letters that do not chain or none of
size > 1, one operand) is declined: the loop nest takes it.

The kernel: each work-group computes a ``bm x bn`` tile of C. Per step of ``bk`` along K it
copies the X and Y tiles into local memory (vector loads where strides and sizes allow,
transposing on the way in when an operand is K-contiguous), then each work-item accumulates a
``tm x tn`` register block of outer products, ``tn`` as vectors. Sizes that tiles do not divide
are handled by guards (zero fill, masked stores) that are only emitted where needed. The
elementwise epilogue of the group (bias, activation, ...) is applied to each accumulator before
its store, through the loop-nest generator's value machinery; an output that reshapes the
einsum or its epilogue (attention's head split ``(s, m) -> (s, h, d)``) is stored at the same
flat index, as reshapes keep row-major order.

Tile sizes come from :func:`choose_tiles` (sweeps of ``experiments/bench_contraction.py
--tiles`` on GPUs and on PoCL): GPUs get 128x128 tiles of 256 work-items with 8x8 f32 (4x4
f64) outputs each, ``bk`` 16, the next K step prefetched into registers (where a work-item's
share of a step is a few vectors, or at most :data:`PREFETCH_REGISTERS` scalars), tile rows
swizzled by 8 (once they fill 90% of the compute units; as a single wave with ``bk`` 32). Large
tiles that would leave units idle split K instead (``Tiles.split``, chunks of at least 512;
:mod:`accy.kernels.split_k` sums them in a fixed order, with the epilogue); 64x64 and 32x32
tiles are taken when K is too short for that, or larger tiles would pad more than 25%, and
split a K of at least ``LONG_K`` where they leave units idle too (of ``SHORT_K`` where they
fill at most half the units; chunks of at least 64). Tiles filled by a transposing copy have
their rows padded against bank conflicts
(:func:`~accy.kernels.contraction_plan.bank_padding`), which layout-planning reports. CPUs get
groups of up to 4 work-items, each with 24 vector accumulators (12 without AVX-512-wide
registers) as wide as the device prefers, in the register-block shape that pads least, the
operands read where the outer products use them (``Tiles.stream``): X a row (or a vector of
rows, where M is contiguous) at a time, Y as vectors along N; no local memory or barriers,
which on PoCL cost more than the caches they stand in for; rows and vectors past M and N
read the last ones (unguarded); K past the last whole step one index at a time. Y rows of no
whole vectors stream unaligned, each row's last vector moved back to end at N
(``Tiles.overlap``); rows shorter than a vector are staged; a K-contiguous Y is first copied
N-contiguous (:mod:`accy.kernels.contraction_cpu`) or, over few rows, with X K-contiguous
too, each output sums a vector along K (``Tiles.dot``); over many rows and tiles of N, Y is
first copied into panels a tile wide (``contraction_cpu.layout``). A product of fewer than 4
rows (GEMV-like) takes them all in one tile, its columns spread over 2 groups a compute unit
or more. An f32 or f16 product with M or N at most 32 takes a tile that short and 128 long, K
split until each compute unit has 3 groups (``contraction_plan.skinny``: GEMV-like products
stream the long operand; f16 as halves). A streamed tile short of vector registers loads
each B vector just before its FMAs (``columnwise``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accy.ir.node import Node
from accy.ir.types import DType
from accy.kernels import contraction_cpu, loopnest, vector_epilogue
from accy.kernels.contraction_plan import (
    FLOATS,
    Contraction,
    Tiles,
    analyse,
    columnwise,
    dot_lanes,
    output_coords,
    rows_apart,
    transposing,
)
from accy.kernels.generators import Generator, register_generator
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Call,
    Cast,
    Cond,
    Expr,
    For,
    Id,
    If,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Lit,
    Load,
    LocalArray,
    Splat,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorLoadAt,
    VectorStore,
    VectorStoreAt,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.split_k import store_targets, summed_here, with_sums
from accy.kernels.workgroup import tree
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import TargetProfile

PREFETCH_REGISTERS = 32  # registers the next K step's scalars may take (prefetched)


@dataclass(frozen=True)
class _Side:
    """How one operand's tile reaches local memory: ``free`` is its M (X) or N (Y) index."""

    arg: str
    local: str
    extent: int  # M or N
    tile: int  # bm or bn
    free_stride: int
    k_stride: int
    base: Expr  # element offset of the batch
    mode: str  # "free": copy along the free index, "k": along K (a transposing copy)
    lanes: int
    ld: int  # local row length


class _Builder:
    def __init__(self, group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 einsum: Node, c: Contraction, tiles: Tiles, target: TargetProfile) -> None:
        self.group, self.outline, self.kind, self.c, self.t = group, outline, kind, c, tiles
        self.target, self.cpu = target, target.device_type == "cpu"  # (cpu: vector_epilogue)
        self.epi = loopnest.EpilogueBuilder(group, outline, einsum)
        self.x_arg = self.epi.arg_of[einsum.srcs[c.x]]
        self.y_arg = self.epi.arg_of[einsum.srcs[1 - c.x]]
        self.body: list[Stmt] = []
        # f16 products load f16, compute and keep their tiles and sums in f32 (as the mma
        # generator's f16 tensor cores do) and round once on the way out
        self.dtype = DType.f32 if c.dtype is DType.f16 else c.dtype
        # split K: chunks of chunk_k (a multiple of bk), none empty
        self.chunk_k = -(-c.k.size // (tiles.split * tiles.bk)) * tiles.bk
        self.chunks = -(-c.k.size // self.chunk_k)
        self.scratch = KernelArg("scratch0", self.dtype, True, -1,
                                 self.chunks * einsum.type.size)
        self.k_guard = bool(c.k.size % tiles.bk)  # loads guarded against K
        self.extra: list[KernelArg] = []  # scratch read (Y's copy)
        self.panel = 0  # the copy's panel width, where each tile reads its own (K x bn)

    def let(self, name: str, e: Expr, dtype: DType = INDEX, lanes: int = 1,
            mutable: bool = False) -> Var:
        self.body.append(Let(name, dtype, e, mutable, lanes))
        return Var(name)

    def zero(self, lanes: int) -> Expr:
        z = Lit(0.0, self.dtype)
        return z if lanes == 1 else Splat(self.dtype, lanes, z)

    # layout ---------------------------------------------------------------------------
    def side(self, which: str, base: Expr) -> _Side:
        c, t = self.c, self.t
        if which == "x":
            arg, extent, tile, fs, ks = self.x_arg, c.m.size, t.bm, c.m.x, c.k.x
            bstrides = [d.x for d in c.batch]
        else:
            arg, extent, tile, fs, ks = self.y_arg, c.n.size, t.bn, c.n.y, c.k.y
            bstrides = [d.y for d in c.batch]

        def widest(contiguous: int, others: list[int]) -> int:
            lanes = t.vector
            while lanes > 1 and any(v % lanes for v in [contiguous, *others]):
                lanes //= 2
            return lanes

        k_major = transposing(c, which)  # copy along the more contiguous index: coalesced
        lanes = 1
        if (ks if k_major else fs) == 1:
            span = math.gcd(c.k.size, t.bk) if k_major else math.gcd(extent, tile)
            lanes = widest(span, [fs if k_major else ks, *bstrides])
        ld = tile + (t.pad if k_major else 0)  # a transposing copy: pad against conflicts
        return _Side(arg, f"{which}_tile", extent, tile, fs, ks, base,
                     "k" if k_major else "free", lanes, ld)

    def slots(self, s: _Side) -> tuple[int, int]:
        """(vectors or elements per tile, per work-item)."""
        count = s.tile * self.t.bk // s.lanes
        return count, -(-count // self.t.threads)

    def slot_coords(self, s: _Side, v: Expr) -> tuple[Expr, Expr]:
        """Tile-relative (free, k) element coordinates of copy slot ``v``."""
        if s.mode == "free":
            n = s.tile // s.lanes
            return mul(mod(v, n), idx(s.lanes)), div(v, n)
        n = self.t.bk // s.lanes
        return div(v, n), mul(mod(v, n), idx(s.lanes))

    def prefetch_coords(self, s: _Side, tid: Expr, i: int) -> tuple[Expr, Expr]:
        """Tile-relative (free, k) of work-item ``tid``'s prefetch slot ``i`` (slot ``tid + i *
        threads``): slot 0's moved by :func:`rows_apart` rows of slots where that is not 0
        (the same column, so its loads are one address plus constant offsets)."""
        rows = rows_apart(i, self.t.threads, (s.tile if s.mode == "free" else self.t.bk)
                          // s.lanes)
        if not rows:
            f, k = self.slot_coords(s, add(tid, idx(i * self.t.threads)))
            return self.let(f"{s.local}_f{i}", f), self.let(f"{s.local}_k{i}", k)
        f, k = Var(f"{s.local}_f0"), Var(f"{s.local}_k0")
        return (f, add(k, idx(rows))) if s.mode == "free" else (add(f, idx(rows)), k)

    def load(self, s: _Side, f0: Expr, rf: Expr, kt: Expr, rk: Expr, lanes: int = 0,
             inside: bool = False) -> Expr:
        """``lanes`` (else ``s.lanes``) elements from (rf, rk) of the K step at ``kt``, zero
        outside the operand (streamed: its last row or vector, never stored, not a branch at
        every load). ``inside``: the step is inside K, the tile inside where :meth:`whole`."""
        lanes = lanes or s.lanes
        f, k = add(f0, rf), add(kt, rk)
        panel = s is self.sy and self.panel > 0  # a tile's panel: K x bn, padded past N
        overlap = self.t.overlap and s is self.sy and lanes > 1
        edge = overlap or self.stream and s.extent % s.tile > 0 and s.extent % lanes == 0
        f = Call("min", (f, idx(s.extent - lanes))) if edge and not panel else f
        at = add(s.base, add(add(mul(f0, idx(self.c.k.size)), rf) if panel else mul(
            f, idx(s.free_stride)), mul(k, idx(s.k_stride))))
        # streamed vectors load at their element offset, not through a signed division
        value = (Load(s.arg, at) if lanes == 1 else VectorLoadAt(s.arg, at, lanes)
                 if overlap or self.stream else VectorLoad(s.arg, div(at, lanes), lanes))
        past = s.extent % s.tile and not (inside and self.whole(s) or edge or panel)
        guard = all_of(([Bin("<", f, idx(s.extent))] if past else [])
                       + ([Bin("<", k, idx(self.c.k.size))] if self.k_guard and not inside
                          else []))
        return value if guard is None else Cond(guard, value, self.zero(lanes))

    @staticmethod
    def whole(s: _Side) -> bool:
        """Whether some of side ``s``'s tiles lie wholly inside it, but not all: tiles of
        :meth:`prefetched`'s unguarded loads (a side shorter than its tile has none)."""
        return s.extent % s.tile > 0 and s.extent > s.tile

    def store_local(self, s: _Side, rf: Expr, rk: Expr, value: Var) -> list[Stmt]:
        if s.lanes == 1:
            return [Store(s.local, add(mul(rk, idx(s.ld)), rf), value)]
        if s.mode == "free":
            at = div(add(mul(rk, idx(s.ld)), rf), s.lanes)
            return [VectorStore(s.local, at, self.dtype,
                                tuple(Lane(value, i) for i in range(s.lanes)))]
        return [Store(s.local, add(mul(add(rk, idx(i)), idx(s.ld)), rf), Lane(value, i))
                for i in range(s.lanes)]

    # phases ---------------------------------------------------------------------------
    def copy_direct(self, s: _Side, f0: Expr, kt: Expr, tid: Expr) -> list[Stmt]:
        """Copy one K step's tile to local memory in a loop (no prefetch)."""
        count, per = self.slots(s)
        i = f"{s.local}_i"
        v = add(tid, mul(Var(i), idx(self.t.threads)))
        rf, rk = self.slot_coords(s, Var(f"{s.local}_v"))
        inner: list[Stmt] = [Let(f"{s.local}_t", self.dtype, self.load(s, f0, rf, kt, rk),
                                 lanes=s.lanes)]
        inner += self.store_local(s, rf, rk, Var(f"{s.local}_t"))
        if count % self.t.threads:
            inner = [If(Bin("<", Var(f"{s.local}_v"), idx(count)), tuple(inner))]
        return [For(i, idx(0), idx(per), (Let(f"{s.local}_v", INDEX, v), *inner))]

    def compute(self, acc: list[list[Var]], ty: Expr, tx: Expr, single: bool = False
                ) -> list[Stmt]:
        """The outer products of one K step of ``bk`` (``unroll`` per loop iteration), or of
        one K index (``single``: a streamed K's rest), the operands read from their local
        tiles or, streamed, from global memory."""
        t, dt, sx, sy = self.t, self.dtype, self.sx, self.sy
        bk, unroll = (1, 1) if single else (t.bk, t.unroll)
        kk = Var("kk") if unroll < bk else idx(0)
        # streamed X: vm rows as one vector where they are contiguous and aligned, else apart
        x_vector = t.vm > 1 and sx.mode == "free" and sx.lanes % t.vm == 0
        by_column = self.stream and t.vn > 1 and columnwise(t, self.target)
        out: list[Stmt] = []
        for u in range(unroll):
            k = add(kk, idx(u))
            a: list[list[Expr]] = []
            for s in range(t.sm):
                name = f"a{u}_{s}"
                if not self.stream or x_vector:
                    out.append(Let(name, dt, self.operand(sx, self.m0, s * t.wy, ty, k, t.vm),
                                   lanes=t.vm))
                    a.append([Var(name)] if t.vm == 1 else
                             [Lane(Var(name), r) for r in range(t.vm)])
                    continue
                a.append([])
                for r in range(t.vm):
                    row = add(idx(s * t.wy * t.vm + r), mul(ty, idx(t.vm)))
                    out.append(Let(f"{name}_{r}", dt, self.load(sx, self.m0, row, Var("kt"), k,
                                                                1)))
                    a[s].append(Var(f"{name}_{r}"))
            b = [Var(f"b{u}_{w}") for w in range(t.sn)]
            fmas = [Assign(acc[s * t.vm + r][w].name, Call("fma", (a[s][r] if t.vn == 1 else Splat(
                dt, t.vn, a[s][r]), b[w], acc[s * t.vm + r][w])))
                for s in range(t.sm) for r in range(t.vm) for w in range(t.sn)]
            for w in range(t.sn):  # (by_column: column w's FMAs right after its B vector)
                out += [Let(b[w].name, dt, self.operand(sy, self.n0, w * t.wx, tx, k, t.vn),
                            lanes=t.vn), *(fmas[w::t.sn] if by_column else [])]
            out += [] if by_column else fmas
        if unroll < bk:
            return [For("kk", idx(0), idx(bk), tuple(out), step=unroll)]
        return out

    def operand(self, s: _Side, f0: Expr, block: int, thread: Expr, k: Expr, lanes: int
                ) -> Expr:
        """``lanes`` elements of ``s`` at K index ``k`` of this step, block ``block`` of the
        work-item ``thread``'s free index: from memory when streamed, else from the local tile
        (rows of ``s.ld`` elements)."""
        if self.stream:
            free = add(idx(block * lanes), mul(thread, idx(lanes)))
            return self.load(s, f0, free, Var("kt"), k, lanes)
        at = add(add(mul(k, idx(s.ld // lanes)), idx(block)), thread)
        return Load(s.local, at) if lanes == 1 else VectorLoad(s.local, at, lanes)

    def build(self) -> Kernel:
        c, t, dt = self.c, self.t, self.dtype
        tiles_m, tiles_n = -(-c.m.size // t.bm), -(-c.n.size // t.bn)
        groups = c.batch_size * tiles_m * tiles_n
        tid = self.let("tid", Id("local", 0))
        tx = self.let("tx", mod(tid, t.wx))
        ty = self.let("ty", div(tid, t.wx))
        g = self.let("grp", Id("group", 0))
        self.k0: Expr = idx(0)
        k1: Expr = idx(c.k.size)
        self.chunk: Expr | None = None
        if self.chunks > 1:  # group g: K chunk g / groups of tile g % groups
            self.chunk = self.let("chunk", div(g, groups))
            g = self.let("grp_t", mod(g, groups))
            self.k0 = self.let("k0", mul(self.chunk, idx(self.chunk_k)))
            k1 = self.let("k1", Call("min", (add(self.k0, idx(self.chunk_k)), idx(c.k.size))))
        tile = self.let("tile", mod(g, tiles_m * tiles_n)) if c.batch else g
        if t.swizzle > 1 and tiles_m > t.swizzle:
            band = self.let("band", div(tile, t.swizzle * tiles_n))
            rows = self.let("rows", Call("min", (idx(t.swizzle), Bin(
                "-", idx(tiles_m), mul(band, idx(t.swizzle))))))
            inner = self.let("inner", mod(tile, t.swizzle * tiles_n))
            tm = self.let("tm", add(mul(band, idx(t.swizzle)), Bin("%", inner, rows)))
            tn = self.let("tn", Bin("/", inner, rows))
        else:
            tm, tn = self.let("tm", div(tile, tiles_n)), self.let("tn", mod(tile, tiles_n))
        m0 = self.m0 = self.let("m0", mul(tm, idx(t.bm)))
        n0 = self.n0 = self.let("n0", mul(tn, idx(t.bn)))
        bcoords: list[Expr] = []
        bases = {"x": idx(0), "y": idx(0), "out": idx(0)}
        if c.batch:
            bz = self.let("bz", div(g, tiles_m * tiles_n))
            inner_size = c.batch_size
            for i, d in enumerate(c.batch):
                inner_size //= d.size
                coord = div(bz, inner_size) if i == 0 else mod(div(bz, inner_size), d.size)
                bcoords.append(self.let(f"bc{i}", coord))
            for key in bases:
                strides = [getattr(d, key) for d in c.batch]
                e: Expr = idx(0)
                for coord, s in zip(bcoords, strides, strict=True):
                    e = add(e, mul(coord, idx(s)))
                bases[key] = self.let(f"{key}_base", e) if not isinstance(e, Lit) else e
        self.sx, self.sy = self.side("x", bases["x"]), self.side("y", bases["y"])
        self.out_base = bases["out"]
        # streamed: both operands or neither (one staged keeps the barriers; streaming the
        # other then gained or lost by shape), Y as whole vectors along N, not prefetched
        self.stream = (t.stream and not t.prefetch and dt is c.dtype
                       and self.sy.mode == "free" and (self.sy.lanes % t.vn == 0 or t.overlap))
        if (t.dot and t.stream and dt is c.dtype and self.chunks == 1
                and dot_lanes(c, t.dot) == t.dot):
            self.stores(self.dot_product(m0, n0, bases), m0, n0, tx, ty, bcoords, bases["out"])
            return self.kernel(groups)
        align = max(t.vm, t.vn, self.sx.lanes, self.sy.lanes) * dt.itemsize
        staged = [] if self.stream else [self.sx, self.sy]
        for s in staged:
            self.body.append(LocalArray(s.local, dt, t.bk * s.ld, align))
        acc = [[self.let(f"acc_{i}_{w}", self.zero(t.vn), dt, t.vn, mutable=True)
                for w in range(t.sn)] for i in range(t.vm * t.sm)]
        kt = Var("kt")
        # streamed with K past the last whole step: whole steps unguarded, then the rest one
        # at a time (a guard on every load costs more than the second loop)
        peel = self.stream and self.chunks == 1 and c.k.size % t.bk > 0
        self.k_guard = c.k.size % t.bk > 0 and not peel
        compute = self.compute(acc, ty, tx)
        per_x, per_y = self.slots(self.sx)[1], self.slots(self.sy)[1]
        held = per_x * self.sx.lanes + per_y * self.sy.lanes  # registers of a prefetch
        if t.prefetch and (per_x * per_y <= 16 or held <= PREFETCH_REGISTERS):
            loop = self.prefetched(m0, n0, tid, compute)
        else:
            loop = [st for s in staged for st in self.copy_direct(s, m0 if s is self.sx else n0,
                                                                 kt, tid)]
            loop += [Barrier(), *compute, Barrier()] if staged else compute
        if peel:
            whole = idx(c.k.size - c.k.size % t.bk)
            self.body.append(For("kt", self.k0, whole, tuple(loop), step=t.bk))
            self.body.append(For("kt", whole, k1, tuple(self.compute(acc, ty, tx, True))))
        else:
            self.body.append(For("kt", self.k0, k1, tuple(loop), step=t.bk))
        self.stores(acc, m0, n0, tx, ty, bcoords, bases["out"])
        return self.kernel(groups)

    def kernel(self, groups: int) -> Kernel:
        t = self.t
        more, added = summed_here(self.group, self.outline, self.epi.given, self.scratch,
                                  self.chunks, self.c, t, self.target, self.out_base)
        entry = self.outline.entry + ("_partials" if self.chunks > 1 and not more else "")
        return Kernel(entry, self.outline.work_item, self.kind, self.group.domain,
                      tuple(self.epi.args + self.out_args + added + self.extra),
                      tuple(self.body + more),
                      LaunchGeometry((self.chunks * groups * t.threads,), (t.threads,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True)

    def dot_product(self, m0: Expr, n0: Expr, bases: dict[str, Expr]) -> list[list[Var]]:
        """Each output of the tile as a vector of ``t.dot`` partial sums along K (both
        operands K-contiguous, read where used), its lanes summed after the loop, then K past
        the last whole vector added one index at a time; vectors load at their element
        offset (aligned or not: no signed division at every load, 2.2x faster on PoCL). Rows
        and columns past the product read the last one (computed, not stored)."""
        c, t, dt, lanes = self.c, self.t, self.dtype, self.t.dot
        rows = [add(m0, idx(i)) if c.m.size % t.bm == 0 else
                Call("min", (add(m0, idx(i)), idx(c.m.size - 1))) for i in range(t.sm)]
        cols = [add(n0, idx(w)) if c.n.size % t.bn == 0 else
                Call("min", (add(n0, idx(w)), idx(c.n.size - 1))) for w in range(t.sn)]
        starts = ([add(bases["x"], mul(r, idx(c.m.x))) for r in rows],
                  [add(bases["y"], mul(col, idx(c.n.y))) for col in cols])

        def loads(kt: Var, width: int) -> list[Stmt]:
            out: list[Stmt] = []
            for name, arg, begins in (("a", self.x_arg, starts[0]), ("b", self.y_arg, starts[1])):
                for i, begin in enumerate(begins):
                    at = add(begin, kt)
                    value = Load(arg, at) if width == 1 else VectorLoadAt(arg, at, width)
                    out.append(Let(f"{name}_{i}", dt, value, lanes=width))
            return out

        def products(into: list[list[Var]]) -> list[Stmt]:
            return [Assign(into[i][w].name, Call("fma", (Var(f"a_{i}"), Var(f"b_{w}"),
                                                         into[i][w])))
                    for i in range(t.sm) for w in range(t.sn)]

        acc = [[self.let(f"acc_{i}_{w}", self.zero(lanes), dt, lanes, mutable=True)
                for w in range(t.sn)] for i in range(t.sm)]
        whole = c.k.size - c.k.size % lanes
        kt = Var("kt")
        self.body.append(For("kt", idx(0), idx(whole), (*loads(kt, lanes), *products(acc)),
                             step=lanes))
        sums = [[self.let(f"sum_{i}_{w}", tree([Lane(acc[i][w], j) for j in range(lanes)],
                                                 lambda u, v: Bin("+", u, v)), dt, mutable=True)
                 for w in range(t.sn)] for i in range(t.sm)]
        if whole < c.k.size:
            self.body.append(For("kt", idx(whole), idx(c.k.size),
                                 (*loads(kt, 1), *products(sums))))
        return sums

    def prefetched(self, m0: Expr, n0: Expr, tid: Expr, compute: list[Stmt]) -> list[Stmt]:
        """Loop body that stores the registers loaded last step, then loads the next step:
        unguarded where that step lies inside K and its tiles inside the operands (every step
        but a K tail's, in every group but the last along M or N; see :meth:`whole`), guarded
        elsewhere."""
        kt, t = Var("kt"), self.t
        nxt_k = add(kt, idx(t.bk))
        store: list[Stmt] = []
        fetch: list[Stmt] = []
        fast: list[Stmt] = []
        inside = all_of(([Bin("<=", add(nxt_k, idx(t.bk)), idx(self.c.k.size))]
                         if self.k_guard else [])
                        + [Bin("<=", add(f0, idx(s.tile)), idx(s.extent))
                           for s, f0 in ((self.sx, m0), (self.sy, n0)) if self.whole(s)])
        for s, f0 in ((self.sx, m0), (self.sy, n0)):
            count, per = self.slots(s)
            for i in range(per):
                v = add(tid, idx(i * t.threads))
                rf, rk = self.prefetch_coords(s, tid, i)
                reg = f"{s.local}_r{i}"
                first = self.load(s, f0, rf, self.k0, rk)
                st = self.store_local(s, rf, rk, Var(reg))
                nxt: Stmt = Assign(reg, self.load(s, f0, rf, nxt_k, rk))
                bare: Stmt = Assign(reg, self.load(s, f0, rf, nxt_k, rk, inside=True))
                if count % t.threads:
                    # work-items past the tile's slots load nothing: their rows (or columns)
                    # lie past the tile, past the operand's end where the tiles divide it
                    ok = Bin("<", v, idx(count))
                    self.let(reg, self.zero(s.lanes), self.dtype, s.lanes, True)
                    self.body.append(If(ok, (Assign(reg, first),)))
                    st, nxt, bare = [If(ok, tuple(st))], If(ok, (nxt,)), If(ok, (bare,))
                else:
                    self.let(reg, first, self.dtype, s.lanes, True)
                store += st
                fetch.append(nxt)
                fast.append(bare)
        if inside is not None:
            fetch = [If(inside, tuple(fast), tuple(fetch))]
        more = Bin("<", nxt_k, idx(self.c.k.size))
        return store + [Barrier(), If(more, tuple(fetch))] + compute + [Barrier()]

    def stores(self, acc: list[list[Var]], m0: Expr, n0: Expr, tx: Expr, ty: Expr,
               bcoords: list[Expr], obase: Expr) -> None:
        """Epilogue and stores of every accumulator, guarded where tiles overhang."""
        c, t, dt = self.c, self.t, self.dtype
        self.out_args, values, obase = store_targets(self.group, self.outline, self.epi.given,
                                                     self.chunk, self.scratch, obase)
        names = [a.name for a in self.out_args]
        plain = all(v is self.epi.given for v in values)
        vector = (t.vn > 1 and c.n.out == 1 and c.n.size % t.vn == 0 and c.m.out % t.vn == 0
                  and all(d.out % t.vn == 0 for d in c.batch)
                  and (self.chunk is None or self.epi.given.type.size % t.vn == 0))
        unaligned = t.overlap and c.n.out == 1 and self.chunk is None  # (Tiles.overlap)
        vector = vector or unaligned
        cols = [add(n0, add(idx(w * t.wx * t.vn), mul(tx, idx(t.vn)))) for w in range(t.sn)]
        cols = [self.let(f"col{w}", Call("min", (col, idx(c.n.size - t.vn))) if t.overlap
                         else col) for w, col in enumerate(cols)]
        whole = (vector and self.cpu and not plain
                 and vector_epilogue.accepts(values, self.epi.given, self.epi.inside, t.vn))
        counter = 0
        for s in range(t.sm):
            for r in range(t.vm):
                i = s * t.vm + r
                row = self.let(f"row{i}", add(m0, add(idx(s * t.wy * t.vm + r),
                                                      mul(ty, idx(t.vm)))))
                row_ok = [Bin("<", row, idx(c.m.size))] if c.m.size % t.bm else []
                for w in range(t.sn):
                    at = add(obase, add(mul(row, idx(c.m.out)), mul(cols[w], idx(c.n.out))))
                    em = loopnest.Emitter()
                    em.counter = counter
                    self.epi.em = em
                    lanes: list[list[Expr]] = [[] for _ in self.group.outputs]
                    if whole:
                        coords, memo = self.coords(bcoords, row, cols[w]), {}
                        for o, node in enumerate(values):
                            y = vector_epilogue.value(self.epi, node, acc[i][w], coords, t.vn,
                                                      memo)
                            lanes[o] = [Lane(y, lane) for lane in range(t.vn)]
                    for lane in range(t.vn if not whole else 0):
                        col = add(cols[w], idx(lane))
                        if not vector and c.n.size % t.bn:
                            # a lane past N is computed, not stored: its epilogue reads the
                            # last column's operands rather than past their end
                            col = Call("min", (col, idx(c.n.size - 1)))
                        self.epi.result = acc[i][w] if t.vn == 1 else Lane(acc[i][w], lane)
                        if c.dtype is DType.f16 and not plain:  # the einsum's f16 value
                            self.epi.result = Cast(DType.f16, self.epi.result)
                        coords = self.coords(bcoords, row, col) if not plain else ()
                        for o, node in enumerate(values):
                            lanes[o].append(self.epi.value(node, coords))
                    counter = em.counter
                    body: list[Stmt] = list(em.scopes[0].body)
                    if vector:
                        body += [VectorStoreAt(names[o], at, dt, tuple(vals)) if unaligned else
                                 VectorStore(names[o], div(at, t.vn), dt, tuple(vals))
                                 for o, vals in enumerate(lanes)]
                        guard = all_of(row_ok + ([Bin("<", cols[w], idx(c.n.size))]
                                               if c.n.size % t.bn and not unaligned else []))
                    else:
                        guard = all_of(row_ok)
                        for lane in range(t.vn):
                            put = [Store(names[o], add(at, idx(lane * c.n.out)), vals[lane])
                                   for o, vals in enumerate(lanes)]
                            col_ok = Bin("<", add(cols[w], idx(lane)), idx(c.n.size))
                            body += [If(col_ok, tuple(put))] if c.n.size % t.bn else put
                    self.body += [If(guard, tuple(body))] if guard is not None else body

    def coords(self, bcoords: list[Expr], row: Expr, col: Expr) -> tuple[Expr, ...]:
        """Output coordinates of the element at flattened (row, col)."""
        return output_coords(self.c, bcoords, row, col)


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, tiles: Tiles | None = None) -> tuple[Kernel, ...]:
    """The tiled kernel of an accepted contraction group (``tiles``: override the heuristic);
    with K split, the partials kernel and the one summing them (:func:`split_k.with_sums`)."""
    found = _form(group)
    if isinstance(found, str):
        raise ValueError(f"tiled-contraction cannot take this group: {found}")
    einsum, form = found
    reads, chosen, width = contraction_cpu.layout(form, target, tiles)
    b = _Builder(group, outline, kind, einsum, reads, chosen, target)
    first: tuple[Kernel, ...] = ()
    if width:  # Y copied into panels first (contraction_cpu), read from the copy
        y = next(a for a in b.epi.args if a.name == b.y_arg)
        copy, reader = contraction_cpu.copy_kernel(form, y, width, group, outline, kind, target)
        first, b.y_arg, b.extra = (copy,), reader.name, [reader]
        b.panel = width if width == chosen.bn < form.n.size else 0  # (else one panel: rows)
    return first + with_sums(b.build(), group, outline, kind, einsum, b.scratch, b.chunks,
                             chosen, target)


def _form(group: FusionGroup) -> tuple[Node, Contraction] | str:
    """:func:`analyse`'s answer for floats (f16 computed in f32: the f16 products the mma
    generator's tensor cores do not take, such as a B operand stored along K)."""
    found = analyse(group)
    if not isinstance(found, str) and found[1].dtype not in (*FLOATS, DType.f16):
        return f"dtype {found[1].dtype.value} (tiled contractions are f16, f32 or f64)"
    return found


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return not isinstance(_form(group), str)


register_generator(Generator(
    "tiled-contraction",
    "two-operand einsums that are batched matrix products: local-memory tiles, register "
    "blocks, vector loads, tile sizes from the target and shape, elementwise epilogue",
    accepts, build,
))
