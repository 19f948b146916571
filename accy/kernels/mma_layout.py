"""The ``vector`` fragment-load scheme of the tensor-core kernels (:mod:`accy.kernels.mma`):
local tiles without padding, 16-byte chunks XOR-swizzled per row, and fragments read in few
wide loads instead of one 32-bit load per register.

``scalar`` (the original scheme, :mod:`accy.kernels.mma_plan`) reads each fragment register
with its own 32-bit local load from padded tiles. ``vector``:

* **f32 (TF32, m16n8k8)**: K and N are permuted inside a K step and a warp's block. An mma.sync
  sums over k, so any permutation of k applied alike to A and B leaves C unchanged: the mma's
  logical k slot ``t + 4 hk`` of sub-step ``kk`` (lane ``4 g + t``) reads physical k
  ``2 S t + 2 kk + hk`` of the step (``S = bk / 8`` sub-steps), so each lane's A values of a
  row are ``2 S`` adjacent words (one float4 for ``bk = 16``, two for 32, a float2 for 8).
  N is permuted inside a warp's block of ``F = frags_n`` fragments: column ``g`` of fragment
  ``ni`` is physical column ``g F + ni``, so each lane's B values of a K row are ``F`` adjacent
  words (float4 loads), and accumulator ``c{r}`` of fragment ``ni`` lands at column
  ``(2 t + r % 2) F + ni`` (:func:`c_coords_v`).
* **f16 (m16n8k16)**: ``ldmatrix.sync.aligned.m8n8.x4.shared.b16`` gives a whole A fragment
  (four 8x8 matrices: rows 0-7 / 8-15 at k 0-7 / 8-15) in one instruction, and ``.trans`` on the
  ``Bs[k][n]`` tile two B fragments (k 0-7 and 8-15 of columns ``ni`` and ``ni + 1``); lane
  ``i`` gives the address of row ``i % 8`` of matrix ``i // 8``.

Every row's 16-byte chunks are XOR-swizzled: chunk ``c`` of row ``r`` sits at ``c ^ swz(r)``,
``swz`` copying chosen bits of ``r`` into chunk-index bits 0..2 (:func:`swizzle_bits`), found
by a search over small bit maps that minimizes the bank-conflict wavefronts of the fragment
reads and the 16-byte copies (:func:`conflicts`: a 16-byte access serves 8 lanes per
wavefront, an 8-byte one 16). The source bits are those constant over a lane's reads (the row
bits ``g`` or ``i % 8`` give, or ``t``'s bits for the f32 B rows), so each lane's addresses
are a few per-lane bases plus constants.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import TYPE_CHECKING

from accy.kernels.ir import Bin, Expr, Lit, add, div, idx, mod, mul

if TYPE_CHECKING:
    from accy.kernels.mma_plan import MmaTiles

LDMATRIX = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
LDMATRIX_T = "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
BANKS = 32  # 4-byte banks of local memory
CHUNK_BITS = 3  # swizzle within 8 chunks of 16 bytes (all 32 banks)


# bit helpers that fold literals (as the IR's add / mul do) --------------------------------
def _bin(op: str, a: Expr, b: Expr, fold) -> Expr:
    if isinstance(a, Lit) and isinstance(b, Lit):
        return idx(fold(int(a.value), int(b.value)))
    return Bin(op, a, b)


def xor(a: Expr, b: Expr) -> Expr:
    if isinstance(b, Lit) and b.value == 0:
        return a
    return _bin("^", a, b, lambda x, y: x ^ y)


def bit(row: Expr, src: int, dst: int) -> Expr:
    """Bit ``src`` of ``row`` moved to bit ``dst``."""
    one = _bin("&", _bin(">>", row, idx(src), lambda x, y: x >> y) if src else row, idx(1),
               lambda x, y: x & y)
    return _bin("<<", one, idx(dst), lambda x, y: x << y) if dst else one


# the layout ---------------------------------------------------------------------------------
def row_bits(t: MmaTiles, side: str) -> tuple[int, ...]:
    """Row bits a swizzle may read: those fixed over one lane's reads of a stage."""
    if side == "y" and not t.f16:  # f32 B rows 2 S t + 2 kk + hk: t's two bits
        low = (2 * (t.bk // 8)).bit_length() - 1
        return (low, low + 1)
    return (0, 1, 2)  # rows g (+ 8 h + 16 mi) or i % 8 (+ 8 (j % 2) + 16 kk)


def swizzle_expr(bits: tuple[tuple[int, int], ...], row: Expr) -> Expr:
    out: Expr = idx(0)
    for s, d in bits:
        out = xor(out, bit(row, s, d)) if not (isinstance(out, Lit) and out.value == 0) \
            else bit(row, s, d)
    return out


def row_length(t: MmaTiles, side: str) -> int:
    """Elements per local row: A rows run along K, B rows along N (along K too for a B tile
    along K; no padding)."""
    return t.bk if side == "x" or t.b_k_major else t.bn


def address(t: MmaTiles, side: str, row: Expr, col: Expr,
            bits: tuple[tuple[int, int], ...] | None = None) -> Expr:
    """Local element address of (row, col): rows of :func:`row_length`, 16-byte chunks
    swizzled."""
    bits = swizzle_bits(t, side) if bits is None else bits
    v = t.vector
    chunk = xor(div(col, v), swizzle_expr(bits, row))
    return add(add(mul(row, idx(row_length(t, side))), mul(chunk, idx(v))), mod(col, v))


# what the warps read and the copies write, for the swizzle search and the tests --------------
def f32_a_reads(t: MmaTiles) -> list[tuple[int, list[tuple[int, int]]]]:
    """f32 A: per load, (bytes per lane, each lane's (row, first col)): rows ``g + 8 h``,
    ``2 S`` words per lane from ``2 S t``, in loads of up to 4 words."""
    s2 = 2 * (t.bk // 8)
    width = min(s2, 4)
    out = []
    for h, v in itertools.product(range(2), range(s2 // width)):
        out.append((width * 4, [(lane // 4 + 8 * h, s2 * (lane % 4) + width * v)
                                for lane in range(32)]))
    return out


def f32_b_reads(t: MmaTiles) -> list[tuple[int, list[tuple[int, int]]]]:
    """f32 B: rows ``2 S t + 2 kk + hk``, ``F`` words from column ``g F``, float4 each."""
    s, f = t.bk // 8, t.frags_n
    out = []
    for kk, hk, v in itertools.product(range(s), range(2), range(f // 4)):
        out.append((16, [(2 * s * (lane % 4) + 2 * kk + hk, (lane // 4) * f + 4 * v)
                         for lane in range(32)]))
    return out


def ldmatrix_rows(lane: int) -> tuple[int, int]:
    """(row, col) in halves, relative to the fragment's origin, whose address lane ``lane``
    gives to ``ldmatrix .x4``: A (non-transposed) matrix j at rows ``8 (j % 2)``, k
    ``8 (j // 2)``; B (``.trans``, rows k) matrix j at k ``8 (j % 2)``, columns ``8 (j // 2)``."""
    j, r = divmod(lane, 8)
    return 8 * (j % 2) + r, 8 * (j // 2)


def ldmatrix_b_rows(lane: int) -> tuple[int, int]:
    """The same for a B tile along K (``ldmatrix`` without ``.trans``, rows n): matrix j at
    rows (n) ``8 (j // 2)``, k ``8 (j % 2)``: b0, b1 of fragment column 2p, then of 2p + 1."""
    j, r = divmod(lane, 8)
    return 8 * (j // 2) + r, 8 * (j % 2)


def f16_reads(t: MmaTiles, side: str) -> list[tuple[int, list[tuple[int, int]]]]:
    out = []
    for kk in range(t.bk // 16):
        if side == "x":
            out.append((16, [(r, 16 * kk + c) for r, c in
                             (ldmatrix_rows(lane) for lane in range(32))]))
        elif t.b_k_major:
            for p in range(t.frags_n // 2):
                out.append((16, [(16 * p + r, 16 * kk + c) for r, c in
                                 (ldmatrix_b_rows(lane) for lane in range(32))]))
        else:
            for p in range(t.frags_n // 2):
                out.append((16, [(16 * kk + r, 16 * p + c) for r, c in
                                 (ldmatrix_rows(lane) for lane in range(32))]))
    return out


def reads(t: MmaTiles, side: str) -> list[tuple[int, list[tuple[int, int]]]]:
    """The local reads of one warp (origin 0) over one K step: (bytes per lane, (row, col)
    per lane), cols in elements."""
    if t.f16:
        return f16_reads(t, side)
    return f32_a_reads(t) if side == "x" else f32_b_reads(t)


def writes(t: MmaTiles, side: str) -> list[tuple[int, list[tuple[int, int]]]]:
    """The 16-byte copies of one K step (A along K, B along N or K), 32 work-items at a
    time."""
    rows, cols = (t.bm, t.bk) if side == "x" else (t.bn, t.bk) if t.b_k_major else (t.bk, t.bn)
    per = cols // t.vector
    slots = [(s // per, s % per * t.vector) for s in range(rows * per)]
    return [(16, slots[i:i + 32]) for i in range(0, len(slots), 32)]


def wavefronts(words: list[list[int]], lane_bytes: int) -> int:
    """Extra wavefronts of one warp-wide access: lanes in groups of 128 / lane_bytes, within a
    group the distinct words of a bank serialize."""
    per = 128 // lane_bytes
    extra = 0
    for i in range(0, len(words), per):
        banks: dict[int, set[int]] = {}
        for lane_words in words[i:i + per]:
            for w in lane_words:
                banks.setdefault(w % BANKS, set()).add(w)
        extra += max(len(v) for v in banks.values()) - 1
    return extra


def conflicts(t: MmaTiles, side: str, bits: tuple[tuple[int, int], ...],
              accesses: list[tuple[int, list[tuple[int, int]]]]) -> int:
    """Extra wavefronts of ``accesses`` under swizzle ``bits``."""
    total = 0
    per_word = 4 // t.elem_bytes
    for lane_bytes, lanes in accesses:
        words = []
        for row, col in lanes:
            at = address(t, side, idx(row), idx(col), bits)
            first = int(at.value) // per_word  # type: ignore[union-attr]
            words.append(list(range(first, first + lane_bytes // 4)))
        total += wavefronts(words, lane_bytes)
    return total


def swizzle_bits(t: MmaTiles, side: str) -> tuple[tuple[int, int], ...]:
    """The (row bit, chunk bit) pairs of ``side``'s swizzle: fewest extra wavefronts of reads,
    then of copies, then fewest bits; chunk bits stay below the chunks of a row. Stages and
    the L2 walk do not matter: searched once per block shape."""
    return _swizzle_bits(dataclasses.replace(t, stages=2, swizzle=8), side)


@functools.cache
def _swizzle_bits(t: MmaTiles, side: str) -> tuple[tuple[int, int], ...]:
    chunks = row_length(t, side) // t.vector
    dst = [d for d in range(CHUNK_BITS) if (1 << d) < chunks]
    src = row_bits(t, side)
    best: tuple[tuple[int, int, int], tuple[tuple[int, int], ...]] | None = None
    for n in range(min(len(src), len(dst)) + 1):
        for s in itertools.combinations(src, n):
            for d in itertools.permutations(dst, n):
                bits = tuple(zip(s, d, strict=True))
                key = (conflicts(t, side, bits, reads(t, side)),
                       conflicts(t, side, bits, writes(t, side)), n)
                if best is None or key < best[0]:
                    best = (key, bits)
    assert best is not None
    return best[1]


# the generator's formulas -------------------------------------------------------------------
def f32_a_base(t: MmaTiles, wm: Expr, g: Expr, tt: Expr, v: int) -> Expr:
    """f32 A: local word of a lane's load ``v`` of row ``wm + g`` (add ``a_row_offset``)."""
    s2, width = 2 * (t.bk // 8), min(2 * (t.bk // 8), 4)
    col = add(mul(tt, idx(s2)), idx(width * v))
    return address(t, "x", add(wm, g), col)


def a_row_offset(t: MmaTiles, mi: int, h: int) -> int:
    """What rows ``16 mi + 8 h`` add to an A address (the swizzle reads row bits 0..2 only)."""
    return (16 * mi + 8 * h) * row_length(t, "x")


def f32_a_register(t: MmaTiles, v: int, e: int) -> tuple[int, int]:
    """(sub-step kk, k half hk) of element ``e`` of a lane's A load ``v``: register
    ``a{h + 2 hk}`` of sub-step kk for the row half h of that load."""
    width = min(2 * (t.bk // 8), 4)
    return divmod(width * v + e, 2)


def f32_b_base(t: MmaTiles, wn: Expr, g: Expr, tt: Expr, v: int) -> Expr:
    """f32 B: local word of a lane's float4 ``v`` of K row ``2 S t`` (add ``b_row_offset``):
    columns ``wn + g F + 4 v`` .. ``+ 3``, fragments ``ni = 4 v .. 4 v + 3``."""
    s2 = 2 * (t.bk // 8)
    return address(t, "y", mul(tt, idx(s2)), add(wn, add(mul(g, idx(t.frags_n)), idx(4 * v))))


def b_row_offset(t: MmaTiles, kk: int, hk: int) -> int:
    """Rows ``2 kk + hk`` below ``2 S t`` (the swizzle reads only t's bits of a B row)."""
    return (2 * kk + hk) * row_length(t, "y")


def c_coords_v(t: MmaTiles, wm: Expr, wn: Expr, g: Expr, tt: Expr, mi: int, ni: int, r: int
               ) -> tuple[Expr, Expr]:
    """f32 ``vector``: tile-relative (row, column) of accumulator ``c{r}`` of fragment (mi, ni)
    under the N permutation (fragment column j is warp column ``j F + ni``)."""
    row = add(wm, add(g, idx(mi * 16 + 8 * (r // 2))))
    col = add(wn, add(mul(add(mul(tt, idx(2)), idx(r % 2)), idx(t.frags_n)), idx(ni)))
    return row, col


def f16_a_base(t: MmaTiles, wm: Expr, lane: Expr, kk: int) -> Expr:
    """f16: local half of the row lane ``lane`` gives ``ldmatrix`` for A sub-step ``kk``,
    fragment row 0 (add ``a_row_offset(t, mi, 0)``)."""
    j, r = div(lane, 8), mod(lane, 8)
    row = add(wm, add(mul(mod(j, 2), idx(8)), r))
    return address(t, "x", row, add(idx(16 * kk), mul(div(j, 2), idx(8))))


def f16_b_base(t: MmaTiles, wn: Expr, lane: Expr, p: int) -> Expr:
    """f16: local half of the row lane ``lane`` gives ``ldmatrix.trans`` for B fragments
    ``2 p`` and ``2 p + 1``, sub-step 0 (add ``b16_row_offset``)."""
    j, r = div(lane, 8), mod(lane, 8)
    row = add(mul(mod(j, 2), idx(8)), r)
    return address(t, "y", row, add(wn, add(idx(16 * p), mul(div(j, 2), idx(8)))))


def b16_row_offset(t: MmaTiles, kk: int) -> int:
    return 16 * kk * row_length(t, "y")


def f16_bk_base(t: MmaTiles, wn: Expr, lane: Expr, kk: int) -> Expr:
    """f16, B tile along K: local half of the row lane ``lane`` gives ``ldmatrix`` for B
    fragments 0 and 1 at sub-step ``kk`` (add ``a_row_offset``-like ``16 p`` rows for
    fragments ``2 p``, ``2 p + 1``: the swizzle reads only row bits 0-2)."""
    j, r = div(lane, 8), mod(lane, 8)
    row = add(wn, add(mul(div(j, 2), idx(8)), r))
    return address(t, "y", row, add(idx(16 * kk), mul(mod(j, 2), idx(8))))
