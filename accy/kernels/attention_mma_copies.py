"""The f32 attention kernels' key tiles copied through registers (``mma-attention-tf32`` /
``-3xtf32``): each work-item loads its rows of the next key tile while this one computes, and
stores them into the other of two local buffers after it (f16 copies by ``cp.async``:
:meth:`accy.kernels.attention_mma._Builder.async_loop`)."""

from __future__ import annotations

from accy.ir.types import DType
from accy.kernels.attention_mma_plan import local_row
from accy.kernels.attention_plan import Side
from accy.kernels.exprs import const
from accy.kernels.ir import (
    INDEX,
    Assign,
    Barrier,
    Bin,
    Cond,
    Expr,
    For,
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

F32 = DType.f32
ZERO = const(0.0, F32)


class RegisterCopies:
    """Mixed into the attention builder: needs its ``a``, ``t``, ``lid``, ``kb``, ``vb``,
    ``scores``, ``sizes``, :meth:`tile` and :meth:`tile_count`."""

    def slots(self, side: str) -> tuple[Side, int, int, int]:
        """(side, features, lanes, copy slots per work-item) of K ("k") or V ("v")."""
        a, t = self.a, self.t
        s, feats, w = (a.k, a.d, t.k_lanes) if side == "k" else (a.v, a.dv, t.v_lanes)
        return s, feats, w, -(-t.bk * feats // w // t.threads)

    def fetch(self, out: list[Stmt], k0: Expr, first: bool) -> None:
        """Load the rows of the key tile at ``k0`` into this work-item's registers (zeros
        past the keys, or past the tile where the slots do not divide it)."""
        a, t = self.a, self.t
        for side in ("k", "v"):
            s, feats, w, count = self.slots(side)
            for i in range(count):
                slot = add(self.lid, idx(i * t.threads))
                key, col = div(slot, feats // w), mul(mod(slot, feats // w), idx(w))
                at = add(self.kb if side == "k" else self.vb,
                         add(mul(add(k0, key), idx(s.seq)), mul(col, idx(s.feature))))
                src = self.scores.arg_of[s.node]
                value: Expr = Load(src, at) if w == 1 else VectorLoad(src, div(at, w), w)
                ok = [Bin("<", add(k0, key), idx(a.nk))] if a.nk % t.bk else []
                if (t.bk * feats // w) % t.threads:
                    ok.append(Bin("<", key, idx(t.bk)))
                if (cond := all_of(ok)) is not None:
                    value = Cond(cond, value, ZERO if w == 1 else Splat(F32, w, ZERO))
                name = f"fa_{side}r{i}"
                out.append(Let(name, F32, value, True, w) if first else Assign(name, value))

    def put(self, out: list[Stmt], stage: Expr) -> None:
        """Store the fetched rows into buffer ``stage`` of the local tiles."""
        t = self.t
        for side in ("k", "v"):
            _, feats, w, count = self.slots(side)
            ld, buf = local_row(feats), f"{side}_tile"
            for i in range(count):
                slot = add(self.lid, idx(i * t.threads))
                key, col = div(slot, feats // w), mul(mod(slot, feats // w), idx(w))
                at = add(mul(stage, idx(self.sizes[side])), add(mul(key, idx(ld)), col))
                name = f"fa_{side}r{i}"
                store: Stmt = (Store(buf, at, Var(name)) if w == 1 else VectorStore(
                    buf, div(at, w), F32, tuple(Lane(Var(name), e) for e in range(w))))
                if (t.bk * feats // w) % t.threads:
                    store = If(Bin("<", key, idx(t.bk)), (store,))
                out.append(store)

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
        loop: list[Stmt] = [Let("cur", INDEX, mod(kt, 2)), If(more, tuple(prefetch))]
        loop += self.tile(k0, Var("cur"))
        loop += [If(more, tuple(store)), Barrier()]
        body.append(For("kt", idx(0), count, tuple(loop)))
        return body
