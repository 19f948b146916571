"""The copies and K loops of the mma kernels (a mixin of :class:`accy.kernels.mma._Builder`):
operand tiles into local memory, through registers (:meth:`Copies.plain_loop`: two buffers)
or by ``cp.async`` (:meth:`Copies.async_loop`: ``tiles.stages`` buffers), K steps of the
tile's ``bk``.

A ``cp.async`` K step wholly inside K (every step but a K tail's) issues each copy slot from
an element offset computed once before the loop (32-bit where the operand's offsets fit), its
row clamped inside the operand and its source size zero where the row is outside
(:meth:`Copies.slot_sources`), plus the step's offset: an add a slot, where the guarded form
(:meth:`Copies.issue`, for the K tail and the prologue) compares, selects and multiplies in
64 bits for each.
"""

from __future__ import annotations

from accy.ir.types import DType
from accy.kernels.contraction_plan import rows_apart
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
    If,
    InlineAsm,
    Lane,
    Let,
    Lit,
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
from accy.kernels.mma_plan import VECTOR, copy_layout, local_index
from accy.kernels.mma_ptx import (
    CP_COMMIT,
    CP_WAIT,
    CVT_TF32,
    cp_async,
    cp_async_from,
    tf32_registers,
)


class Copies:
    """Operand copies and the K loop; the builder provides ``t``, ``c``, ``sides``, ``width``,
    ``bases``, ``arg``, ``k0``, ``chunks``, ``chunk_k``, ``policy``, ``split``, ``big_cvt``,
    ``f16``, ``round_tile`` and ``compute``."""

    # copies -----------------------------------------------------------------------------
    def side_info(self, side: str) -> tuple[int, int, int, bool, bool]:
        """(extent, free stride, K stride, along K, whole 16-byte vectors) of a side."""
        c = self.c
        extent, fs, ks = (c.m.size, c.m.x, c.k.x) if side == "x" else (c.n.size, c.n.y, c.k.y)
        return (extent, fs, ks, *copy_layout(c, side, self.t.vector))

    def guard(self, side: str, f: Expr, k: Expr) -> Expr | None:
        """Whether the whole vector at (f, k) is inside the operand (None: always)."""
        extent = self.sides[side][0]
        tile = self.t.bm if side == "x" else self.t.bn
        return all_of(([Bin("<", f, idx(extent))] if extent % tile else [])
                    + ([Bin("<", k, idx(self.c.k.size))]
                       if self.chunks * self.chunk_k > self.c.k.size else []))

    def slots(self, side: str) -> int:
        """Copy slots per work-item for one K step of ``side`` (of :attr:`width`)."""
        return self.t.slots(side, self.width[side])

    def local_slot(self, side: str, i: int, stage: Expr) -> Expr:
        """The local address (an i32) copy slot ``i`` of ``side`` fills in stage ``stage``."""
        buf, size = ("a_tile", self.t.a_size) if side == "x" else ("b_tile", self.t.b_size)
        local = add(mul(stage, idx(size)), Var(f"{side}_l{i}"))
        if self.f16:  # the tiles are arrays of words
            local = div(local, 2)
        return Cast(DType.i32, Cast(INDEX, Bin("+", Var(buf), local)))

    def issue(self, side: str, i: int, f0: Expr, k0: Expr, stage: Expr) -> Stmt:
        """``cp.async`` of copy slot ``i`` of the K step at ``k0`` into stage ``stage``: 16
        bytes (or 8 or 4: :attr:`width`), along the local row (A along K, B along N;
        :func:`async_copies`), every guard evaluated (the K tail's steps, the prologue)."""
        _, fs, ks, _, _ = self.sides[side]
        rf, rk = Var(f"{side}_f{i}"), Var(f"{side}_k{i}")
        f, k = add(f0, rf), add(k0, rk)
        at = add(self.bases[side], add(mul(f, idx(fs)), mul(k, idx(ks))))
        return cp_async(self.local_slot(side, i, stage), self.arg[side], at, self.t.elem_bytes,
                        self.width[side] * self.t.elem_bytes, self.guard(side, f, k))

    def rows_apart(self, side: str, i: int) -> int:
        """Rows (of K) between copy slot ``i`` of ``side`` and slot 0 where the copies run
        along the free index (:func:`~accy.kernels.contraction_plan.rows_apart`), else 0."""
        if self.sides[side][3]:
            return 0
        return rows_apart(i, self.t.threads,
                          (self.t.bm if side == "x" else self.t.bn) // self.width[side])

    def slot_sources(self, origin: dict[str, Expr]) -> None:
        """Before the K loop: each copy slot's source element offset at its chunk's first K
        step (``{side}_p{i}``; a row outside the operand clamped to its last, so every address
        stays inside) and, where tiles pass the operand's edge, its source size
        (``{side}_n{i}``: 0 outside, zeros copied). A step wholly inside K then costs a slot
        an add (:meth:`issue_inside`) instead of its guards and address."""
        t = self.t
        for side in ("x", "y"):
            extent, fs, ks, k_major, _ = self.sides[side]
            width = self.width[side]
            for i in range(self.slots(side)):
                if rows := self.rows_apart(side, i):  # slot 0's column, ``rows`` further on
                    self.let(f"{side}_p{i}", *self.offset(side, add(
                        Var(f"{side}_p0"), idx(rows * ks))))
                    continue
                f = add(origin[side], Var(f"{side}_f{i}"))
                if extent % (t.bm if side == "x" else t.bn):
                    self.let(f"{side}_n{i}", Cond(Bin("<", f, idx(extent)),
                                                  Lit(width * t.elem_bytes, DType.i32),
                                                  Lit(0, DType.i32)), DType.i32)
                    f = Call("min", (f, idx(extent - (1 if k_major else width))))
                k = add(self.k0, Var(f"{side}_k{i}"))
                at = add(self.bases[side], add(mul(f, idx(fs)), mul(k, idx(ks))))
                self.let(f"{side}_p{i}", *self.offset(side, at))

    def offset_type(self, side: str) -> DType:
        """i32 for the element offsets of ``side``'s copies where its largest fits (one
        register a slot), else :data:`INDEX`."""
        c = self.c
        dims = [(d.size, d.x if side == "x" else d.y) for d in c.batch]
        dims += [(c.m.size, c.m.x), (c.k.size, c.k.x)] if side == "x" else [
            (c.n.size, c.n.y), (c.k.size, c.k.y)]
        return DType.i32 if sum((n - 1) * st for n, st in dims) < 2**31 else INDEX

    def offset(self, side: str, e: Expr) -> tuple[Expr, DType]:
        """Element offset ``e`` of ``side`` in its :meth:`offset_type`, and that type."""
        dtype = self.offset_type(side)
        return (Cast(dtype, e) if dtype is DType.i32 else e), dtype

    def step_offset(self, side: str, step: Expr) -> Let:
        """``{side}_ko``: K step ``step``'s element offset from its chunk's first step."""
        value, dtype = self.offset(side, mul(step, idx(self.t.bk * self.sides[side][2])))
        return Let(f"{side}_ko", dtype, value)

    def issue_inside(self, side: str, i: int, stage: Expr) -> Stmt:
        """``cp.async`` of copy slot ``i`` for a K step wholly inside K, from its hoisted
        address (:meth:`slot_sources`) plus the step's offset ``{side}_ko``."""
        extent = self.sides[side][0]
        size = self.width[side] * self.t.elem_bytes
        column = 0 if self.rows_apart(side, i) else i  # slot 0's column: its source size
        n = (Var(f"{side}_n{column}") if extent % (self.t.bm if side == "x" else self.t.bn)
             else None)
        at = Bin("+", Var(f"{side}_p{i}"), Var(f"{side}_ko"))
        if self.offset_type(side) is DType.i32:
            at = Cast(INDEX, at)
        return cp_async_from(self.local_slot(side, i, stage),
                             Bin("+", Cast(INDEX, Var(self.arg[side])),
                                 mul(at, idx(self.t.elem_bytes))), size, n)

    def fetch(self, side: str, i: int, f0: Expr, k0: Expr, first: bool) -> list[Stmt]:
        """Load copy slot ``i`` of the K step at ``k0`` into its registers (zeros outside)."""
        extent, fs, ks, k_major, vector = self.sides[side]
        rf, rk = Var(f"{side}_f{i}"), Var(f"{side}_k{i}")
        f, k = add(f0, rf), add(k0, rk)
        out: list[Stmt] = []
        if vector:  # the whole vector is inside or outside (sizes and strides divide)
            at = add(self.bases[side], add(mul(f, idx(fs)), mul(k, idx(ks))))
            guard = self.guard(side, f, k)
            value: Expr = VectorLoad(self.arg[side], div(at, VECTOR), VECTOR)
            if guard is not None:
                value = Cond(guard, value, Splat(DType.f32, VECTOR, Lit(0.0, DType.f32)))
            name = f"{side}_r{i}"
            out.append(Let(name, DType.f32, value, True, VECTOR) if first
                       else Assign(name, value))
            return out
        for j in range(VECTOR):
            fj, kj = (f, add(k, idx(j))) if k_major else (add(f, idx(j)), k)
            at = add(self.bases[side], add(mul(fj, idx(fs)), mul(kj, idx(ks))))
            guard = all_of([Bin("<", fj, idx(extent)), Bin("<", kj, idx(self.c.k.size))])
            value = Cond(guard, Load(self.arg[side], at), Lit(0.0, DType.f32))
            name = f"{side}_r{i}_{j}"
            out.append(Let(name, DType.f32, value, True) if first else Assign(name, value))
        return out

    def element(self, side: str, i: int, j: int) -> Expr:
        return (Lane(Var(f"{side}_r{i}"), j) if self.sides[side][4]
                else Var(f"{side}_r{i}_{j}"))

    def put(self, side: str, i: int, offset: Expr) -> list[Stmt]:
        """Store copy slot ``i``'s registers into the local buffer at ``offset``; under
        ``tf32`` rounded to TF32 on the way (once per element, not once per warp reading it)."""
        k_major = self.sides[side][3]
        rf, rk = Var(f"{side}_f{i}"), Var(f"{side}_k{i}")
        buf = "a_tile" if side == "x" else "b_tile"
        out: list[Stmt] = []
        values: list[Expr] = []
        for j in range(VECTOR):
            v = self.element(side, i, j)
            if self.policy == "tf32":
                bits = f"{side}_c{i}_{j}"
                out += [Let(bits, DType.i32, Lit(0, DType.i32), True),
                        InlineAsm(CVT_TF32, (("=r", bits),), (("f", v),), False)]
                v = Call("bitcast_f32", (Var(bits),))
            values.append(v)
        # along the local row (A along K, B along N): one aligned float4 store
        if k_major == (side == "x"):
            at = add(offset, local_index(self.t, side, rf, rk))
            out.append(VectorStore(buf, div(at, VECTOR), DType.f32, tuple(values)))
            return out
        for j, v in enumerate(values):
            fj, kj = (rf, add(rk, idx(j))) if k_major else (add(rf, idx(j)), rk)
            out.append(Store(buf, add(offset, local_index(self.t, side, fj, kj)), v))
        return out


    def plain_loop(self, origin: dict[str, Expr]) -> list[Stmt]:
        """K steps through two buffers: the next step loaded into registers while this one
        computes, then stored to the other buffer; one barrier per step."""
        t, out = self.t, []
        for side in ("x", "y"):  # prologue: K step 0 into buffer 0
            for i in range(self.slots(side)):
                out += self.fetch(side, i, origin[side], self.k0, first=True)
        for side in ("x", "y"):
            for i in range(self.slots(side)):
                out += self.put(side, i, idx(0))
        out.append(Barrier())
        steps = self.chunk_k // t.bk
        kt = Var("kt")
        loop: list[Stmt] = [Let("cur", INDEX, mod(kt, 2)),
                            Let("a_off", INDEX, mul(Var("cur"), idx(t.a_size))),
                            Let("b_off", INDEX, mul(Var("cur"), idx(t.b_size)))]
        more = Bin("<", add(kt, idx(1)), idx(steps))
        nxt = add(self.k0, mul(add(kt, idx(1)), idx(t.bk)))
        prefetch: list[Stmt] = []
        store: list[Stmt] = []
        for side in ("x", "y"):
            for i in range(self.slots(side)):
                prefetch += self.fetch(side, i, origin[side], nxt, first=False)
                other = mul(Bin("-", idx(1), Var("cur")), idx(t.a_size if side == "x"
                                                             else t.b_size))
                store += self.put(side, i, other)
        loop += [If(more, tuple(prefetch))] if steps > 1 else []
        loop += self.compute(Var("a_off"), Var("b_off"))
        loop += [If(more, tuple(store))] if steps > 1 else []
        loop.append(Barrier())
        out.append(For("kt", idx(0), idx(steps), tuple(loop)))
        return out

    def round_copies(self, stage: Expr) -> list[Stmt]:
        """Round the chunks this work-item copied into ``stage`` (16 bytes, or 8 or 4 where
        rows are not whole 16-byte vectors: :attr:`width`) to TF32 in place
        (``MmaTiles.rounding == "tile"``): each element once, before the barrier that shows
        them to the warps. Under 3xtf32 the rounding is the split's big part, and the small
        part goes to the same place of ``a_small`` / ``b_small`` (sides exact in TF32 are
        left as they are)."""
        out: list[Stmt] = []
        for side, reg in (("x", "a"), ("y", "b")):
            split = self.policy == "3xtf32"
            if split and not self.split[reg]:
                continue
            buf, size = ("a_tile", self.t.a_size) if side == "x" else ("b_tile", self.t.b_size)
            width = self.width[side]
            for i in range(self.slots(side)):
                at = add(mul(stage, idx(size)), Var(f"{side}_l{i}"))
                raw = f"{side}_o{i}"
                names = [f"{side}_t{i}_{j}" for j in range(width)]
                if width == 1:
                    out.append(Let(raw, DType.f32, Load(buf, at)))
                    out += tf32_registers(names[0], Var(raw), self.policy, self.big_cvt)
                else:
                    at = div(at, width)
                    out.append(Let(raw, DType.f32, VectorLoad(buf, at, width), lanes=width))
                    for j, name in enumerate(names):
                        out += tf32_registers(name, Lane(Var(raw), j), self.policy,
                                              self.big_cvt)
                for target, suffix in (((buf, ""), (f"{reg}_small", "_s")) if split
                                       else ((buf, ""),)):
                    values = tuple(Call("bitcast_f32", (Var(name + suffix),)) for name in names)
                    out.append(Store(target, at, values[0]) if width == 1 else
                               VectorStore(target, at, DType.f32, values))
        return out

    def async_loop(self, origin: dict[str, Expr]) -> list[Stmt]:
        """K steps through ``stages`` buffers filled by ``cp.async``: steps 0..S-2 are issued
        first, one commit group each; step ``kt`` waits until at most S-2 groups are in flight
        (its own has landed, for this work-item), then one barrier makes every work-item's
        copies visible and frees the buffer step ``kt-1`` read, which step ``kt+S-1`` is issued
        into before this step's mma.sync run. Empty groups keep the count uniform."""
        t, stages = self.t, self.t.stages
        steps = self.chunk_k // t.bk
        commit = InlineAsm(CP_COMMIT, (), (), True, ("memory",))

        def issue_step(step: Expr, stage: Expr) -> list[Stmt]:
            return [self.issue(side, i, origin[side], add(self.k0, mul(step, idx(t.bk))), stage)
                    for side in ("x", "y") for i in range(self.slots(side))]

        self.slot_sources(origin)
        out: list[Stmt] = []
        for s in range(stages - 1):  # the prologue: the first S-1 steps in flight
            out += issue_step(idx(s), idx(s)) if s < steps else []
            out.append(commit)
        kt, cur = Var("kt"), Var("cur")
        nxt = add(kt, idx(stages - 1))
        # the stage of step kt, counted (no 64-bit modulo per step); kt + S - 1 goes where
        # step kt - 1 was
        out.append(Let("cur", INDEX, idx(0), True))
        loop: list[Stmt] = [InlineAsm(CP_WAIT.format(stages - 2), (), (), True, ("memory",))]
        if self.round_tile:  # this work-item's own copies of step kt have landed
            loop += self.round_copies(cur)
        loop.append(Barrier())
        if steps > stages - 1:
            prev = Let("prev", INDEX, Cond(Bin("==", cur, idx(0)), idx(stages - 1),
                                           Bin("-", cur, idx(1))))
            # a step wholly inside K from the hoisted addresses; the K tail's guarded
            inside = [self.step_offset(side, nxt) for side in ("x", "y")] + [
                self.issue_inside(side, i, Var("prev"))
                for side in ("x", "y") for i in range(self.slots(side))]
            issues = ([If(Bin("<=", add(self.k0, mul(add(nxt, idx(1)), idx(t.bk))),
                              idx(self.c.k.size)), tuple(inside), tuple(issue_step(
                                  nxt, Var("prev"))))]
                      if self.chunks * self.chunk_k > self.c.k.size else inside)
            loop.append(If(Bin("<", nxt, idx(steps)), (prev, *issues)))
        loop += [commit,
                 Let("a_off", INDEX, mul(cur, idx(t.a_size // self.words))),
                 Let("b_off", INDEX, mul(cur, idx(t.b_size // self.words)))]
        loop += self.compute(Var("a_off"), Var("b_off"))
        loop.append(Assign("cur", Cond(Bin("==", cur, idx(stages - 1)), idx(0),
                                       add(cur, idx(1)))))
        out.append(For("kt", idx(0), idx(steps), tuple(loop)))
        return out
