"""vector-flat: elementwise groups with W elements per work-item, vector loads and stores.

A flat group (elementwise and movement ops) qualifies when every value it reads is indexed
from the flat index ``i`` of the domain as ``i % size(value)``: full-domain contiguous inputs,
scalars, and inputs broadcast along leading dims (a bias row added to every row). Reshapes and
such broadcasts keep that form; transposes, slices and concats do not, so their groups are left
to the loop nest. Then W consecutive elements of every input are one aligned ``vloadW`` (W
divides every input size), each lane is computed with the scalar expressions of
:mod:`accy.kernels.exprs` (identical rounding and NaN behaviour to the loop nest), and results
go out with ``vstoreW``. The last work-item computes the ``size % W`` tail elements one by one.

:class:`LaneEvaluator` is also what the reduction and row-softmax generators use to read their
elementwise prologue a vector at a time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.types import DType
from accy.ir.walk import Pending, evaluate
from accy.kernels import exprs
from accy.kernels.ir import (
    INDEX,
    Bin,
    Expr,
    Id,
    If,
    Kernel,
    KernelArg,
    Lane,
    Let,
    Load,
    Return,
    Stmt,
    Store,
    Var,
    VectorLoad,
    VectorStore,
    idx,
)
from accy.kernels.loopnest import implemented_ops
from accy.kernels.workgroup import GroupEmitter, is_outer_broadcast, ops_supported, pow2ceil
from accy.plans import FusionGroup, KernelOutline, LaunchGeometry, ScheduleKind, is_inlined
from accy.target import TargetProfile

VECTOR_BYTES = 16  # one 128-bit load or store per operand and work-item
MAX_LANES = 16
# Domains smaller than this run as the plain loop nest: a handful of work-groups gain nothing
# from vectors, and the scalar kernel is the easier one to read.
MIN_ELEMENTS = 1024


def vector_width(dtypes: Iterable[DType], target: TargetProfile) -> int:
    """Elements per work-item: 16 bytes of the widest dtype (4 for f32, 2 for f64).

    128-bit accesses are the widest single load/store on NVIDIA GPUs and SSE-class CPUs; the
    OpenCL "preferred vector width" is no guide here (NVIDIA reports 1, PoCL the SIMD width,
    and PoCL vectorizes across work-items anyway).
    """
    del target  # every current OpenCL target: see above
    widest = max((d.itemsize for d in dtypes), default=4)
    return max(2, min(MAX_LANES, VECTOR_BYTES // widest))


def flat_leaves(root: Node, inside: set[Node]) -> list[Node] | None:
    """The values read from memory to compute ``root`` (indexed ``i % size`` from root's flat
    index ``i``), or None when some op in between indexes another way."""
    leaves: list[Node] = []
    seen: set[Node] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n not in inside:
            leaves.append(n)
            continue
        if n.op.is_elementwise or n.op is Op.BROADCAST:
            if not all(is_outer_broadcast(s.type.shape, n.type.shape) for s in n.srcs):
                return None
        elif n.op is not Op.RESHAPE:
            return None
        stack.extend(n.srcs)
    return leaves


def vectorizable(roots: Iterable[Node], inside: set[Node], lanes: int) -> bool:
    """Whether every leaf under ``roots`` can be read ``lanes`` elements at a time: leaves of
    the roots' size (read where the root is), scalars, and leaves whose whole vectors tile
    the roots (their size a multiple of ``lanes``)."""
    for root in roots:
        leaves = flat_leaves(root, inside)
        if leaves is None:
            return False
        size = root.type.size
        if any(n.type.size % lanes and n.type.size not in (1, size) for n in leaves):
            return False
    return True


class LaneEvaluator:
    """Lanes of values of a flat computation: ``value(node, lane)``.

    ``vindex`` is the vector index (in units of ``lanes`` elements) into the shape of the
    computation's root; leaves of smaller size are read at ``vindex % (size / lanes)``. With
    ``tail`` set, lanes are the root elements ``tail + lane`` read one at a time instead.
    """

    def __init__(self, em: GroupEmitter, inside: set[Node], arg_of: dict[Node, str],
                 root_size: int, lanes: int, vindex: Expr | None, tail: int | None = None
                 ) -> None:
        self.em, self.inside, self.arg_of = em, inside, arg_of
        self.root_size, self.lanes, self.vindex, self.tail = root_size, lanes, vindex, tail
        self.memo: dict[tuple[Node, int], Expr] = {}

    def value(self, node: Node, lane: int) -> Expr:
        return evaluate(self._open(node, lane))  # iterative: chains may be 20,000 ops deep

    def _open(self, node: Node, lane: int) -> Expr | Pending:
        key = (node, lane)
        if key in self.memo:
            return self.memo[key]
        if node not in self.inside:
            return self._remember(key, self._leaf(node, lane))
        if node.op in (Op.RESHAPE, Op.BROADCAST):
            return Pending([(node.srcs[0], lane)], self._open,
                           lambda args: self._remember(key, args[0]))
        operand = node.srcs[1] if node.op is Op.SELECT else node.srcs[0]
        op, dtype = node.op, node.type.dtype
        return Pending([(s, lane) for s in node.srcs], self._open,
                       lambda args: self._remember(key, self.em.bind(
                           exprs.elementwise(op, args, operand.type.dtype, dtype), dtype)))

    def _remember(self, key: tuple[Node, int], value: Expr) -> Expr:
        self.memo[key] = value
        return value

    def _leaf(self, node: Node, lane: int) -> Expr:
        dtype, size = node.type.dtype, node.type.size
        if is_inlined(node):
            return exprs.const(node.value.reshape(-1)[0].item(), dtype)
        buf = self.arg_of[node]
        if size == 1:
            return self.em.bind(Load(buf, idx(0)), dtype, key=("scalar", node), prefix="s")
        if self.tail is not None:
            return self.em.bind(Load(buf, idx((self.tail + lane) % size)), dtype)
        assert self.vindex is not None
        key = ("vector", node, self.vindex)
        vec = self.em.lookup(key)
        if vec is None:
            at = self.vindex if size == self.root_size else Bin(
                "%", self.vindex, idx(size // self.lanes))
            vec = self.em.bind(VectorLoad(buf, at, self.lanes), dtype, key, "x", self.lanes)
        return Lane(vec, lane)


def _input_args(group: FusionGroup, slots: Iterable[int]) -> tuple[list[KernelArg],
                                                                  dict[Node, str]]:
    args: list[KernelArg] = []
    arg_of: dict[Node, str] = {}
    slot_iter = iter(slots)
    for n in group.inputs:
        if not is_inlined(n):
            name = f"in{len(args)}"
            args.append(KernelArg(name, n.type.dtype, False, next(slot_iter)))
            arg_of[n] = name
    return args, arg_of


def lanes_for(group: FusionGroup, target: TargetProfile) -> int:
    dtypes = [n.type.dtype for n in group.inputs if not is_inlined(n)]
    dtypes += [n.type.dtype for n in group.outputs]
    return vector_width(dtypes, target)


def accepts(group: FusionGroup, target: TargetProfile) -> bool:
    """Flat groups whose every input is contiguous, scalar or broadcast along leading dims,
    on GPU-like targets.

    CPU OpenCL compilers (PoCL) already pack neighbouring work-items of the scalar loop nest
    into SIMD registers; explicit vectors turn those packed loads into gathers (on PoCL the
    2^24-element chain took 6-8 ms vectorized against 5.2 ms as the loop nest).
    """
    if target.device_type == "cpu":
        return False
    if group.kind is not ScheduleKind.flat or not ops_supported(group):
        return False
    size = math.prod(group.domain)
    lanes = lanes_for(group, target)
    if size < max(MIN_ELEMENTS, lanes):
        return False
    if any(o.type.shape != group.domain for o in group.outputs):
        return False
    return vectorizable(group.outputs, set(group.nodes), lanes)


def build(group: FusionGroup, outline: KernelOutline, kind: ScheduleKind,
          target: TargetProfile) -> tuple[Kernel, ...]:
    """One kernel: ``size // W`` vector work-items, then one for the scalar tail."""
    lanes = lanes_for(group, target)
    size = math.prod(group.domain)
    vectors, rest = divmod(size, lanes)
    inside = set(group.nodes)
    args, arg_of = _input_args(group, outline.input_slots)
    outs = [KernelArg(f"out{i}", n.type.dtype, True, slot)
            for i, (n, slot) in enumerate(zip(group.outputs, outline.output_slots, strict=True))]
    gid = Var("gid")

    def emit_outputs(em: GroupEmitter, evaluator: LaneEvaluator, count: int,
                     store: Callable[[KernelArg, list[Expr]], list[Stmt]]) -> tuple[Stmt, ...]:
        for arg, node in zip(outs, group.outputs, strict=True):
            for st in store(arg, [evaluator.value(node, lane) for lane in range(count)]):
                em.emit(st)
        return em.body()

    em = GroupEmitter()
    vector = emit_outputs(em, LaneEvaluator(em, inside, arg_of, size, lanes, gid), lanes,
                          lambda a, vs: [VectorStore(a.name, gid, a.dtype, tuple(vs))])
    items = vectors + (1 if rest else 0)
    local = min(outline.geometry.local_size[0], pow2ceil(items))
    global_size = -(-items // local) * local
    body: list[Stmt] = [Let("gid", INDEX, Id("global", 0))]
    if rest:
        tail_em = GroupEmitter()
        first = vectors * lanes
        tail = emit_outputs(
            tail_em, LaneEvaluator(tail_em, inside, arg_of, size, lanes, None, first), rest,
            lambda a, vs: [Store(a.name, idx(first + i), v) for i, v in enumerate(vs)])
        body.append(If(Bin("<", gid, idx(vectors)), vector,
                       (If(Bin("==", gid, idx(vectors)), tail),)))
    else:
        if global_size > vectors:
            body.append(If(Bin(">=", gid, idx(vectors)), (Return(),)))
        body.extend(vector)
    return (Kernel(outline.entry, outline.work_item, kind, group.domain, tuple(args + outs),
                   tuple(body), LaunchGeometry((global_size,), (local,)),
                   implemented_ops(group)),)


def _register() -> None:
    from accy.kernels.generators import Generator, register_generator

    register_generator(Generator(
        "vector-flat",
        "elementwise groups over contiguous, scalar or leading-broadcast inputs: W elements "
        "per work-item with vector loads and stores, scalar tail",
        accepts, build))


_register()
