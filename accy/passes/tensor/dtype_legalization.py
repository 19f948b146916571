"""dtype-legalization: compute in dtypes the target supports (f16 in f32, f64/i64 on request).

The target is ``product.target`` (the generic :class:`~accy.target.TargetProfile` when none is
attached). Only dtypes the program uses and ``target.dtypes`` lacks are touched; with nothing
to do the product is returned as it is (same program, same fingerprint). Per dtype, an option
says what happens:

* ``f16`` (``promote`` by default): every f16 value is computed in f32, except products of
  f16 operands that ``mma-f16`` takes as stored, on targets with f16 tensor cores and
  ``cp.async`` (kept in f16, the result cast to f32 for its users: :func:`f16_product`), those
  it takes once their odd rows are padded with zeros to 16 bytes (:func:`padded_product`),
  large ones whose rows are not whole 16-byte vectors padded to them where the target has
  ``wgmma`` (:func:`wide_padding`), and an attention's values product, for the fused
  attention kernel (:func:`attention_values`; head features padded to a multiple of 8 in Q,
  K and V: :func:`attention_padding`); and, on GPUs, other products of a side of at most 32
  or K under 32, for the tiled contraction, which loads halves (:func:`tiled_product`).
  Elementwise ops on a padded product's sliced result move above the slice (:func:`sunk`),
  and a product padding such a slice back reads its source masked instead (:func:`masked`).
  ``keep`` leaves f16 to the kernels, which compute it in float and round every f16 value
  they bind (the renderer's f16 without ``cl_khr_fp16``; legal wherever f32 is).
* ``f64`` (``keep`` by default, or ``demote``): every f64 value is computed in f32. Values
  round to f32 and those beyond its range become infinities.
* ``i64`` (``keep`` by default, or ``demote``): every i64 value is computed in i32. Values
  must fit in i32 (integer arithmetic wraps around in i32, where i64 would not); an i64
  constant that does not fit is an error.
* ``keep`` leaves f64/i64 alone: ``backend-legalization`` marks every kernel that uses them
  ``unsupported_dtype`` (the pipeline does not fail; running such a kernel raises
  :class:`~accy.errors.CapabilityMismatchError`). ``error`` raises that error here instead,
  naming the first node of the dtype, its function and the target.

Converting a dtype (promoting or demoting) means: parameters of it are cast to the substitute
where they are used, constants of it are stored in the substitute, casts to it cast to the
substitute (and disappear when their operand already has it), every op computes in what its
operands now have, and results of it are cast back at the end, so the function signature is
unchanged (a parameter returned as it is stays uncast). A conversion whose substitute the
target lacks too is not made (the dtype is kept, or ``error`` raises).

f16 in f32 agrees with ``interpret``'s f16 arithmetic op by op for add, sub, mul, div and
sqrt (rounding to 24 bits and then to 11 gives the correctly rounded f16 result); along a
chain of ops, f32 intermediates are not rounded to f16, so the results are closer to exact
and can differ from interpret by f16 rounding per op, and where an f16 intermediate would
overflow to infinity (or underflow to 0) the f32 one need not. A cast to f16 inside the
program no longer rounds.

Bool needs no rule: the IR computes nothing in bool but comparisons, logical ops, select
conditions and casts (:mod:`accy.ir.shapes` rejects bool arithmetic, reductions and
einsums), so there is nothing to compute wider. f32 and i32 have no substitute.

The boundary casts still read and write the original dtype. Every device stores f16 (the
renderer uses ``vload_half``/``vstore_half``), so promoted f16 programs run anywhere; f64/i64
boundary casts keep their kernels illegal on a device without that dtype.

Statistics: ``promoted`` (f16 nodes now computed in f32), ``demoted`` (f64 and i64 nodes now
computed in f32 and i32) and ``kept`` (nodes left in a dtype the target lacks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from accy.errors import CapabilityMismatchError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.printer import format_name
from accy.ir.program import Function, Program, Stage
from accy.ir.types import DType
from accy.kernels import wgmma
from accy.kernels.attention_mma_plan import MAX_FEATURES
from accy.kernels.contraction_plan import Contraction, classify, skinny_sides
from accy.kernels.mma_plan import MIN_K, MIN_MN, takes_sides
from accy.passes.base import Pass, option
from accy.passes.rebuild import constant, make, rebuild
from accy.passes.registry import register
from accy.passes.tensor.conv_lowering import padded
from accy.target import CP_ASYNC, F16_MMA, WGMMA_F16, TargetProfile

SUBSTITUTE = {DType.f16: DType.f32, DType.f64: DType.f32, DType.i64: DType.i32}


def locate(program: Program, found: Callable[[Node], bool]) -> str:
    """Where the first node with ``found(node)`` is, named as the printer names it."""
    for fn in program.functions:
        names = {p: format_name("%", n) for p, n in zip(fn.params, fn.param_names, strict=True)}
        counter = 0
        for node in fn.nodes():
            if node.op is not Op.PARAM:
                names[node] = f"%{counter}"
                counter += 1
            if found(node):
                what = "parameter" if node.op is Op.PARAM else node.op.value
                return (f"function {format_name('@', fn.name)}, {names[node]} ({what} : "
                        f"{node.type})")
    raise ValueError("no node matches")  # callers only look for nodes they saw


def refusal(program: Program, dtype: DType, target: TargetProfile) -> CapabilityMismatchError:
    """The error for ``error``: the first node of ``dtype``, the target, the way out."""
    fix = "promote" if dtype is DType.f16 else "demote"
    return CapabilityMismatchError(
        f"dtype-legalization: {locate(program, lambda n: n.type.dtype is dtype)} computes in "
        f"{dtype.value}, which the target ({target.device}) lacks; {dtype.value}={fix} "
        f"computes it in {SUBSTITUTE[dtype].value} instead")


def product_axes(node: Node, dtype: DType
                 ) -> tuple[str, str, str, dict[str, int], tuple[int, int, int]] | None:
    """A product of two operands, all of ``dtype``: its operands' and output's letters, each
    letter's length and its (M, N, K) (the products of the letters only A has, only B has,
    and summed); None for anything else."""
    if (node.op is not Op.EINSUM or node.type.dtype is not dtype or len(node.srcs) != 2
            or any(s.type.dtype is not dtype for s in node.srcs)):
        return None
    ins, out = node.attr("spec").split("->")
    a, b = ins.split(",")
    if not a or not b:
        return None
    size = {c: n for t, s in zip((a, b), node.srcs, strict=True)
            for c, n in zip(t, s.type.shape, strict=True)}
    summed = (set(a) & set(b)) - set(out)
    m, n, k = (math.prod(size[c] for c in group) for group in (
        set(a) - set(b), set(b) - set(a), summed))
    return a, b, out, size, (m, n, k)


def f16_product(node: Node) -> bool:
    """A product of two f16 operands that ``mma-f16`` takes as they are stored: kept in f16 on
    targets with f16 tensor cores (it multiplies f16 exactly and sums in f32, without
    ``cl_khr_fp16``). Its ``cp.async`` copies cannot transpose: A along K (its last letter
    summed), B along N (its last letter an output letter) or along K (its tile then along K
    too, read by ``ldmatrix`` untransposed: ``x @ W.T``, attention's ``q k^T``), last axes of
    an even length (copies of 16, 8 or 4 bytes: ``mma_plan.copy_widths``), and sides and K the
    generator takes (``mma_plan.takes_sides``: skinny ones too); any other f16 product is
    promoted (on GPUs but a small one: :func:`tiled_product`)."""
    found = product_axes(node, DType.f16)
    if found is None:
        return False
    a, b, out, _, (m, n, k) = found
    summed = (set(a) & set(b)) - set(out)
    b_ok = (b[-1] in out and b[-1] not in a) or b[-1] in summed  # along N, or along K
    return (a[-1] in summed and b_ok
            and all(s.type.shape[-1] % 2 == 0 for s in node.srcs)
            and takes_sides(m, n, True, k) and k >= MIN_K)


def tiled_product(node: Node, target: TargetProfile) -> bool:
    """A product of two f16 operands on a GPU that the tiled contraction takes and
    :func:`f16_product` does not (a side under ``mma_plan.MIN_MN``, as GEMV-like products
    have, or K under ``mma_plan.MIN_K``): kept in f16, since the tiled contraction loads halves
    and keeps its tiles and sums in f32 (one rounding on the way out, the same arithmetic as
    promoted). Promoting it would cast each operand to f32 first (a kernel each, reading 2
    bytes an element and writing 4) for the product to read 4: on a GEMV-like product, bound
    by reading its long operand, twice the bytes; on a small one, two more launches than the
    product's own (measured: papers/kernels.md, "Fortieth session")."""
    if target.device_type != "gpu" or product_axes(node, DType.f16) is None:
        return False
    c = classify(node)
    return isinstance(c, Contraction) and (min(c.m.size, c.n.size) < MIN_MN
                                           or c.k.size < MIN_K)


def attention_values(node: Node) -> bool:
    """An attention's values product ``softmax(...) @ V`` over f16 operands, V's features at
    most ``attention_mma_plan.MAX_FEATURES``: kept in f16 whatever its shape (e.g. 32
    features, or an odd number of keys, which :func:`f16_product` refuses; features not a
    multiple of :data:`FEATURES_TO` padded, :func:`attention_padding`), so that
    fusion-planning can merge it with its softmax and scores for ``mma-attention-f16``; where
    it does not, the tiled contraction computes it from f16 loads."""
    if product_axes(node, DType.f16) is None or node.srcs[0].op is not Op.SOFTMAX:
        return False
    return node.srcs[1].type.shape[-1] <= MAX_FEATURES


def attention_padding(node: Node, scores: set[Node]) -> dict[str, int]:
    """The letters of an attention's product (values: V's features; scores, of
    :func:`attention_scores`: the head features both operands sum over) to pad with zeros to
    a multiple of :data:`FEATURES_TO`, whole 16-byte rows, which ``mma-attention-f16``
    needs; empty where they are one already or ``node`` is neither."""
    found = product_axes(node, DType.f16)
    if found is None:
        return {}
    a, b, _, size, _ = found
    if node in scores and a[-1] == b[-1]:
        letter = a[-1]  # q k^T: both along the summed features
    elif attention_values(node):
        letter = b[-1]  # P V: V's features, an output axis
    else:
        return {}
    grow = -size[letter] % FEATURES_TO
    return {letter: grow} if grow else {}


PAD_TO = 8  # f16 elements: rows padded to whole 16-byte vectors (TMA, 16-byte cp.async)
WIDE_INTENSITY = 1024  # flops per operand element copied (2MN/(M+N)) for wide_padding
WIDE_FLOPS = 2 ** 33  # from these flops (2MNK) wide_padding pads from LARGE_INTENSITY
WIDE_MIN_K = wgmma.MIN_K  # a shorter K, padded, is left to mma-f16 unpadded
LARGE_INTENSITY = 384
FEATURES_TO = 8  # attention features padded to whole 16-byte rows (the kernel pads to 16)


def pad_letters(x: Node, letters: str, grow: dict[str, int]) -> Node:
    """``x`` (its axes named by ``letters``) with zeros after the axes ``grow`` names, as many
    as it says (a copy: a concat with zeros)."""
    pads = [0] * len(letters) + [grow.get(c, 0) for c in letters]
    return padded(x, constant(0.0, x.type.dtype), tuple(pads)) if any(pads) else x


def attention_scores(program: Program) -> set[Node]:
    """The scores products of the program's attentions: the einsum a values product's softmax
    reads, through casts and products or quotients by constants."""
    found = set()
    for node in program.nodes():
        if node.op is not Op.EINSUM or len(node.srcs) != 2 or node.srcs[0].op is not Op.SOFTMAX:
            continue
        x = node.srcs[0].srcs[0]
        while x.op in (Op.CAST, Op.MUL, Op.DIV):
            inner = [s for s in x.srcs if s.op is not Op.CONSTANT]
            if len(inner) != 1:
                break
            x = inner[0]
        if x.op is Op.EINSUM:
            found.add(x)
    return found


def f16_operands(srcs: tuple[Node, ...]) -> tuple[Node, ...]:
    """A kept f16 product's operands: a promoted operand cast back, a parameter's cast
    dropped."""
    return tuple(s.srcs[0] if s.op is Op.CAST and s.srcs[0].type.dtype is DType.f16
                 else make(Op.CAST, s, dtype=DType.f16) for s in srcs)


def padded_product(node: Node, srcs: tuple[Node, ...],
                   slices: frozenset[Node] | set[Node] = frozenset()) -> Node | None:
    """An f16 product that :func:`f16_product` refuses only for an odd last axis, made one it
    takes (None where padding does not make it one): A's last axis, summed, padded with zeros
    to a multiple of :data:`PAD_TO` in both operands (the zeros add nothing); B's last axis,
    where it is an output axis, padded the same way and the result sliced back. The padded
    operands are copies (``conv_lowering.padded``: a concat with zeros); the product is then
    an f16 product of whole 16-byte rows on the tensor cores, not an f32 one. Not for a
    product of sides under ``mma_plan.MIN_MN`` that is not skinny, which the tiled
    contraction takes in one kernel where the copies and slice would be three (measured
    slower: papers/kernels.md, "Fortieth session")."""
    found = product_axes(node, DType.f16)
    if found is None or all(s.type.shape[-1] % 2 == 0 for s in node.srcs):
        return None
    a, b, out, size, (m, n, _) = found
    if min(m, n) < MIN_MN and not skinny_sides(m, n):
        return None
    grow = {c: -size[c] % PAD_TO for c in {a[-1], b[-1]} if size[c] % 2}
    if b[-1] in grow and b[-1] not in out and b[-1] != a[-1]:
        return None  # B along a second summed axis: not A's
    if not f16_product(make(Op.EINSUM, pad_letters(node.srcs[0], a, grow),
                            pad_letters(node.srcs[1], b, grow), spec=node.attr("spec"))):
        return None
    return padded_f16(node, srcs, grow, slices)


def product_flops(node: Node, k: int) -> int:
    """The flops of product ``node`` summing ``k`` elements an output: ``2 M N K`` times its
    batch entries (the bound both this pass and ``contraction-padding`` pad large products
    from)."""
    return 2 * math.prod(node.type.shape) * k


def wide_padding(node: Node, target: TargetProfile) -> dict[str, int]:
    """The last axes of an f16 product ``mma-f16`` takes (:func:`f16_product`) to pad with
    zeros to a multiple of :data:`PAD_TO`, for ``wgmma-f16``, which copies whole 16-byte rows
    (by TMA): where the target has it and the product does at least :data:`WIDE_INTENSITY`
    flops per operand element the copies write (as ``contraction-padding`` for f32), or
    :data:`LARGE_INTENSITY` for a product of :data:`WIDE_FLOPS` or more, whose time on
    ``mma-f16`` outweighs the copies' launches (smaller ones measured slower padded:
    papers/kernels.md, "Fortieth session"). Without it the
    product runs on ``mma-f16``'s 4-byte copies, or B is transposed first (measured far
    slower: "Twenty-eighth session"); with it B's last axis, when an output axis, is sliced
    back from the result. Empty where none needs it, the product is too small, its K padded
    is under :data:`WIDE_MIN_K` (``wgmma.MIN_K``: ``wgmma-f16`` would not take it, and the
    copies and the slice, a second pass over the output, would serve ``mma-f16`` alone; the
    sweeps' three such products ran 0.27-0.54x of torch eager with them: "Forty-third
    session"), or the target lacks it."""
    found = product_axes(node, DType.f16)
    if WGMMA_F16 not in target.tensor_cores or found is None:
        return {}
    a, b, out, size, (m, n, k) = found
    least = LARGE_INTENSITY if product_flops(node, k) >= WIDE_FLOPS else WIDE_INTENSITY
    if 2 * m * n < least * (m + n):
        return {}
    grow = {c: -size[c] % PAD_TO for c in {a[-1], b[-1]} if size[c] % PAD_TO}
    summed = {c for c in a if c in b and c not in out}
    return grow if math.prod(size[c] + grow.get(c, 0) for c in summed) >= WIDE_MIN_K else {}


def padded_f16(node: Node, srcs: tuple[Node, ...], grow: dict[str, int],
               slices: frozenset[Node] | set[Node] = frozenset()) -> Node:
    """The f16 product ``node`` kept in f16 over ``srcs`` (:func:`f16_operands`), the letters
    ``grow`` names padded with zeros in its operands (none: as it is), its result cast to f32
    for its users and sliced back to its shape. An operand in ``slices`` (see :func:`sunk`)
    whose unsliced source is as wide as the padding makes it is that source with the columns
    past the slice selected to zero (:func:`masked`): an epilogue of the source's product,
    where a slice and a pad would be a kernel of their own."""
    a, b, out, size, _ = product_axes(node, DType.f16)  # type: ignore[misc]
    want = {c: n + grow.get(c, 0) for c, n in size.items()}
    ins = f16_operands(tuple(masked(s, want[x[-1]], slices)
                             for s, x in zip(srcs, (a, b), strict=True)))
    wide = make(Op.CAST, make(Op.EINSUM, *(
        pad_letters(x, letters, {c: want[c] - n for c, n in zip(letters, x.type.shape,
                                                                strict=True)})
        for x, letters in zip(ins, (a, b), strict=True)), spec=node.attr("spec")),
        dtype=DType.f32)
    if not any(grow.get(c) for c in out):
        return wide
    return make(Op.SLICE, wide, starts=(0,) * len(out), stops=tuple(size[c] for c in out),
                steps=(1,) * len(out))


def masked(x: Node, width: int, slices: frozenset[Node] | set[Node]) -> Node:
    """``x``, a slice in ``slices`` of a source ``width`` wide along the last axis, as that
    source with the columns past the slice zero (a select against a constant mask, so that an
    infinity or NaN there is dropped as the slice drops it); else ``x``."""
    if x not in slices or x.srcs[0].type.shape[-1] != width:
        return x
    keep = constant(np.arange(width) < x.type.shape[-1], DType.bool)
    return make(Op.SELECT, keep, x.srcs[0], constant(0, x.type.dtype))


def sunk(node: Node, slices: set[Node]) -> Node | None:
    """Elementwise ``node`` computed over the unsliced sources of its operands in ``slices``
    (results of padded products sliced back along their last axis) and sliced after, so
    that it fuses into the product's epilogue (fusion puts no einsum behind a slice of its
    result); its other operands must broadcast along that axis or be vectors along it
    (padded with zeros). None where no operand is such a slice or one cannot follow."""
    shape = node.type.shape
    cut = [s for s in node.srcs if s in slices]
    if not cut or not shape:
        return None
    wide = cut[0].srcs[0].type.shape[-1]
    operands = []
    for s in node.srcs:
        if s in slices and s.srcs[0].type.shape[-1] == wide:
            operands.append(s.srcs[0])
        elif not s.type.shape or s.type.shape[-1] == 1:
            operands.append(s)
        elif s.type.rank == 1:  # a vector along the axis (a bias): zeros past its end
            operands.append(padded(s, constant(0, s.type.dtype), (0, wide - shape[-1])))
        else:
            return None
    out = make(node.op, *operands, **dict(node.attrs))
    rank = len(shape)
    return make(Op.SLICE, out, starts=(0,) * rank, stops=shape, steps=(1,) * rank)


def narrowed(program: Program, node: Node, dtype: DType) -> np.ndarray:
    """The value of constant ``node`` in ``dtype``; an error when an integer does not fit."""
    value = node.value
    out = value.astype(dtype.numpy)
    if dtype.is_int and np.any(out != value):
        bad = value[out != value][0]
        raise CapabilityMismatchError(
            f"dtype-legalization: {locate(program, lambda n: n is node)} holds {bad}, which "
            f"{dtype.value} cannot hold (i64=demote needs values that fit)")
    return out


@register
@dataclass(frozen=True)
class DtypeLegalization(Pass):
    """Compute f16 in f32 (and f64/i64 in f32/i32 on request) where the target lacks them."""

    name = "dtype-legalization"
    stage = Stage.tensor

    f16: Literal["promote", "keep", "error"] = option(
        "promote", "a target without native f16: compute f16 values in f32, keep them (the "
        "kernels then round every f16 value they compute, as interpret does), or raise")
    f64: Literal["keep", "demote", "error"] = option(
        "keep", "a target without f64: keep f64 for backend-legalization to mark illegal, "
        "compute it in f32 (rounding), or raise")
    i64: Literal["keep", "demote", "error"] = option(
        "keep", "a target without i64: keep i64 for backend-legalization to mark illegal, "
        "compute it in i32 (values must fit), or raise")

    def run(self, ctx, product):
        target = product.target or TargetProfile()
        program = product.program
        used = {n.type.dtype for n in program.nodes()}
        lacking = [d for d in SUBSTITUTE if d in used and d not in target.dtypes]
        mapping: dict[DType, DType] = {}
        for d in lacking:
            policy = getattr(self, d.value)
            if policy == "error":
                raise refusal(program, d, target)
            if policy != "keep" and SUBSTITUTE[d] in target.dtypes:
                mapping[d] = SUBSTITUTE[d]
        converted = {d: 0 for d in mapping}

        tensor_cores = F16_MMA in target.tensor_cores and CP_ASYNC in target.tensor_cores

        scores = attention_scores(program)
        slices: set[Node] = set()  # padded products' results sliced back (see sunk)

        def rewrite(node: Node, srcs: tuple[Node, ...]) -> Node:
            if DType.f16 in mapping and tensor_cores:
                if f16_product(node) or attention_values(node):
                    attention = attention_values(node) or node in scores
                    made = padded_f16(node, srcs, attention_padding(node, scores) if attention
                                      else wide_padding(node, target), slices)
                else:
                    made = padded_product(node, srcs, slices)
                if made is not None:
                    if made.op is Op.SLICE and made.srcs[0].type.shape[:-1] == made.type.shape[:-1]:
                        slices.add(made)  # cut along the last axis only
                    return made
            if DType.f16 in mapping and tiled_product(node, target):
                return padded_f16(node, srcs, {})
            out = self.convert(program, node, srcs, mapping)
            if out.type.dtype is not node.type.dtype:
                converted[node.type.dtype] += 1
            if out.op.is_elementwise and (moved := sunk(out, slices)) is not None:
                slices.add(moved)
                return moved
            return out

        if mapping:
            program = self.restore_results(program, rebuild(program, rewrite))
        kept = set(lacking) - set(mapping)
        ctx.stat("promoted", converted.get(DType.f16, 0))
        ctx.stat("demoted", converted.get(DType.f64, 0) + converted.get(DType.i64, 0))
        ctx.stat("kept", sum(n.type.dtype in kept for n in program.nodes()))
        return product.replace(program=program) if mapping else product

    @staticmethod
    def convert(program: Program, node: Node, srcs: tuple[Node, ...],
                mapping: dict[DType, DType]) -> Node:
        """``node`` over the converted operands ``srcs``, computing in ``mapping``'s dtypes."""
        dtype = node.type.dtype
        if node.op is Op.PARAM:
            return make(Op.CAST, node, dtype=mapping[dtype]) if dtype in mapping else node
        if node.op is Op.CONSTANT:
            if dtype not in mapping:
                return node
            return constant(narrowed(program, node, mapping[dtype]), mapping[dtype])
        if node.op is Op.CAST:
            want = mapping.get(node.attr("dtype"), node.attr("dtype"))
            (x,) = srcs
            return x if x.type.dtype is want else make(Op.CAST, x, dtype=want)
        if srcs == node.srcs:
            return node
        return make(node.op, *srcs, **dict(node.attrs))

    @staticmethod
    def restore_results(before: Program, after: Program) -> Program:
        """``after`` with every result cast back to its type in ``before``."""
        functions = []
        for old, new in zip(before.functions, after.functions, strict=True):
            results = tuple(
                want if want.op is Op.PARAM  # a parameter returned as it is: no round trip
                else got if got.type.dtype is want.type.dtype
                else make(Op.CAST, got, dtype=want.type.dtype)
                for want, got in zip(old.results, new.results, strict=True))
            functions.append(Function(new.name, new.params, new.param_names, results))
        return Program(tuple(functions))
