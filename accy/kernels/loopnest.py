"""The generic kernel generator: any fusion group as a loop nest, one work-item per output
element. Every op has a form here (movement ops become index arithmetic, reductions and
contractions become loops with accumulators), so every program can run; the specialised
generators are faster for the shapes they take.

Values are generated at symbolic coordinates: ``value(node, coords)``. Each computed value is
bound once to a ``const`` variable, in the outermost loop scope its inputs allow, so a row
maximum inside a softmax is computed once per work-item, not once per loop iteration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from accy.ir.node import Node
from accy.ir.ops import Op, OpKind
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType
from accy.ir.walk import Pending, evaluate
from accy.kernels import exprs
from accy.kernels.ir import (
    INDEX,
    Assign,
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
    Let,
    Lit,
    Load,
    Return,
    Stmt,
    Store,
    Var,
    add,
    delinearize,
    free_vars,
    idx,
    linear,
    mul,
    row_major,
)
from accy.plans import FusionGroup, KernelOutline, ScheduleKind, is_inlined


def broadcast_coords(coords: tuple[Expr, ...], shape: tuple[int, ...]) -> tuple[Expr, ...]:
    """Coordinates into ``shape`` of an element broadcast to a result indexed by ``coords``."""
    lead = len(coords) - len(shape)
    return tuple(idx(0) if d == 1 else coords[lead + i] for i, d in enumerate(shape))


class _Scope:
    def __init__(self, defined: frozenset[str]) -> None:
        self.body: list[Stmt] = []
        self.defined = defined
        self.memo: dict[tuple, Var] = {}


class Emitter:
    """Statements in nested scopes, with loop-invariant values placed in outer scopes."""

    def __init__(self, tag: str = "") -> None:
        self.scopes = [_Scope(frozenset())]
        self.counter = 0
        self.tag = tag  # before every name: statements placed among another emitter's

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{self.tag}{prefix}{self.counter}"

    def _home(self, e: Expr) -> _Scope:
        need = free_vars(e)
        for scope in reversed(self.scopes):
            if need & scope.defined:
                return scope
        return self.scopes[0]

    def lookup(self, key: tuple) -> Var | None:
        for scope in reversed(self.scopes):
            if key in scope.memo:
                return scope.memo[key]
        return None

    def bind(self, e: Expr, dtype: DType, key: tuple | None = None, prefix: str = "v") -> Expr:
        """``e`` as a variable (literals and variables stay as they are)."""
        if isinstance(e, Lit | Var):
            return e
        home = self._home(e)
        var = self.fresh(prefix)
        home.body.append(Let(var, dtype, e))
        home.defined = home.defined | {var}
        if key is not None:
            home.memo[key] = Var(var)
        return Var(var)

    def remember(self, key: tuple, value: Var) -> None:
        """Make ``lookup(key)`` answer ``value`` within the current scope."""
        self.scopes[-1].memo[key] = value

    def emit(self, s: Stmt) -> None:
        self.scopes[-1].body.append(s)

    def accumulator(self, dtype: DType, init: Expr) -> str:
        var = self.fresh("acc")
        self.scopes[-1].body.append(Let(var, dtype, init, mutable=True))
        self.scopes[-1].defined = self.scopes[-1].defined | {var}
        return var

    @contextmanager
    def loop(self, extent: int) -> Iterator[Var]:
        var = self.fresh("k")
        outer = self.scopes[-1]
        self.scopes.append(_Scope(frozenset({var})))
        yield Var(var)
        inner = self.scopes.pop()
        outer.body.append(For(var, idx(0), idx(extent), tuple(inner.body)))

    def loops(self, extents: tuple[int, ...]) -> _LoopNest:
        return _LoopNest(self, extents)


class _LoopNest:
    def __init__(self, em: Emitter, extents: tuple[int, ...]) -> None:
        self.em, self.extents, self.stack = em, extents, []

    def __enter__(self) -> tuple[Var, ...]:
        out = []
        for e in self.extents:
            cm = self.em.loop(e)
            out.append(cm.__enter__())
            self.stack.append(cm)
        return tuple(out)

    def __exit__(self, *exc) -> None:
        for cm in reversed(self.stack):
            cm.__exit__(None, None, None)


class LoopNestBuilder:
    """Generate one kernel for a fusion group."""

    def __init__(self, group: FusionGroup, outline: KernelOutline) -> None:
        self.group = group
        self.inside = set(group.nodes)
        self.em = Emitter()
        self.args: list[KernelArg] = []
        self.arg_of: dict[Node, str] = {}
        slots = iter(outline.input_slots)
        for n in group.inputs:
            if not is_inlined(n):
                name = f"in{len(self.args)}"
                self.args.append(KernelArg(name, n.type.dtype, False, next(slots)))
                self.arg_of[n] = name
        self.outline = outline
        self.flat_id: Expr = idx(0)
        self.coords: tuple[Expr, ...] = ()

    # values ---------------------------------------------------------------------------
    def value(self, node: Node, coords: tuple[Expr, ...]) -> Expr:
        """``node``'s element at ``coords``, bound to a variable (or a literal).

        Iterative (:func:`accy.ir.walk.evaluate`): a fused chain of 20,000 elementwise ops is
        20,000 levels deep. Subclasses change how one value is found by overriding
        :meth:`_open`. Only ops with a handler (reductions, einsum, concat, indexing, row
        ops) call back into ``value``, one Python level per such op nested in a group.
        """
        return evaluate(self._open(node, coords))

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        """The value when known without operands (memo, load, constant, handler), else the
        operands to evaluate first and how to combine them."""
        key = (node, coords)
        hit = self.em.lookup(key)
        if hit is not None:
            return hit
        if node not in self.inside:
            return self._outside(node, coords, key)
        op, dtype = node.op, node.type.dtype
        if op.is_elementwise:
            operand = node.srcs[1] if op is Op.SELECT else node.srcs[0]
            return Pending(
                [(s, broadcast_coords(coords, s.type.shape)) for s in node.srcs], self._open,
                lambda args: self.em.bind(
                    exprs.elementwise(op, args, operand.type.dtype, dtype), dtype, key))
        remap = REMAPS.get(op)
        if remap is not None:  # movement: the operand's element at other coordinates
            return Pending([(node.srcs[0], remap(self, node, coords))], self._open,
                           lambda args: self.em.bind(args[0], dtype, key))
        handler = _HANDLERS.get(op)
        if handler is None:
            raise ValueError(f"no loop-nest form for {op.value}")
        return self.em.bind(handler(self, node, coords), dtype, key)

    def _outside(self, node: Node, coords: tuple[Expr, ...], key: tuple) -> Expr:
        """A value computed by an earlier kernel (or an inlined constant)."""
        if is_inlined(node):
            return exprs.const(node.value.reshape(-1)[0].item(), node.type.dtype)
        at = (self.flat_id if coords == self.coords and node.type.shape == self.group.domain
              else self.address(coords, node.type.shape))
        return self.em.bind(Load(self.arg_of[node], at), node.type.dtype, key)

    def address(self, coords: tuple[Expr, ...], shape: tuple[int, ...]) -> Expr:
        """The element at ``coords`` of a contiguous row-major tensor of ``shape``."""
        return linear(coords, row_major(shape))

    def index_value(self, node: Node, coords: tuple[Expr, ...]) -> Expr:
        """An integer tensor element as an index, clamped into ``[0, size)``."""
        return Cast(INDEX, self.value(node, coords))

    def reduce(self, kind: Op, dtype: DType, extents: tuple[int, ...],
               body: Callable[[tuple[Var, ...]], Expr]) -> Expr:
        """Sum or max of ``body(loop vars)`` over loops of ``extents``."""
        if kind is Op.REDUCE_MAX:
            init = exprs.const(-np.inf, dtype) if dtype.is_float else Lit(
                int(np.iinfo(dtype.numpy).min), dtype)
        else:
            init = exprs.const(0, dtype)
        acc = self.em.accumulator(dtype, init)
        with self.em.loops(extents) as ks:
            v = body(ks)
            op = Op.MAX if kind is Op.REDUCE_MAX else Op.ADD
            self.em.emit(Assign(acc, exprs.elementwise(op, [Var(acc), v], dtype, dtype)))
        return Var(acc)

    # kernel ---------------------------------------------------------------------------
    def build(self, kind: ScheduleKind) -> Kernel:
        domain = self.group.domain
        size = math.prod(domain)
        gid = self.em.bind(Id("global", 0), INDEX, prefix="gid")
        if math.prod(self.outline.geometry.global_size) > size:
            self.em.emit(If(Bin(">=", gid, idx(size)), (Return(),)))
        coords = tuple(self.em.bind(c, INDEX, prefix="c") for c in delinearize(gid, domain))
        self.flat_id, self.coords = gid, coords
        outs = []
        for i, (n, slot) in enumerate(zip(self.group.outputs, self.outline.output_slots,
                                          strict=True)):
            name = f"out{i}"
            outs.append(KernelArg(name, n.type.dtype, True, slot))
            # an output of the domain's size in another shape ([1] beside []): its own coords
            at = coords if n.type.shape == domain else tuple(
                self.em.bind(c, INDEX, prefix="c") for c in delinearize(gid, n.type.shape))
            self.em.emit(Store(name, gid, self.value(n, at)))
        return Kernel(self.outline.entry, self.outline.work_item, kind, domain,
                      tuple(self.args + outs), tuple(self.em.scopes[0].body),
                      self.outline.geometry, implemented_ops(self.group))


# handlers for the ops that are not elementwise ------------------------------------------
def _reduce(b: LoopNestBuilder, node: Node, coords: tuple[Expr, ...]) -> Expr:
    (x,) = node.srcs
    axes, keep = node.attr("axes"), node.attr("keepdims")
    kept = [c for i, c in enumerate(coords) if i not in axes] if keep else list(coords)
    dtype = x.type.dtype

    def body(ks: tuple[Var, ...]) -> Expr:
        loop, outer = iter(ks), iter(kept)
        return b.value(x, tuple(next(loop) if i in axes else next(outer)
                                for i in range(x.type.rank)))

    kind = Op.REDUCE_MAX if node.op is Op.REDUCE_MAX else Op.REDUCE_SUM
    total = b.reduce(kind, dtype, tuple(x.type.shape[a] for a in axes), body)
    if node.op is Op.REDUCE_MEAN:
        count = math.prod(x.type.shape[a] for a in axes)
        return Bin("/", total, exprs.const(count, dtype))
    return total


def _einsum(b: LoopNestBuilder, node: Node, coords: tuple[Expr, ...]) -> Expr:
    terms, out = parse_einsum(node.attr("spec"), [s.type.rank for s in node.srcs])
    sizes = {c: d for t, s in zip(terms, node.srcs, strict=True) for c, d in zip(t, s.type.shape,
                                                                                strict=True)}
    summed = sorted({c for t in terms for c in t} - set(out))
    at = dict(zip(out, coords, strict=True))
    dtype = node.type.dtype

    def product(ks: tuple[Var, ...]) -> Expr:
        where = {**at, **dict(zip(summed, ks, strict=True))}
        vals = [b.value(s, tuple(where[c] for c in t)) for t, s in zip(terms, node.srcs,
                                                                        strict=True)]
        e = vals[0]
        for v in vals[1:]:
            e = Bin("*", e, v)
        return e

    if not summed:
        return product(())
    return b.reduce(Op.REDUCE_SUM, dtype, tuple(sizes[c] for c in summed), product)


def _conv2d(b: LoopNestBuilder, node: Node, coords: tuple[Expr, ...]) -> Expr:
    """Sum over the window of one output element; taps outside the input read zero (at a
    clamped address, so every load stays in bounds)."""
    x, w = node.srcs
    _, c, h, wd = x.type.shape
    o, cg, kh, kw = w.type.shape
    (sh, sw), (dh, dw) = node.attr("strides"), node.attr("dilations")
    top, left = node.attr("pads")[:2]
    n, oc, oh, ow = coords
    group = b.em.bind(Bin("/", oc, idx(o // node.attr("groups"))), INDEX, prefix="c")
    dtype = node.type.dtype

    def tap(ks: tuple[Var, ...]) -> Expr:
        ci, i, j = ks
        ih = b.em.bind(Bin("-", add(mul(oh, idx(sh)), mul(i, idx(dh))), idx(top)), INDEX,
                       prefix="c")
        iw = b.em.bind(Bin("-", add(mul(ow, idx(sw)), mul(j, idx(dw))), idx(left)), INDEX,
                       prefix="c")
        inside = Bin("&&", Bin("&&", Bin(">=", ih, idx(0)), Bin("<", ih, idx(h))),
                     Bin("&&", Bin(">=", iw, idx(0)), Bin("<", iw, idx(wd))))
        at = (n, add(mul(group, idx(cg)), ci), Call("clamp", (ih, idx(0), idx(h - 1))),
              Call("clamp", (iw, idx(0), idx(wd - 1))))
        xv = b.value(x, tuple(b.em.bind(a, INDEX, prefix="c") for a in at))
        return Cond(inside, Bin("*", xv, b.value(w, (oc, ci, i, j))), exprs.const(0, dtype))

    return b.reduce(Op.REDUCE_SUM, dtype, (cg, kh, kw), tap)


def _pool2d(b: LoopNestBuilder, node: Node, coords: tuple[Expr, ...]) -> Expr:
    """Max or mean over the window of one output element (taps outside the input left out;
    a mean divides by the window size with ``count_include_pad``, else by the taps inside)."""
    (x,) = node.srcs
    _, _, h, wd = x.type.shape
    (kh, kw), (sh, sw) = node.attr("kernel"), node.attr("strides")
    top, left = node.attr("pads")[:2]
    n, c, oh, ow = coords
    dtype = node.type.dtype
    is_max = node.op is Op.MAX_POOL2D
    fill = exprs.const(-np.inf if is_max else 0, dtype)
    lo = [b.em.bind(Bin("-", mul(oh, idx(sh)), idx(top)), INDEX, prefix="c"),
          b.em.bind(Bin("-", mul(ow, idx(sw)), idx(left)), INDEX, prefix="c")]

    def tap(ks: tuple[Var, ...]) -> Expr:
        ih, iw = (b.em.bind(add(a, k), INDEX, prefix="c") for a, k in zip(lo, ks, strict=True))
        inside = Bin("&&", Bin("&&", Bin(">=", ih, idx(0)), Bin("<", ih, idx(h))),
                     Bin("&&", Bin(">=", iw, idx(0)), Bin("<", iw, idx(wd))))
        at = (n, c, Call("clamp", (ih, idx(0), idx(h - 1))),
              Call("clamp", (iw, idx(0), idx(wd - 1))))
        return Cond(inside, b.value(x, tuple(b.em.bind(a, INDEX, prefix="c") for a in at)),
                    fill)

    total = b.reduce(Op.REDUCE_MAX if is_max else Op.REDUCE_SUM, dtype, (kh, kw), tap)
    if is_max:
        return total
    if node.attr("count_include_pad"):
        return Bin("/", total, exprs.const(kh * kw, dtype))
    covered = [Bin("-", Call("min", (add(a, idx(k)), idx(e))), Call("max", (a, idx(0))))
               for a, k, e in zip(lo, (kh, kw), (h, wd), strict=True)]
    return Bin("/", total, Cast(dtype, Bin("*", covered[0], covered[1])))


def _transpose(b, node, coords):
    perm = node.attr("perm")
    src = [idx(0)] * len(perm)
    for i, p in enumerate(perm):
        src[p] = coords[i]
    return tuple(src)


def _broadcast(b, node, coords):
    return broadcast_coords(coords, node.srcs[0].type.shape)


def _slice(b, node, coords):
    starts, steps = node.attr("starts"), node.attr("steps")
    return tuple(add(idx(s), mul(c, idx(st))) for c, s, st in zip(coords, starts, steps,
                                                                   strict=True))


def _reshape(b, node, coords):
    x = node.srcs[0]
    flat = b.em.bind(linear(coords, row_major(node.type.shape)), INDEX, prefix="f")
    return tuple(b.em.bind(c, INDEX, prefix="c") for c in delinearize(flat, x.type.shape))


def _concat(b, node, coords):
    axis = node.attr("axis")
    pieces = []
    offset = 0
    for s in node.srcs:
        n = s.type.shape[axis]
        if n:
            local = Call("clamp", (Bin("-", coords[axis], idx(offset)), idx(0), idx(n - 1)))
            src = coords[:axis] + (b.em.bind(local, INDEX, prefix="c"),) + coords[axis + 1:]
            pieces.append((offset + n, b.value(s, src)))
        offset += n
    e = pieces[-1][1]
    for end, v in reversed(pieces[:-1]):
        e = Cond(Bin("<", coords[axis], idx(end)), v, e)
    return e


def _gather(b, node, coords):
    from accy.kernels.indexed import clamp_index  # the bounds policy (imports this module)

    x, indices = node.srcs
    axis, r = node.attr("axis"), indices.type.rank
    i = b.em.bind(clamp_index(b.value(indices, coords[axis:axis + r]), x.type.shape[axis]),
                  INDEX, prefix="i")
    return b.value(x, coords[:axis] + (i,) + coords[axis + r:])


def _scatter_add(b, node, coords):
    from accy.kernels.indexed import clamp_index  # the bounds policy (imports this module)

    x, indices, updates = node.srcs
    axis = node.attr("axis")
    dtype = node.type.dtype

    def contribution(ks: tuple[Var, ...]) -> Expr:
        at = b.em.bind(clamp_index(b.value(indices, ks), x.type.shape[axis]), INDEX, prefix="i")
        hit = Bin("==", at, coords[axis])
        upd = b.value(updates, coords[:axis] + ks + coords[axis + 1:])
        return Cond(hit, upd, exprs.const(0, dtype))

    total = b.reduce(Op.REDUCE_SUM, dtype, indices.type.shape, contribution)
    return Bin("+", b.value(x, coords), total)


def _row(b: LoopNestBuilder, x: Node, coords: tuple[Expr, ...], axis: int
         ) -> tuple[Expr, Expr, Callable[[Expr], tuple[Expr, ...]]]:
    """Shift and sum of exp(x - shift) along ``axis`` of the row through ``coords``.

    The shift is the row maximum when it is finite, else 0 (the interpreter's), so a row
    with +inf gives nan where the infinity is and 0 (or -inf) elsewhere, as numpy does."""
    n, dtype = x.type.shape[axis], x.type.dtype

    def at(k: Expr) -> tuple[Expr, ...]:
        return coords[:axis] + (k,) + coords[axis + 1:]

    m = b.em.bind(b.reduce(Op.REDUCE_MAX, dtype, (n,), lambda ks: b.value(x, at(ks[0]))), dtype)
    shift = b.em.bind(Cond(Call("isfinite", (m,)), m, exprs.const(0.0, dtype)), dtype,
                      prefix="shift")
    s = b.reduce(Op.REDUCE_SUM, dtype, (n,),
                 lambda ks: Call("exp", (Bin("-", b.value(x, at(ks[0])), shift),)))
    return shift, b.em.bind(s, dtype), at


def _softmax(b, node, coords):
    x = node.srcs[0]
    shift, s, _ = _row(b, x, coords, node.attr("axis"))
    shifted = Bin("-", b.value(x, coords), shift)
    if node.op is Op.LOG_SOFTMAX:
        return Bin("-", shifted, Call("log", (s,)))
    return Bin("/", Call("exp", (shifted,)), s)


def _cross_entropy(b, node, coords):
    logits, labels = node.srcs
    dtype = node.type.dtype
    classes = logits.type.rank - 1
    count = max(math.prod(labels.type.shape), 1)

    def nll(ks: tuple[Var, ...]) -> Expr:
        row = ks + (idx(0),)
        shift, s, at = _row(b, logits, row, classes)
        label = b.em.bind(Call("clamp", (b.index_value(labels, ks), idx(0),
                                         idx(logits.type.shape[-1] - 1))), INDEX, prefix="i")
        picked = b.value(logits, at(label))
        return Bin("-", Call("log", (s,)), Bin("-", picked, shift))

    total = b.reduce(Op.REDUCE_SUM, dtype, labels.type.shape, nll)
    return Bin("/", total, exprs.const(count, dtype))


# movement ops: the coordinates of their operand's element (evaluated without recursion)
REMAPS: dict[Op, Callable[[LoopNestBuilder, Node, tuple[Expr, ...]], tuple[Expr, ...]]] = {
    Op.TRANSPOSE: _transpose, Op.BROADCAST: _broadcast, Op.SLICE: _slice, Op.RESHAPE: _reshape,
}

_HANDLERS: dict[Op, Callable[[LoopNestBuilder, Node, tuple[Expr, ...]], Expr]] = {
    Op.REDUCE_SUM: _reduce, Op.REDUCE_MAX: _reduce, Op.REDUCE_MEAN: _reduce,
    Op.EINSUM: _einsum, Op.CONCAT: _concat, Op.CONV2D: _conv2d, Op.MAX_POOL2D: _pool2d,
    Op.AVG_POOL2D: _pool2d,
    Op.GATHER: _gather, Op.SCATTER_ADD: _scatter_add,
    Op.SOFTMAX: _softmax, Op.LOG_SOFTMAX: _softmax, Op.CROSS_ENTROPY: _cross_entropy,
}

# pads never reach kernels: conv-lowering rewrites them (conv2d and the pools too, but for
# method=direct, which keeps them for the direct-conv generator; the handlers above are
# their fallback)
assert all(op in _HANDLERS or op in REMAPS or op.is_elementwise
           or op.kind in (OpKind.SOURCE, OpKind.WINDOW) for op in Op)


def implemented_ops(group: FusionGroup) -> tuple[tuple[Op, DType], ...]:
    """(op, operand dtype) of every node a group's kernel computes, in program order."""
    return tuple(dict.fromkeys(
        (n.op, (n.srcs[1] if n.op is Op.SELECT else n.srcs[0]).type.dtype) for n in group.nodes))


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind) -> Kernel:
    """The loop-nest kernel of ``group`` (any ops)."""
    return LoopNestBuilder(group, outline).build(kind)


class EpilogueBuilder(LoopNestBuilder):
    """The loop-nest value machinery with one node's value given: ``result`` (the
    accumulator a contraction, mma or convolution kernel holds) stands for ``given``, so the
    group's elementwise ops after it are generated around it."""

    def __init__(self, group: FusionGroup, outline: KernelOutline, given: Node) -> None:
        super().__init__(group, outline)
        self.given = given
        self.result: Expr = idx(0)

    def _open(self, node: Node, coords: tuple[Expr, ...]) -> Expr | Pending:
        if node is self.given:
            return self.result
        return super()._open(node, coords)

