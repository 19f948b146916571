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
its store, through the loop-nest generator's value machinery.

Tile sizes come from :func:`choose_tiles` (chosen by sweeps of ``experiments/
bench_contraction.py --tiles`` on an H200 and on PoCL): GPUs get 128x128 tiles of 256
work-items with 8x8 f32 (4x4 f64) outputs each, ``bk`` 16, the next K step prefetched into
registers, tile rows swizzled by 8; 64x64 and 32x32 tiles when larger ones would leave compute
units idle or pad more than 25%. CPUs get groups of up to 4 work-items that share the Y tile
copy, each with 24 vector accumulators (12 without AVX-512-wide registers) as wide as the
device prefers, in the register-block shape that pads least.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType
from accy.kernels import loopnest
from accy.kernels.generators import Generator, register_generator
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
    VectorStore,
    add,
    div,
    idx,
    mod,
    mul,
    row_major,
)
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

FLOATS = (DType.f32, DType.f64)


# classification ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Dim:
    """One index of the product: its extent and its element stride in X, Y and the output."""

    size: int
    x: int
    y: int
    out: int


@dataclass(frozen=True)
class Contraction:
    """An einsum as ``C[b, m, n] = sum_k X[b, m, k] Y[b, k, n]`` over strided operands.

    ``x`` is the einsum operand (0 or 1) that plays X. ``coords`` gives, per output letter,
    where its coordinate comes from: ``("b", i, 1, size)`` batch dimension ``i``,
    ``("m", 0, d, size)`` is ``(m // d) % size``, likewise ``"n"``; ``("1", 0, 1, 1)`` is 0.
    """

    dtype: DType
    x: int
    batch: tuple[Dim, ...]
    m: Dim
    n: Dim
    k: Dim
    coords: tuple[tuple[str, int, int, int], ...]

    @property
    def batch_size(self) -> int:
        return math.prod(d.size for d in self.batch)


def _chain(letters: list[str], size: dict[str, int], strides: tuple[dict[str, int], ...]
           ) -> tuple[list[str], list[str]]:
    """The longest suffix of ``letters`` (size-1 letters dropped) whose strides chain in every
    stride map, so that it flattens into one index; and the letters before it."""
    order = [c for c in letters if size[c] > 1]
    start = len(order) - 1 if order else 0
    while start > 0 and all(s[order[start - 1]] == s[order[start]] * size[order[start]]
                            for s in strides):
        start -= 1
    return order[start:], order[:start]


def _flat(chain: list[str], size: dict[str, int], strides: tuple[dict[str, int], ...]
          ) -> tuple[int, ...]:
    """Extent and per-map stride of a flattened chain (extent 1, strides 0 when empty)."""
    if not chain:
        return (1, *(0 for _ in strides))
    return (math.prod(size[c] for c in chain), *(s[chain[-1]] for s in strides))


def classify(node: Node) -> Contraction | str:
    """The batched-matrix-product form of an einsum node, or why it has none."""
    if node.op is not Op.EINSUM or len(node.srcs) != 2:
        return "not a two-operand einsum"
    dtype = node.type.dtype
    if dtype not in FLOATS:
        return f"dtype {dtype.value} (tiled contractions are f32 or f64)"
    terms, out = parse_einsum(node.attr("spec"), [s.type.rank for s in node.srcs])
    for t in terms:
        if len(set(t)) != len(t):
            return f"operand term {t!r} repeats a letter"
    size: dict[str, int] = {}
    for t, s in zip(terms, node.srcs, strict=True):
        size.update(zip(t, s.type.shape, strict=True))
    if 0 in size.values():
        return "an empty dimension"
    for c in size:
        if sum((c in terms[0], c in terms[1], c in out)) < 2:
            return f"letter {c!r} appears in one operand only"
    # X is the operand whose letters do not include the output's innermost one, so that the
    # N index (vector lanes, coalesced stores) runs along the output's rows.
    xi = 1 if out and out[-1] in terms[0] and out[-1] not in terms[1] else 0
    tx, ty = terms[xi], terms[1 - xi]
    sx = dict(zip(tx, row_major(node.srcs[xi].type.shape), strict=True))
    sy = dict(zip(ty, row_major(node.srcs[1 - xi].type.shape), strict=True))
    so = dict(zip(out, row_major(node.type.shape), strict=True))
    m_chain, m_rest = _chain([c for c in out if c in tx and c not in ty], size, (sx, so))
    n_chain, n_rest = _chain([c for c in out if c in ty and c not in tx], size, (sy, so))
    k_chain, k_rest = _chain([c for c in tx if c not in out], size, (sx, sy))
    if k_rest:
        return f"summed letters {''.join(k_rest + k_chain)!r} do not flatten into one index"
    if not k_chain:
        return "no summed index (an outer product): the loop nest computes it directly"
    m_size, mx, mo = _flat(m_chain, size, (sx, so))
    n_size, ny, no = _flat(n_chain, size, (sy, so))
    k_size, kx, ky = _flat(k_chain, size, (sx, sy))
    batch_letters = [c for c in out if size[c] > 1 and c not in m_chain and c not in n_chain]
    batch = tuple(Dim(size[c], sx.get(c, 0), sy.get(c, 0), so[c]) for c in batch_letters)
    coords = []
    for c in out:
        if c in batch_letters:
            coords.append(("b", batch_letters.index(c), 1, size[c]))
        elif c in m_chain or c in n_chain:
            chain = m_chain if c in m_chain else n_chain
            inner = math.prod(size[d] for d in chain[chain.index(c) + 1:])
            coords.append(("m" if c in m_chain else "n", 0, inner, size[c]))
        else:
            coords.append(("1", 0, 1, 1))
    assert not (set(m_rest) | set(n_rest)) - set(batch_letters)
    return Contraction(dtype, xi, batch, Dim(m_size, mx, 0, mo), Dim(n_size, 0, ny, no),
                       Dim(k_size, kx, ky, 0), tuple(coords))


def analyse(group: FusionGroup) -> tuple[Node, Contraction] | str:
    """The einsum of a contraction group and its product form, or why the group is declined."""
    if group.kind is not ScheduleKind.contraction:
        return f"a {group.kind.value} group"
    einsums = [n for n in group.nodes if n.op is Op.EINSUM]
    if len(einsums) != 1:
        return f"{len(einsums)} einsums in one group"
    (e,) = einsums
    inside = set(group.nodes)
    if any(s in inside or is_inlined(s) for s in e.srcs):
        return "an operand is not read from a buffer"
    form = classify(e)
    if isinstance(form, str):
        return form
    after = {e}
    for n in group.nodes:
        if n is not e and any(s in after for s in n.srcs):
            if not n.op.is_elementwise:
                return f"{n.op.value} after the einsum is not elementwise"
            after.add(n)
    if any(o not in after or o.type.shape != e.type.shape for o in group.outputs):
        return "an output is not an elementwise function of the einsum at its shape"
    return e, form


# tiles ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Tiles:
    """A work-group computes ``bm x bn`` outputs with ``wx * wy`` work-items; each work-item
    ``sm`` groups of ``vm`` rows (strided by ``wy * vm``) times ``sn`` vectors of ``vn`` columns
    (strided by ``wx * vn``); K advances ``bk`` at a time, ``unroll`` steps per inner loop."""

    wx: int
    wy: int
    vm: int
    sm: int
    vn: int
    sn: int
    bk: int
    unroll: int
    prefetch: bool = False  # load the next K tile into registers while computing this one
    pad: int = 0  # extra elements per local row of an operand copied with a transpose
    vector: int = 4  # widest global-memory vector load, in elements
    swizzle: int = 0  # tile rows walked together for cache reuse (0: row-major order)

    @property
    def bm(self) -> int:
        return self.wy * self.vm * self.sm

    @property
    def bn(self) -> int:
        return self.wx * self.vn * self.sn

    @property
    def threads(self) -> int:
        return self.wx * self.wy

    def local_bytes(self, itemsize: int) -> int:
        return self.bk * (self.bm + self.bn + 2 * self.pad) * itemsize


def _padded(c: Contraction, bm: int, bn: int) -> int:
    return -(-c.m.size // bm) * bm * -(-c.n.size // bn) * bn


def _pow2_at_most(n: int, cap: int) -> int:
    return min(cap, 1 << max(0, n.bit_length() - 1))


def choose_tiles(c: Contraction, target: TargetProfile) -> Tiles:
    """Tile sizes for ``c`` on ``target``: from its device type, limits and the problem shape."""
    item = c.dtype.itemsize
    if target.device_type == "cpu":
        lanes = _pow2_at_most(max(1, target.native_vector_bytes // item), 16)
        lanes = min(lanes, 1 << max(0, (c.n.size - 1).bit_length()))  # narrow N: fewer lanes
        # 24 vector accumulators where the ISA has 32 SIMD registers (AVX-512), else 12;
        # the first shape that wastes at most 5% more than the least wasteful one
        budget = 24 if target.native_vector_bytes >= 64 else 12
        preferred = [(8, 3), (12, 2), (6, 4)] if budget == 24 else [(4, 3), (6, 2), (3, 4)]
        columns = -(-c.n.size // lanes)
        shapes = [(tm, min(sn, columns)) for tm, sn in
                  preferred + [(m, budget // m) for m in (4, 2, 1)]]  # the last: few rows
        least = min(_padded(c, tm, sn * lanes) for tm, sn in shapes)
        tm, sn = next(s for s in shapes if _padded(c, s[0], s[1] * lanes) <= 1.05 * least)
        vm = math.gcd(tm, 16) if math.gcd(tm, 16) in (2, 4, 8, 16) else 1
        bk = min(64, -(-c.k.size // 4) * 4)
        wy = max(1, min(4, c.m.size // tm))  # work-items of a group share the Y tile copy
        return Tiles(1, wy, vm, tm // vm, lanes, sn, bk, 4, vector=lanes)
    lanes = max(1, 16 // item)  # 16-byte vectors
    per = 8 // lanes if item == 4 else 2  # 8x8 f32 or 4x4 f64 outputs per work-item
    candidates = [Tiles(16, 16, lanes, per, lanes, per, 16, 16, True, lanes, lanes, 8),
                  Tiles(16, 16, lanes, 1, lanes, 1, 16, 16, True, lanes, lanes),
                  Tiles(8, 8, lanes, 1, lanes, 1, 16, 16, True, lanes, lanes)]
    fits = [t for t in candidates if t.threads <= target.max_work_group_size
            and t.local_bytes(item) <= target.local_mem_bytes] or [
        Tiles(1, 1, 1, 1, 1, 1, 4, 4, vector=1)]
    actual = c.m.size * c.n.size
    chosen = fits[-1]
    for t in fits:
        groups = c.batch_size * _padded(c, t.bm, t.bn) // (t.bm * t.bn)
        if groups >= target.compute_units and _padded(c, t.bm, t.bn) <= 1.25 * actual:
            chosen = t
            break
    bk = min(chosen.bk, -(-c.k.size // 4) * 4)
    return replace(chosen, bk=bk, unroll=bk)


# kernel -----------------------------------------------------------------------------------
class _Epilogue(loopnest.LoopNestBuilder):
    """The loop-nest value machinery with the einsum's value given (one accumulator lane)."""

    def __init__(self, group: FusionGroup, outline: KernelOutline, einsum: Node) -> None:
        super().__init__(group, outline)
        self.einsum = einsum
        self.result: Expr = idx(0)

    def value(self, node: Node, coords: tuple[Expr, ...]) -> Expr:
        if node is self.einsum:
            return self.result
        return super().value(node, coords)


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


def _all(conds: list[Expr]) -> Expr | None:
    out = None
    for c in conds:
        out = c if out is None else Bin("&&", out, c)
    return out


class _Builder:
    def __init__(self, group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
                 einsum: Node, c: Contraction, tiles: Tiles) -> None:
        self.group, self.outline, self.kind, self.c, self.t = group, outline, kind, c, tiles
        self.epi = _Epilogue(group, outline, einsum)
        self.x_arg = self.epi.arg_of[einsum.srcs[c.x]]
        self.y_arg = self.epi.arg_of[einsum.srcs[1 - c.x]]
        self.body: list[Stmt] = []
        self.dtype = c.dtype

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

        # copy along the more contiguous index (stride 0 counts as none): coalesced reads
        k_major = (ks or math.inf) < (fs or math.inf)
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

    def load(self, s: _Side, f0: Expr, rf: Expr, kt: Expr, rk: Expr) -> Expr:
        """The tile element(s) at (rf, rk) of the K step at ``kt``, zero outside the operand."""
        f, k = add(f0, rf), add(kt, rk)
        at = add(s.base, add(mul(f, idx(s.free_stride)), mul(k, idx(s.k_stride))))
        value = (Load(s.arg, at) if s.lanes == 1 else VectorLoad(s.arg, div(at, s.lanes),
                                                                 s.lanes))
        guard = _all(([Bin("<", f, idx(s.extent))] if s.extent % s.tile else [])
                     + ([Bin("<", k, idx(self.c.k.size))] if self.c.k.size % self.t.bk else []))
        return value if guard is None else Cond(guard, value, self.zero(s.lanes))

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

    def compute(self, acc: list[list[Var]], ty: Expr, tx: Expr) -> list[Stmt]:
        """The outer products of one K step of ``bk`` (``unroll`` per loop iteration)."""
        t, dt = self.t, self.dtype
        lda, ldb = self.sx.ld, self.sy.ld
        kk = Var("kk") if t.unroll < t.bk else idx(0)
        out: list[Stmt] = []
        for u in range(t.unroll):
            k = add(kk, idx(u))
            a = [Var(f"a{u}_{s}") for s in range(t.sm)]
            b = [Var(f"b{u}_{w}") for w in range(t.sn)]
            for s in range(t.sm):
                at = add(add(mul(k, idx(lda // t.vm)), idx(s * t.wy)), ty)
                src = Load("x_tile", at) if t.vm == 1 else VectorLoad("x_tile", at, t.vm)
                out.append(Let(a[s].name, dt, src, lanes=t.vm))
            for w in range(t.sn):
                at = add(add(mul(k, idx(ldb // t.vn)), idx(w * t.wx)), tx)
                src = Load("y_tile", at) if t.vn == 1 else VectorLoad("y_tile", at, t.vn)
                out.append(Let(b[w].name, dt, src, lanes=t.vn))
            for s in range(t.sm):
                for r in range(t.vm):
                    av: Expr = a[s] if t.vm == 1 else Lane(a[s], r)
                    if t.vn > 1:
                        av = Splat(dt, t.vn, av)
                    for w in range(t.sn):
                        cur = acc[s * t.vm + r][w]
                        out.append(Assign(cur.name, Call("fma", (av, b[w], cur))))
        if t.unroll < t.bk:
            return [For("kk", idx(0), idx(t.bk), tuple(out), step=t.unroll)]
        return out

    def build(self) -> Kernel:
        c, t, dt = self.c, self.t, self.dtype
        tiles_m, tiles_n = -(-c.m.size // t.bm), -(-c.n.size // t.bn)
        tid = self.let("tid", Id("get_local_id", 0))
        tx = self.let("tx", mod(tid, t.wx))
        ty = self.let("ty", div(tid, t.wx))
        g = self.let("grp", Id("get_group_id", 0))
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
        m0 = self.let("m0", mul(tm, idx(t.bm)))
        n0 = self.let("n0", mul(tn, idx(t.bn)))
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
        align = max(t.vm, t.vn, self.sx.lanes, self.sy.lanes) * dt.itemsize
        self.body.append(LocalArray("x_tile", dt, t.bk * self.sx.ld, align))
        self.body.append(LocalArray("y_tile", dt, t.bk * self.sy.ld, align))
        acc = [[self.let(f"acc_{i}_{w}", self.zero(t.vn), dt, t.vn, mutable=True)
                for w in range(t.sn)] for i in range(t.vm * t.sm)]
        kt = Var("kt")
        compute = self.compute(acc, ty, tx)
        per_x, per_y = self.slots(self.sx)[1], self.slots(self.sy)[1]
        if t.prefetch and per_x * per_y <= 16:
            loop = self.prefetched(m0, n0, tid, compute)
        else:
            loop = (self.copy_direct(self.sx, m0, kt, tid)
                    + self.copy_direct(self.sy, n0, kt, tid) + [Barrier()] + compute
                    + [Barrier()])
        self.body.append(For("kt", idx(0), idx(c.k.size), tuple(loop), step=t.bk))
        self.stores(acc, m0, n0, tx, ty, bcoords, bases["out"])
        return Kernel(self.outline.entry, self.outline.work_item, self.kind, self.group.domain,
                      tuple(self.epi.args + self.out_args), tuple(self.body),
                      LaunchGeometry((c.batch_size * tiles_m * tiles_n * t.threads,),
                                     (t.threads,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True)

    def prefetched(self, m0: Expr, n0: Expr, tid: Expr, compute: list[Stmt]) -> list[Stmt]:
        """Loop body that stores the registers loaded last step, then loads the next step."""
        kt, t = Var("kt"), self.t
        store: list[Stmt] = []
        fetch: list[Stmt] = []
        for s, f0 in ((self.sx, m0), (self.sy, n0)):
            count, per = self.slots(s)
            for i in range(per):
                v = add(tid, idx(i * t.threads))
                rf = self.let(f"{s.local}_f{i}", self.slot_coords(s, v)[0])
                rk = self.let(f"{s.local}_k{i}", self.slot_coords(s, v)[1])
                reg = f"{s.local}_r{i}"
                self.let(reg, self.load(s, f0, rf, idx(0), rk), self.dtype, s.lanes, True)
                st = self.store_local(s, rf, rk, Var(reg))
                nxt = Assign(reg, self.load(s, f0, rf, add(kt, idx(t.bk)), rk))
                if count % t.threads:
                    ok = Bin("<", v, idx(count))
                    st, nxt = [If(ok, tuple(st))], If(ok, (nxt,))
                store += st
                fetch.append(nxt)
        more = Bin("<", add(kt, idx(t.bk)), idx(self.c.k.size))
        return store + [Barrier(), If(more, tuple(fetch))] + compute + [Barrier()]

    def stores(self, acc: list[list[Var]], m0: Expr, n0: Expr, tx: Expr, ty: Expr,
               bcoords: list[Expr], obase: Expr) -> None:
        """Epilogue and stores of every accumulator, guarded where tiles overhang."""
        c, t, dt = self.c, self.t, self.dtype
        self.out_args = [KernelArg(f"out{i}", n.type.dtype, True, slot) for i, (n, slot) in
                         enumerate(zip(self.group.outputs, self.outline.output_slots,
                                       strict=True))]
        plain = self.group.outputs == (self.epi.einsum,)
        vector = (t.vn > 1 and c.n.out == 1 and c.n.size % t.vn == 0 and c.m.out % t.vn == 0
                  and all(d.out % t.vn == 0 for d in c.batch))
        cols = [self.let(f"col{w}", add(n0, add(idx(w * t.wx * t.vn), mul(tx, idx(t.vn)))))
                for w in range(t.sn)]
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
                    for lane in range(t.vn):
                        col = add(cols[w], idx(lane))
                        self.epi.result = acc[i][w] if t.vn == 1 else Lane(acc[i][w], lane)
                        coords = self.coords(bcoords, row, col) if not plain else ()
                        for o, node in enumerate(self.group.outputs):
                            lanes[o].append(self.epi.value(node, coords))
                    counter = em.counter
                    body: list[Stmt] = list(em.scopes[0].body)
                    if vector:
                        body += [VectorStore(f"out{o}", div(at, t.vn), dt, tuple(vals))
                                 for o, vals in enumerate(lanes)]
                        guard = _all(row_ok + ([Bin("<", cols[w], idx(c.n.size))]
                                               if c.n.size % t.bn else []))
                    else:
                        guard = _all(row_ok)
                        for lane in range(t.vn):
                            put = [Store(f"out{o}", add(at, idx(lane * c.n.out)), vals[lane])
                                   for o, vals in enumerate(lanes)]
                            col_ok = Bin("<", add(cols[w], idx(lane)), idx(c.n.size))
                            body += [If(col_ok, tuple(put))] if c.n.size % t.bn else put
                    self.body += [If(guard, tuple(body))] if guard is not None else body

    def coords(self, bcoords: list[Expr], row: Expr, col: Expr) -> tuple[Expr, ...]:
        """Output coordinates of the element at flattened (row, col)."""
        out = []
        for cls, i, inner, size in self.c.coords:
            if cls == "b":
                out.append(bcoords[i])
            elif cls == "1":
                out.append(idx(0))
            else:
                extent = self.c.m.size if cls == "m" else self.c.n.size
                flat = div(row if cls == "m" else col, inner)
                out.append(flat if inner * size == extent else mod(flat, size))
        return tuple(out)


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, tiles: Tiles | None = None) -> tuple[Kernel, ...]:
    """The tiled kernel of an accepted contraction group (``tiles``: override the heuristic)."""
    found = analyse(group)
    if isinstance(found, str):
        raise ValueError(f"tiled-contraction cannot take this group: {found}")
    einsum, form = found
    chosen = tiles or choose_tiles(form, target)
    return (_Builder(group, outline, kind, einsum, form, chosen).build(),)


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    return not isinstance(analyse(group), str)


register_generator(Generator(
    "tiled-contraction",
    "two-operand einsums that are batched matrix products: local-memory tiles, register "
    "blocks, vector loads, tile sizes from the target and shape, elementwise epilogue",
    accepts, build,
))
