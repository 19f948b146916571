"""mma-attention-tf32 / -3xtf32 / -f16: an attention group (:mod:`accy.kernels.attention_plan`) as
one kernel on tensor cores, FlashAttention-2's way: the scores and probabilities stay in
``mma.sync`` accumulator registers.

A work-group of 4 or 8 warps (:data:`~accy.kernels.attention_mma_plan.FORMS`) takes 16 or 32
queries a warp of one batch, one or two m16 fragment rows, their query fragments in registers.
Key tiles of ``bk`` go through local memory: f32 through registers into rows padded by 4 words
(scalar fragment loads hit 32 banks), the next tile loaded while this one computes (3xtf32,
where twice the words fit: split into big and small TF32 parts as copied, each B fragment's
register pairs one 16-byte load, :func:`~accy.kernels.attention_mma_plan.split_rows`); f16 by
``cp.async`` into ``stages`` buffers of half-pair words (rows an odd number of 16-byte chunks),
read by ``ldmatrix`` (``.trans`` for V). Per tile and fragment row a warp computes ``S = Q Kᵀ``
(m16n8k8 TF32 or m16n8k16 f16, each K and V fragment loaded once for both rows; K's rows are
the "col" B operand as stored), the score chain at each accumulator's coordinates (keys past
the end: -inf), each row's maximum over its registers and the four lanes sharing the row
(``shfl.sync.bfly``), the rescale of the running sums and outputs (``Tiles.lazy``: skipped by
a warp none of whose rows' maxima rose by over ``2^RESCALE`` in exp, the rows keeping the old
one, as FlashAttention-4), and ``P V`` with the probabilities straight from the scores'
registers: TF32 lane ``4g + t`` holds keys ``2t, 2t + 1`` of rows ``g, g + 8``, A's columns
``t, t + 4`` once a tile's keys are in the order ``0, 2, 4, 6, 1, 3, 5, 7`` (V's rows read so);
f16 packs the pairs (``cvt.rn.f16x2``) into m16n8k16 A registers as they are, exp is one fma
and ``ex2.approx`` (a positive scale of f32 scores folded into its coefficient:
:func:`~accy.kernels.attention_mma_plan.folded_scale`). A maximum that is not finite shifts by
0 (as the row softmax). A constant causal mask equal to ``key <= query + o``
(:func:`~accy.kernels.attention_plan.triangle`) is compared by the indices instead of read
(f16: the scale folded through it), and where ``split_masked`` only in the key tiles it cuts
(:meth:`_Builder.key_tiles`); the tiles past it are skipped (``kstop``). ``O / l`` goes
through the epilogue; queries past the end compute the last query's row and store nothing.

``tf32`` rounds the operands to TF32; ``3xtf32`` (the default ``f32`` policy's, where the
saturating rounding was found) splits Q, K, P and V into big and small parts, three products
each (:func:`accy.kernels.mma_ptx.tf32_products`); f16 (any policy) rounds the probabilities to
f16 for ``P V`` as the program's cast does, its scale and softmax in f32 as dtype-legalization
leaves them; where their registers fit, f16's row sums ``l`` are tensor-core products too (P
against a B of f16 ones, one more m16n8k16 a key step and fragment row: the f32 sum of the f16
probabilities P V multiplies, each lane holding its rows' whole sums), in place of a chain of
adds a score and the sums' shuffles. Selection (:func:`~accy.kernels.attention_mma_plan.plan`):
the probe found the tensor cores (f16: and ``cp.async``), features multiples of 8 up to
:data:`~accy.kernels.attention_mma_plan.MAX_FEATURES` (f16: padded to 16 in the tiles, zeros
copied into K's and the query registers), f16 K and V rows contiguous and 16-byte aligned, two
key tiles in local memory; ``fusion-planning{attention=auto}`` merges attention where
kernelization's precision takes this form (:func:`~accy.passes.dispatch.attention_fusion.pays`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from accy.ir.types import DType
from accy.kernels import exprs, loopnest
from accy.kernels.attention import _Builder as _AttentionBuilder
from accy.kernels.attention_cpu import key_stop_var
from accy.kernels.attention_mma_copies import F32, ZERO, RegisterCopies
from accy.kernels.attention_mma_plan import (
    KINDS,
    POLICIES,
    RESCALE,
    Tiles,
    folded_scale,
    group_order,
    local_row,
    local_row16,
    padded_features,
    plan,
    split_rows,
)
from accy.kernels.attention_plan import Attention, triangle
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
    InlineAsm,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Load,
    LocalArray,
    Stmt,
    Store,
    Var,
    VectorLoad,
    add,
    all_of,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.mma_frags import VectorLoads
from accy.kernels.mma_layout import LDMATRIX, LDMATRIX_T
from accy.kernels.mma_ptx import (
    CP_COMMIT,
    CP_WAIT,
    CVT_F16X2,
    CVT_TF32,
    EX2_APPROX,
    MMA_F16,
    SHFL_BFLY,
    TF32_BIG_SAT,
    cp_async,
    tf32_products,
    tf32_registers,
)
from accy.kernels.workgroup import tree
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind
from accy.target import (
    TF32_SATFINITE,
    TargetProfile,
)

LOG2E = 1.4426950408889634
ONE = exprs.const(1.0, F32)
ONES_F16X2 = 0x3C003C00  # two f16 ones, a register of an mma's B fragment


class _Builder(RegisterCopies, _AttentionBuilder):
    def __init__(self, group: FusionGroup, outline: KernelOutline, a: Attention, t: Tiles,
                 policy: str, target: TargetProfile) -> None:
        super().__init__(group, outline, a, t)  # type: ignore[arg-type]
        self.policy, self.f16, self.split = policy, policy == "f16", policy == "3xtf32"
        self.big_cvt = (TF32_BIG_SAT if policy == "3xtf32"
                        and TF32_SATFINITE in target.tensor_cores else CVT_TF32)
        self.step = 16 if self.f16 else 8  # the K of one mma
        self.d = padded_features(a.d, self.f16)  # head features as tiles and registers hold
        self.scale = folded_scale(a) if self.f16 else None
        # a causal mask compared by the indices (triangle), the chain then its selected value
        self.tri = triangle(a)
        self.chain = a.softmax.srcs[0] if self.tri is None else a.softmax.srcs[0].srcs[1]
        self.coef = LOG2E * (self.scale or 1.0)  # log2 e a score, in units of S where folded
        # how far a row's maximum (in the units of its scores) rises before it moves if lazy
        self.rise = exprs.const(RESCALE / self.coef, F32)

    def operand(self, out: list[Stmt], name: str, value: Expr, high: Expr | None = None
                ) -> str:
        """A fragment register: TF32 (split under 3xtf32) of ``value``, or under f16 the
        halves of ``value`` (low) and ``high``, rounded to nearest even."""
        if not self.f16:
            out += tf32_registers(name, value, self.policy, self.big_cvt)
            return name
        out += [Let(name, DType.i32, exprs.const(0, DType.i32), True),
                InlineAsm(CVT_F16X2, (("=r", name),), (("f", high), ("f", value)), False)]
        return name

    def exp(self, out: list[Stmt], prefix: str, x: Expr, shift: Expr) -> Var:
        """``exp(x - shift)``; f16: ``2^(x log2 e - shift log2 e)``, one fma and PTX
        ``ex2.approx.ftz`` (relative error about 2^-19 for scores within 2^5 of the
        maximum, far below f16's 2^-11; -inf gives 0)."""
        if not self.f16:
            return self.let(out, prefix, Call("exp", (Bin("-", x, shift),)), F32)
        name = self.fresh(prefix)
        arg = Call("fma", (x, exprs.const(self.coef, F32), Bin("*", shift, exprs.const(
            -self.coef, F32))))
        out += [Let(name, F32, ZERO, True),
                InlineAsm(EX2_APPROX, (("=f", name),), (("f", arg),), False)]
        return Var(name)

    def pair(self, out: list[Stmt], name: str, load) -> str:
        """A register of the value ``load(0)`` (f16: with ``load(1)``, its next column)."""
        return self.operand(out, name, load(0), load(1) if self.f16 else None)

    def products(self, acc: str, a: list[str], b: list[str]) -> list[Stmt]:
        """One fragment pair's mma.sync into accumulators ``acc``_0..3."""
        accs = [f"{acc}_{r}" for r in range(4)]
        if self.f16:
            return [InlineAsm(MMA_F16, tuple(("+f", c) for c in accs),
                              tuple(("r", Var(v)) for v in a + b))]
        return tf32_products(accs, a, b, self.split, self.split)

    def shfl(self, out: list[Stmt], x: Expr, mask: int) -> Expr:
        """``x`` of lane ``lane ^ mask``."""
        name = self.fresh("fa_x")
        out += [Let(name, DType.i32, exprs.const(0, DType.i32), True),
                InlineAsm(SHFL_BFLY.format(mask), (("=r", name),),
                          (("r", Call("bitcast_i32", (x,))),))]
        return Call("bitcast_f32", (Var(name),))

    def quad(self, out: list[Stmt], x: Expr, f) -> Var:
        """``f`` over ``x`` of the four lanes sharing a fragment row."""
        for mask in (1, 2):
            x = self.let(out, "fa_r", f(x, self.shfl(out, x, mask)), F32)
        return x  # type: ignore[return-value]

    def build(self, kind: ScheduleKind) -> Kernel:
        a, t, body = self.a, self.t, self.body
        tiles_q = -(-a.nq // t.queries)
        groups = math.prod(a.batch) * tiles_q
        lid = self.let(body, "lid", Id("local", 0))
        lane = self.let(body, "lane", mod(lid, 32))
        g, tt = self.let(body, "g", div(lane, 4)), self.let(body, "t", mod(lane, 4))
        grp = self.grp = self.let(body, "grp", Id("group", 0))
        bh, qt = group_order(grp, math.prod(a.batch), tiles_q, self.tri is not None)
        q0 = self.q0 = self.let(body, "q0", mul(qt, idx(t.queries)))
        bcoords = self.batch_coords(body, bh)
        # each fragment row's two rows of queries (g and g + 8), and the same clamped into the
        # queries: rows[2 i + h] is row g + 8 h of fragment row i
        ra = self.let(body, "ra", add(add(q0, mul(div(lid, 32), idx(16 * t.rows))), g))
        rows = tuple(ra if i == h == 0 else self.let(body, "rb", add(ra, idx(16 * i + 8 * h)))
                     for i in range(t.rows) for h in range(2))
        clamped = rows if a.nq % t.queries == 0 else tuple(
            self.let(body, "rc", Call("min", (r, idx(a.nq - 1)))) for r in rows)
        args = self.scores.arg_of
        self.kb = self.let(body, "kb", self.base(a.k, bcoords, None))
        self.vb = self.let(body, "vb", self.base(a.v, bcoords, None))
        # the query fragments: a0..a3 at (row g, col t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
        # (f16: columns 2t, 2t + 1 and 2t + 8, 2t + 9)
        col = mul(tt, idx(2)) if self.f16 else tt
        qbase = [self.let(body, "qb", self.base(a.q, bcoords, r)) for r in clamped]
        for i in range(t.rows):
            for kk in range(self.d // self.step):
                for r in range(4):
                    c0 = self.step * kk + self.step // 2 * (r // 2)
                    self.pair(body, f"fa_q{i}_{kk}_{r}", lambda e, c0=c0, b=qbase[2 * i + r % 2]:
                              self.query(Load(args[a.q.node], add(b, mul(
                                  add(col, idx(c0 + e)), idx(a.q.feature)))), c0, col, e))
        self.m = [self.let(body, "m", exprs.const(-np.inf, F32), F32, mutable=True)
                  for _ in rows]
        self.l = [] if t.sums else [
            self.let(body, "l", ZERO, F32, mutable=True) for _ in rows]
        for i in range(t.rows):
            for n in range(a.dv // 8):
                for r in range(4):
                    body.append(Let(f"fa_o{i}_{n}_{r}", F32, ZERO, True))
        if t.sums:  # the row sums' accumulators, and B = two f16 ones a register
            body += [Let(f"fa_l{i}_{r}", F32, ZERO, True)
                     for i in range(t.rows) for r in range(4)]
            body.append(Let("fa_ones", DType.i32, exprs.const(ONES_F16X2, DType.i32)))
        self.layout()
        body += self.local_arrays()
        self.lanes(body, lane, g, tt, col)
        self.lid, self.tt, self.rows, self.clamped = lid, tt, rows, clamped
        self.bcoords = bcoords
        self.kstop = key_stop_var(self, body, q0, t.queries)
        body += self.async_loop() if self.f16 else self.key_loop()
        body += self.stores(kind)
        out = KernelArg("out0", a.stored.type.dtype, True, self.outline.output_slots[0])
        copied = frozenset(args[s.node] for s in (a.k, a.v)) if self.f16 else frozenset()
        return Kernel(self.outline.entry, self.outline.work_item, kind, self.group.domain,
                      (*self.scores.args, out), tuple(body),
                      LaunchGeometry((groups * t.threads,), (t.threads,)),
                      loopnest.implemented_ops(self.group), fixed_local_size=True,
                      global_args=copied)

    def query(self, load: Expr, c0: int, col: Expr, e: int) -> Expr:
        """Query feature ``col + c0 + e``: zero past the head features (f16: padded)."""
        real = c0 + self.step // 2 <= self.a.d  # the fragment's half, wherever col is
        return load if real else Cond(Bin("<", add(col, idx(c0 + e)), idx(self.a.d)), load, ZERO)

    def layout(self) -> None:
        """The local tiles' rows (``ld``, words) and stages (``sizes``, words)."""
        a, t = self.a, self.t
        dv = padded_features(a.dv, self.f16)
        self.ld = ({"k": local_row16(self.d), "v": local_row16(dv)} if self.f16
                   else split_rows(a.d, a.dv) if t.split
                   else {"k": local_row(a.d), "v": local_row(a.dv)})
        # words a stage (split V: rows of key pairs), and a step of the fragment loads'
        # indices (split: 16-byte groups)
        self.sizes = {side: (t.bk // 2 if t.split and side == "v" else t.bk) * ld
                      for side, ld in self.ld.items()}
        self.unit = 4 if t.split else 1

    def local_arrays(self) -> list[Stmt]:
        """The K and V tiles' stages (f16: words of half pairs, as cp.async leaves them;
        split: big and small TF32 parts, :func:`split_rows`)."""
        return [LocalArray(f"{side}_tile", DType.i32 if self.f16 or self.t.split else F32,
                           self.t.stages * self.sizes[side], 16) for side in ("k", "v")]

    def split_fragment(self, out: list[Stmt], name: str, buf: str, group: Expr) -> list[str]:
        """Split tiles: a B fragment's two registers (``name``_0, ``name``_1) and their small
        parts (``_s``) from 16-byte group ``group`` of local tile ``buf``, one load."""
        regs = Var(f"{name}_g")
        out.append(Let(regs.name, DType.i32, VectorLoad(buf, group, 4), lanes=4))
        out += [Let(f"{name}_{r}{s}", DType.i32, Lane(regs, 2 * bool(s) + r))
                for s in ("", "_s") for r in range(2)]
        return [f"{name}_0", f"{name}_1"]

    def lanes(self, body: list[Stmt], lane: Var, g: Var, tt: Var, col: Expr) -> None:
        """The local word each lane's fragment loads start from (``k_lane``, ``v_lane``)."""
        ldk, ldv = self.ld["k"], self.ld["v"]
        if self.f16:  # the row each lane gives ldmatrix (matrix j = lane / 8, its row r):
            # K: keys 8 (j / 2) + r at head words 4 (j % 2) (b0, b1 of fragment columns 2p,
            # 2p + 1); V (.trans): keys 8 (j % 2) + r at value words 4 (j / 2)
            j, r = div(lane, 8), mod(lane, 8)
            self.k_lane = self.let(body, "kl", add(mul(add(mul(div(j, 2), idx(8)), r),
                                                       idx(ldk)), mul(mod(j, 2), idx(4))))
            self.v_lane = self.let(body, "vl", add(mul(add(mul(mod(j, 2), idx(8)), r),
                                                       idx(ldv)), mul(div(j, 2), idx(4))))
        elif self.t.split:  # 16-byte groups: K row g, group t; V row pair t, group g
            self.k_lane = self.let(body, "kl", add(mul(g, idx(ldk // 4)), tt))
            self.v_lane = self.let(body, "vl", add(mul(tt, idx(ldv // 4)), g))
        else:  # K row g at column t; V rows 2t (and 2t + 1) at column g
            self.k_lane = self.let(body, "kl", add(mul(g, idx(ldk)), col))
            self.v_lane = self.let(body, "vl", add(mul(mul(tt, idx(2)), idx(ldv)), g))

    # copies ---------------------------------------------------------------------------
    def tile_count(self, body: list[Stmt]) -> Var:
        end = idx(self.a.nk) if self.kstop is None else self.kstop
        return self.let(body, "tiles", div(add(end, idx(self.t.bk - 1)), self.t.bk))

    def issue(self, stage: Expr, tile: Expr) -> list[Stmt]:
        """f16: the ``cp.async`` copies of key tile ``tile``'s K and V rows into buffer
        ``stage``, 16 bytes each (keys past the end zero-filled)."""
        a, t, out = self.a, self.t, []
        for side, s, feats in (("k", a.k, self.d), ("v", a.v, a.dv)):
            per_row = feats // 8  # K's chunks past its features zero-filled; V's unread
            chunks = t.bk * per_row
            arg = self.scores.arg_of[s.node]
            for i in range(-(-chunks // t.threads)):
                slot = add(self.lid, idx(i * t.threads))
                key, c = div(slot, per_row), mul(mod(slot, per_row), idx(8))
                row = add(mul(tile, idx(t.bk)), key)
                dst = Cast(DType.i32, Cast(INDEX, Bin("+", Var(self.array(side)), add(
                    self.stage_word(side, stage), self.chunk_word(side, key, c)))))
                at = add(self.kb if side == "k" else self.vb, add(mul(row, idx(s.seq)), c))
                real = [Bin("<", row, idx(a.nk))] if a.nk % t.bk else []
                real += [Bin("<", c, idx(a.d))] if side == "k" and feats > a.d else []
                stmt = cp_async(dst, arg, at, 2, 16, all_of(real))
                out.append(If(Bin("<", key, idx(t.bk)), (stmt,)) if chunks % t.threads
                           else stmt)
        return out

    def array(self, side: str) -> str:
        """The local array of ``side``'s tiles."""
        return f"{side}_tile"

    def stage_word(self, side: str, stage: Expr) -> Expr:
        """The first word of buffer ``stage`` of ``side``'s tiles in their array."""
        return mul(stage, idx(self.sizes[side]))

    def chunk_word(self, side: str, key: Expr, c: Expr) -> Expr:
        """The word of a stage of ``side``'s tile where the 16 bytes of key ``key`` from
        feature ``c`` (a multiple of 8) go: rows of ``ld`` words."""
        return add(mul(key, idx(self.ld[side])), div(c, 2))

    # key tiles past tile ``kt`` that iteration ``kt`` reads (wgmma: 1, the next tile's scores)
    lead = 0

    def async_loop(self) -> list[Stmt]:
        """f16: key tiles through ``stages`` buffers filled by ``cp.async``, as the mma
        contractions' pipeline: tiles 0..S-2 issued first, a commit group each; tile ``kt``
        waits until at most S-2 groups (``lead``: S-2-lead, after :meth:`lead_in` on the
        first) are in flight, passes a barrier (every work-item's copies visible, the buffer
        tile ``kt - 1`` read free), issues tile ``kt + S - 1`` into that buffer, then
        computes. Empty groups keep the count uniform."""
        t, body = self.t, []
        count = self.tile_count(body)
        commit = InlineAsm(CP_COMMIT, (), (), True, ("memory",))
        for s in range(t.stages - 1):
            body += [If(Bin("<", idx(s), count), tuple(self.issue(idx(s), idx(s)))), commit]
        if self.lead:
            body += [InlineAsm(CP_WAIT.format(t.stages - 2), (), (), True, ("memory",)),
                     *self.landed(), Barrier(), *self.lead_in()]
        kt = Var("kt")
        nxt = add(kt, idx(t.stages - 1))
        loop: list[Stmt] = [
            InlineAsm(CP_WAIT.format(t.stages - 2 - self.lead), (), (), True, ("memory",)),
            *self.landed(), Barrier(),
            If(Bin("<", nxt, count), tuple(self.issue(mod(nxt, t.stages), nxt))), commit]
        return body + self.key_tiles(count, lambda masked: [
            *loop, *self.tile(mul(kt, idx(t.bk)), mod(kt, t.stages), masked)])

    # where the causal mask is compared by the indices, the tiles it leaves whole in a loop of
    # their own (key_tiles)
    split_masked = True

    def key_tiles(self, count: Expr, make: Callable[[bool], list[Stmt]]) -> list[Stmt]:
        """The loop over key tiles ``kt`` of ``make(masked)``'s body. Where the causal mask is
        compared by the indices (``tri``) and ``split_masked``, the tiles whose keys every
        query of the work-group sees run first without the comparison, then the rest with
        it."""
        if self.tri is None or not self.split_masked:
            return [For("kt", idx(0), count, tuple(make(self.tri is not None)))]
        out: list[Stmt] = []
        seen = Call("max", (add(self.q0, idx(self.tri + 1)), idx(0)))  # keys the first sees
        whole = self.let(out, "whole", Call("min", (count, div(seen, self.t.bk))))
        return [*out, For("kt", idx(0), whole, tuple(make(False))),
                For("kt", whole, count, tuple(make(True)))]

    def landed(self) -> list[Stmt]:
        """What each work-item does once its copies of a tile landed, before the barrier."""
        return []

    def lead_in(self) -> list[Stmt]:
        """Before the loop, where ``lead``: what tile 0 gives ahead of it (wgmma: its scores)."""
        return []

    # one key tile ---------------------------------------------------------------------
    def tile(self, k0: Expr, cur: Expr, masked: bool = True) -> list[Stmt]:
        """One key tile for each of the warp's fragment rows ``i``: each K and V fragment is
        loaded once and taken by every row's mma (``masked``: the causal mask compared, where
        ``tri``)."""
        a, t = self.a, self.t
        frags, fr = t.bk // 8, range(t.rows)
        out = self.score_products(cur)
        # the score chain at each accumulator's (row, key); keys past the end: -inf
        x: dict[tuple[int, int, int], Var] = {}
        for j in range(frags):
            for r in range(4):
                key = self.let(out, "key", add(k0, add(mul(self.tt, idx(2)),
                                                        idx(8 * j + r % 2))))
                for i in fr:
                    at: dict[str, Expr] = {f"b{n}": c for n, c in enumerate(self.bcoords)}
                    # the chain reads its operands (a mask) at keys inside the scores
                    at["q"], at["k"] = self.clamped[2 * i + r // 2], (
                        Call("min", (key, idx(a.nk - 1))) if a.nk % t.bk else key)
                    v = Var(f"fa_s{i}_{j}_{r}") if self.scale else self.through(
                        self.scores, out, Var(f"fa_s{i}_{j}_{r}"), self.chain,
                        tuple(at[role] for role in a.score_roles))
                    if self.tri is not None and masked:  # the causal mask, by the indices
                        v = Cond(Bin("<=", key, add(at["q"], idx(self.tri))), v,
                                 exprs.const(-np.inf, F32))
                    if a.nk % t.bk:
                        v = Cond(Bin("<", key, idx(a.nk)), v, exprs.const(-np.inf, F32))
                    x[i, j, r] = self.let(out, "x", v, F32)
        p: dict[tuple[int, int, int], Var] = {}
        alphas, moved = [], []
        for i in fr:
            for h in range(2):  # rows g (registers 0, 1) and g + 8 (2, 3)
                # pairwise, so the maxima's dependent steps are log2 of the registers, not all
                mine = [x[i, j, r] for j in range(frags) for r in (2 * h, 2 * h + 1)]
                top = tree(mine, lambda u, w: Call("fmax", (u, w)))
                top = self.quad(out, self.let(out, "top", top, F32),
                                lambda u, w: Call("fmax", (u, w)))
                m = self.m[2 * i + h]
                up = self.let(out, "up", Bin(">", Bin("-", top, m), self.rise), DType.bool
                              ) if t.lazy else None
                m_new = self.let(out, "mn", Call("fmax", (m, top)) if up is None else Cond(
                    up, top, m), F32)
                shift = self.let(out, "shift", Cond(Call("isfinite", (m_new,)), m_new, ZERO), F32)
                alpha = self.exp(out, "alpha", m, shift)
                alpha = alpha if up is None else self.let(out, "alpha", Cond(up, alpha, ONE), F32)
                p.update({(i, j, r): self.exp(out, "p", x[i, j, r], shift)
                          for j in range(frags) for r in (2 * h, 2 * h + 1)})
                if self.l:  # else the sums are the tensor cores' (value_products)
                    l = self.l[2 * i + h]
                    ps = [p[i, j, r] for j in range(frags) for r in (2 * h, 2 * h + 1)]
                    total = tree(ps, lambda u, w: Bin("+", u, w))
                    out.append(Assign(l.name, Bin("+", Bin("*", l, alpha), total)))
                out.append(Assign(m.name, m_new))
                alphas.append(alpha)
                moved.append(up)
        rescale = [Assign(o, Bin("*", Var(o), alphas[2 * i + r // 2])) for i in fr for o, r in [
            *((f"fa_o{i}_{n}_{r}", r) for n in range(a.dv // 8) for r in range(4)),
            *((f"fa_l{i}_{r}", r) for r in range(4) if t.sums)]]
        out += [If(all_of(moved, "||"), tuple(rescale))] if t.lazy else rescale
        out += self.value_products(cur, p)
        return out

    def score_products(self, cur: Expr) -> list[Stmt]:
        """``S = Q Kᵀ`` of the key tile in buffer ``cur`` into ``fa_s{i}_{j}_{r}``, each
        fragment row's: B = K rows (keys) at head columns, each K fragment loaded once for
        every row."""
        t, out = self.t, []
        frags, fr = t.bk // 8, range(t.rows)
        koff = self.let(out, "ko", add(mul(cur, idx(self.sizes["k"] // self.unit)),
                                       self.k_lane))
        out += self.zero_scores()
        ldk = self.ld["k"]
        for kk in range(self.d // self.step):
            if self.f16:  # fragment columns 2p, 2p + 1: one ldmatrix of 16 keys
                for p2 in range(frags // 2):
                    out += VectorLoads.ldmatrix(
                        LDMATRIX, "k_tile", add(koff, idx(16 * p2 * ldk + 8 * kk)),
                        [f"fa_k{kk}_{j}_{r}" for j in (2 * p2, 2 * p2 + 1) for r in range(2)])
            for j in range(frags):
                if t.split:  # keys 8j + g, features 8kk + t and 8kk + t + 4
                    b = self.split_fragment(out, f"fa_k{kk}_{j}", "k_tile",
                                            add(koff, idx(2 * j * ldk + 4 * kk)))
                else:
                    b = [f"fa_k{kk}_{j}_{r}" if self.f16 else self.pair(
                        out, f"fa_k{kk}_{j}_{r}", lambda e, o=8 * j * ldk + 8 * kk + 4 * r:
                        Load("k_tile", add(koff, idx(o + e)))) for r in range(2)]
                for i in fr:
                    out += self.products(f"fa_s{i}_{j}",
                                         [f"fa_q{i}_{kk}_{r}" for r in range(4)], b)
        return out

    def zero_scores(self) -> list[Stmt]:
        t = self.t
        return [Let(f"fa_s{i}_{j}_{r}", F32, ZERO, True)
                for i in range(t.rows) for j in range(t.bk // 8) for r in range(4)]

    def p_operands(self, out: list[Stmt], p: dict, kk: int) -> list[list[str]]:
        """The A registers of ``P V``'s k step ``kk``, per fragment row. TF32: a0..a3 = p of
        (row g, key 2t), (g + 8, 2t), (g, 2t + 1), (g + 8, 2t + 1): columns t and t + 4 in the
        key order 0, 2, 4, 6, 1, 3, 5, 7, V's rows 2t, 2t + 1 for B's k rows t, t + 4. f16: the
        pairs of fragments 2kk (keys 2t, 2t + 1 of rows g, g + 8) and 2kk + 1 (keys 8 + 2t,
        9 + 2t), as B takes V's rows 2t, 2t + 1 and 8 + 2t, 9 + 2t."""
        fr = range(self.t.rows)
        if self.f16:
            return [[self.operand(out, f"fa_p{i}_{kk}_{r}", p[i, 2 * kk + r // 2, 2 * (r % 2)],
                                  p[i, 2 * kk + r // 2, 2 * (r % 2) + 1]) for r in range(4)]
                    for i in fr]
        return [[self.operand(out, f"fa_p{i}_{kk}_{r}", p[i, kk, (0, 2, 1, 3)[r]])
                 for r in range(4)] for i in fr]

    def value_products(self, cur: Expr, p: dict) -> list[Stmt]:
        """``O += P V`` of the key tile in buffer ``cur`` from the probabilities ``p`` (by
        fragment row, key fragment, register)."""
        a, t, out = self.a, self.t, []
        fr = range(t.rows)
        ldv = self.ld["v"]
        voff = self.let(out, "vo", add(mul(cur, idx(self.sizes["v"] // self.unit)),
                                       self.v_lane))
        for kk in range(t.bk // self.step):
            pa = self.p_operands(out, p, kk)
            if self.f16:  # value fragments 2q, 2q + 1 of 16 keys: one ldmatrix.trans
                for q2 in range(-(-a.dv // 16)):  # (an odd last fragment's pair unread)
                    out += VectorLoads.ldmatrix(
                        LDMATRIX_T, "v_tile", add(voff, idx(16 * kk * ldv + 8 * q2)),
                        [f"fa_v{kk}_{n}_{r}" for n in (2 * q2, 2 * q2 + 1) for r in range(2)])
            for n in range(a.dv // 8):
                if t.split:  # key pairs 4kk + t, features 8n + g
                    b = self.split_fragment(out, f"fa_v{kk}_{n}", "v_tile",
                                            add(voff, idx(kk * ldv + 8 * n)))
                else:
                    b = [f"fa_v{kk}_{n}_{r}" if self.f16 else self.operand(
                        out, f"fa_v{kk}_{n}_{r}", Load("v_tile", add(
                            voff, idx((8 * kk + r) * ldv + 8 * n)))) for r in range(2)]
                for i in fr:
                    out += self.products(f"fa_o{i}_{n}", pa[i], b)
            if t.sums:
                for i in fr:
                    out += self.products(f"fa_l{i}", pa[i], ["fa_ones", "fa_ones"])
        return out

    def stores(self, kind: ScheduleKind) -> list[Stmt]:
        """``O / l`` through the epilogue into the output, from the accumulators: register
        ``r`` of fragment ``n`` at row ``g`` (``g + 8`` for r >= 2), value ``8n + 2t + r % 2``."""
        a, out = self.a, []
        total = ([self.quad(out, ll, lambda u, w: Bin("+", u, w)) for ll in self.l] or
                 [Var(f"fa_l{h // 2}_{2 * (h % 2)}") for h in range(len(self.rows))])
        inv = [self.let(out, "inv", Bin("/", exprs.const(1.0, F32), s), F32) for s in total]
        dest = KernelArg("out0", a.stored.type.dtype, True, self.outline.output_slots[0])
        for h, row in enumerate(self.rows):  # row g + 8 (h % 2) of fragment row h // 2
            ob = self.let(out, "ob", self.base(a.out, self.bcoords, row))
            rowwise: list[Stmt] = []
            for n in range(a.dv // 8):
                for r in (2 * (h % 2), 2 * (h % 2) + 1):
                    col = self.let(rowwise, "col", add(mul(self.tt, idx(2)),
                                                       idx(8 * n + r % 2)))
                    at = self.out_coords(self.bcoords, row)
                    at["e"] = col
                    v = self.through(self.epilogue, rowwise,
                                     Bin("*", Var(f"fa_o{h // 2}_{n}_{r}"), inv[h]), a.stored,
                                     tuple(at[role] for role in a.out_roles))
                    rowwise.append(Store(dest.name, add(ob, mul(col, idx(a.out.feature))), v))
            out += ([If(Bin("<", row, idx(a.nq)), tuple(rowwise))] if a.nq % self.t.queries
                    else rowwise)
        return out


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile, policy: str) -> tuple[Kernel, ...]:
    if policy not in KINDS:
        raise ValueError(f"mma attention kind {policy!r}: one of {KINDS}")
    found = plan(group, target, policy)
    if isinstance(found, str):
        raise ValueError(f"the mma attention generator cannot take this group: {found}")
    a, t = found
    return (_Builder(group, outline, a, t, policy, target).build(kind),)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    for policy in POLICIES:
        register_generator(Generator(
            f"mma-attention-{policy}",
            "f32 attention (Q Kᵀ, a scale or mask, a softmax over the keys, P V) as one kernel "
            f"on TF32 tensor cores ({policy}), the scores and probabilities in registers, under "
            f"kernelization{{precision={policy}}}"
            + (" (and the default f32 where the saturating TF32 rounding was found too)"
               if policy == "3xtf32" else ""),
            lambda group, target, p=policy: not isinstance(plan(group, target, p), str),
            lambda group, outline, kind, target, p=policy: build(group, outline, kind,
                                                                  target, p),
            precisions=frozenset({policy})))
    # f16 x f16 is exact in f32 and the sums are f32 (as mma-f16): any policy takes it
    register_generator(Generator(
        "mma-attention-f16",
        "f16 attention as one kernel on f16 tensor cores (m16n8k16, f32 accumulators), the "
        "scores in registers, the probabilities rounded to f16 for P V",
        lambda group, target: not isinstance(plan(group, target, "f16"), str),
        lambda group, outline, kind, target: build(group, outline, kind, target, "f16")))


_register()
