"""The f32 attention kernels' key tiles copied through registers (``mma-attention-tf32`` /
``-3xtf32``): each work-item loads its rows of the next key tile while this one computes, and
stores them into the other of two local buffers after it (f16 copies by ``cp.async``:
:meth:`accy.kernels.attention_mma._Builder.async_loop`)."""

from __future__ import annotations

from accy.ir.types import DType
from accy.kernels.attention_plan import Side
from accy.kernels.exprs import const
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Cond,
    Expr,
    If,
    Lane,
    Let,
    Load,
    Splat,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorStore,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_ptx import tf32_registers

F32 = DType.f32
ZERO = const(0.0, F32)


class RegisterCopies:
    """Mixed into the attention builder: needs its ``a``, ``t``, ``lid``, ``kb``, ``vb``,
    ``scores``, ``ld``, ``sizes``, ``big_cvt``, :meth:`tile` and :meth:`tile_count`."""

    def slots(self, side: str) -> tuple[Side, int, int, int]:
        """(side, features, lanes, copy slots per work-item) of K ("k") or V ("v"): a slot
        holds ``lanes`` elements (the loads' width), or under split tiles 8 (:meth:`pieces`)."""
        a, t = self.a, self.t
        s, feats, w = (a.k, a.d, t.k_lanes) if side == "k" else (a.v, a.dv, t.v_lanes)
        return s, feats, w, -(-self.all_slots(feats, w) // t.threads)

    def all_slots(self, feats: int, w: int) -> int:
        """Copy slots of a key tile of ``feats`` features copied ``w`` at a time."""
        return self.t.bk * feats // (8 if self.t.split else w)

    def pieces(self, side: str, slot: Expr) -> list[tuple[Expr, Expr]]:
        """The (key, first feature) of each run of consecutive features copy slot ``slot``
        of ``side`` holds: one run of the copies' width, or under split tiles two of 4, the
        elements whose parts one local word group holds (:func:`split_rows`): K's features
        c and c + 4 of a key (c a multiple of 8), V's features c of keys 2p and 2p + 1."""
        feats, w = self.slots(side)[1:3]
        if not self.t.split:
            return [(div(slot, feats // w), mul(mod(slot, feats // w), idx(w)))]
        if side == "k":
            key, col = div(slot, feats // 8), mul(mod(slot, feats // 8), idx(8))
            return [(key, col), (key, add(col, idx(4)))]
        key, col = mul(div(slot, feats // 4), idx(2)), mul(mod(slot, feats // 4), idx(4))
        return [(key, col), (add(key, idx(1)), col)]

    def partial(self, side: str) -> bool:
        """Whether the work-items' last slots of ``side`` pass the tile's end."""
        return bool(self.all_slots(*self.slots(side)[1:3]) % self.t.threads)

    def registers(self, side: str, i: int, h: int) -> list[str]:
        """The registers piece ``h`` of this work-item's slot ``i`` is loaded into: a vector,
        or a scalar an element."""
        name, w = f"fa_{side}r{i}" + (f"_{h}" if self.t.split else ""), self.slots(side)[2]
        return [f"{name}_{e}" for e in range(4)] if self.t.split and w == 1 else [name]

    def fetched(self, side: str, i: int, h: int) -> list[Expr]:
        """The elements of piece ``h`` of this work-item's slot ``i``, as registers hold them."""
        w = self.slots(side)[2]
        names = self.registers(side, i, h)
        return [Lane(Var(names[0]), e) for e in range(w)] if w > 1 else [Var(n) for n in names]

    def fetch(self, out: list[Stmt], k0: Expr, first: bool) -> None:
        """Load the rows of the key tile at ``k0`` into this work-item's registers (zeros
        past the keys, or past the tile where the slots do not divide it)."""
        a, t = self.a, self.t
        for side in ("k", "v"):
            s, feats, w, count = self.slots(side)
            src = self.scores.arg_of[s.node]
            for i in range(count):
                pieces = self.pieces(side, add(self.lid, idx(i * t.threads)))
                for h, (key, col) in enumerate(pieces):
                    ok = [Bin("<", add(k0, key), idx(a.nk))] if a.nk % t.bk else []
                    if self.partial(side):
                        ok.append(Bin("<", pieces[0][0], idx(t.bk)))
                    at = add(self.kb if side == "k" else self.vb,
                             add(mul(add(k0, key), idx(s.seq)), mul(col, idx(s.feature))))
                    names = self.registers(side, i, h)
                    values: list[Expr] = ([VectorLoad(src, div(at, w), w)] if w > 1 else [
                        Load(src, add(at, idx(e * s.feature))) for e in range(len(names))])
                    cond = all_of(ok)
                    for name, value in zip(names, values, strict=True):
                        if cond is not None:
                            value = Cond(cond, value, ZERO if w == 1 else Splat(F32, w, ZERO))
                        out.append(Let(name, F32, value, True, w) if first
                                   else Assign(name, value))

    def put(self, out: list[Stmt], stage: Expr) -> None:
        """Store the fetched rows into buffer ``stage`` of the local tiles (split tiles: each
        element's big and small TF32 parts, :func:`split_rows`)."""
        t = self.t
        for side in ("k", "v"):
            feats, w, count = self.slots(side)[1:]
            buf = f"{side}_tile"
            for i in range(count):
                pieces = self.pieces(side, add(self.lid, idx(i * t.threads)))
                key, col = pieces[0]
                if t.split:
                    stores = self.split_stores(side, i, add(
                        div(mul(stage, idx(self.sizes[side])), 4), self.group_of(side, key, col)))
                else:
                    at = add(mul(stage, idx(self.sizes[side])),
                             add(mul(key, idx(self.ld[side])), col))
                    regs = self.fetched(side, i, 0)
                    stores = [Store(buf, at, regs[0]) if w == 1 else VectorStore(
                        buf, div(at, w), F32, tuple(regs))]
                if self.partial(side):
                    stores = [If(Bin("<", key, idx(t.bk)), tuple(stores))]
                out += stores

    def group_of(self, side: str, key: Expr, col: Expr) -> Expr:
        """Split tiles: the 16-byte group of a stage (:func:`split_rows`) from which a slot's
        parts go, its first piece at ``key`` and feature ``col`` (K: ``col`` a multiple of 8,
        4 groups of 8 features; V: ``key`` even, a group a feature of each key pair)."""
        row = self.ld[side] // 4
        if side == "k":
            return add(mul(key, idx(row)), div(col, 2))
        return add(mul(div(key, 2), idx(row)), col)

    def split_stores(self, side: str, i: int, group: Expr) -> list[Stmt]:
        """Slot ``i``'s two pieces split into big and small TF32 parts
        (:func:`mma_ptx.tf32_registers`) and stored from 16-byte group ``group`` on: group
        ``e`` holds element ``e`` of each piece, their big parts then their small ones."""
        out: list[Stmt] = []
        parts = []
        for h in range(2):
            names = []
            for e, value in enumerate(self.fetched(side, i, h)):
                names.append(f"fa_{side}x{i}_{h}_{e}")
                out += tf32_registers(names[-1], value, "3xtf32", self.big_cvt)
            parts.append(names)
        return out + [VectorStore(f"{side}_tile", add(group, idx(e)), DType.i32, (
            Var(parts[0][e]), Var(parts[1][e]), Var(f"{parts[0][e]}_s"),
            Var(f"{parts[1][e]}_s"))) for e in range(4)]

    def key_loop(self) -> list[Stmt]:
        """f32: tile 0 copied first; then per tile: the next tile's rows into registers,
        this tile's compute, those rows into the other buffer, one barrier."""
        t, body = self.t, []
        count = self.tile_count(body)
        self.fetch(body, idx(0), first=True)
        self.put(body, idx(0))
        body.append(Barrier())
        kt = Var("kt")
        more = Bin("<", add(kt, idx(1)), count)
        k0 = mul(kt, idx(t.bk))
        prefetch: list[Stmt] = []
        self.fetch(prefetch, add(k0, idx(t.bk)), first=False)
        store: list[Stmt] = []
        self.put(store, Bin("-", idx(1), Var("cur")))
        first: list[Stmt] = [Let("cur", INDEX, mod(kt, 2)), If(more, tuple(prefetch))]
        return body + self.key_tiles(count, lambda masked: [
            *first, *self.tile(k0, Var("cur"), masked), If(more, tuple(store)), Barrier()])
