"""Hopper's Tensor Memory Accelerator (TMA) from OpenCL C: tensor maps and bulk tensor copies.

A ``cp.async.bulk.tensor`` copies a box of a tensor from global into local memory in one
instruction, swizzling it on the way (the layout ``wgmma`` reads without bank conflicts), and
signals an ``mbarrier`` when its bytes have landed. It reads the tensor's geometry from a
*tensor map*, a 128-byte object the CUDA driver encodes (``cuTensorMapEncodeTiled``; NVIDIA's
OpenCL has no such call, and its format is not documented). So a generator encodes a
*template* when it builds the kernel (:func:`template`, through the driver's ``libcuda``, with a
placeholder address: the kernel's geometry is fixed, its buffers are not), the template's words
go into the kernel as immediates, and at run time one work-item of each work-group writes them
to its own 128 bytes of scratch memory, puts the operand's address in with
``tensormap.replace`` and fences the tensor-map proxy (marker ``TMAP``): no host code runs per
launch. The scratch lives as long as the executable's frame, so with :data:`KEEP_MAPS` each
work-group also keeps the address it last wrote (a *tag* after its maps) and, where a later
launch finds the same address there, only fences the map for its copies: the release fence
(a GPU-wide memory barrier) runs on a map's first launch and after its operand moved.

The instructions are deferred PTX like ``wgmma`` (:mod:`accy.kernels.wgmma_ptx`: markers in
inline asm, expanded by :func:`expand` for ``.target sm_90a``, PTX ISA 8.3). Markers:

- ``TMAP`` ``map, address[, tag] ; w0 .. w15``: the tensor map at global ``map`` from the
  template's words with global address ``address``; with a ``tag`` (the global address of a
  64-bit word) only where the tag does not hold ``address`` already, then the tag set to it.
- ``MBINIT{count}`` ``bar``: ``mbarrier`` at local ``bar`` initialised for ``count``
  arrivals.
- ``MBEXPECT{bytes}`` ``bar``: the arrival that expects ``bytes`` of copies.
- ``MBARRIVE`` ``bar``: an arrival.
- ``TMA{rank}`` ``dst, map, c0 .. c{rank-1}, bar ; geometry``: the box at coordinates ``c``
  into local ``dst``, completing on ``bar`` (:func:`geometry_text` after the operands).
- ``MBWAIT`` ``bar, phase``: wait until ``bar``'s phase of parity ``phase`` has completed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import re
from collections.abc import Iterator

from accy.ir.types import DType
from accy.kernels.ir import (
    INDEX,
    Bin,
    Cast,
    Expr,
    If,
    InlineAsm,
    Lit,
    Stmt,
    Var,
    add,
    div,
    idx,
    mod,
    mul,
)
from accy.kernels.wgmma_ptx import MARK, at_least

F16 = 6  # CU_TENSOR_MAP_DATA_TYPE_FLOAT16
# CU_TENSOR_MAP_DATA_TYPE_TFLOAT32: f32 elements, rounded to TF32 by the copy (to nearest; the
# device probe checks it, ``TMA_TF32`` in ``TargetProfile.tensor_cores``)
TF32 = 11
ELEMENT_BYTES = {F16: 2, TF32: 4}
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B: 16-byte chunk c of row r at c ^ (r % 8)
PLACEHOLDER = 1 << 20  # the template's global address (aligned; replaced per launch)
MAP_BYTES = 128
# a work-group's maps are kept between launches and rewritten only for operands that moved
# (tags after the maps, :func:`region`); off, every launch writes and releases its maps
KEEP_MAPS = True


@functools.cache
def _libcuda() -> tuple[ctypes.CDLL, ctypes.c_void_p] | None:
    """The CUDA driver and a context on its first device (encoding wants a current one;
    the device's primary context, which NVIDIA's OpenCL does not use), or None."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    if lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(dev), 0) or \
            lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev):
        return None
    return lib, ctx


# Planning without the device (:func:`offline`; experiments/ab_gemm.py --plans-only): where no
# CUDA driver loads, template() checks the geometry by the driver's documented requirements
# (refusal) and gives words of zeros for one they allow, so that kernel selection sees the
# tensor maps a device would have; kernels planned so must never run
OFFLINE = False


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """:data:`OFFLINE` inside the block: tensor maps planned without a CUDA driver."""
    global OFFLINE
    saved, OFFLINE = OFFLINE, True
    try:
        yield
    finally:
        OFFLINE = saved


def template(dtype: int, dims: tuple[int, ...], strides: tuple[int, ...],
             box: tuple[int, ...], swizzle: int = SWIZZLE_128B) -> tuple[int, ...] | str:
    """The 16 little-endian 64-bit words of a tensor map of a ``dtype`` tensor of ``dims``
    (innermost first) whose dimensions after the first are ``strides`` bytes apart, copied in
    boxes of ``box`` elements, with out-of-bounds elements zero-filled; or why not (no CUDA
    driver on this machine, or one that refuses the geometry). :data:`OFFLINE` without a
    driver: zeros where :func:`refusal` finds nothing."""
    if OFFLINE and _libcuda() is None:
        return refusal(dtype, dims, strides, box, swizzle) or (0,) * 16
    return _encoded(dtype, dims, strides, box, swizzle)


def refusal(dtype: int, dims: tuple[int, ...], strides: tuple[int, ...],
            box: tuple[int, ...], swizzle: int = SWIZZLE_128B) -> str | None:
    """Why ``cuTensorMapEncodeTiled`` would refuse the geometry, by its documented
    requirements (rank 1 to 5; sizes from 1 to 2^32; strides multiples of 16 bytes below
    2^40; boxes of 1 to 256 elements, the innermost a multiple of 16 bytes and, swizzled by
    128 bytes, at most 128), or None."""
    size, rank = ELEMENT_BYTES[dtype], len(dims)
    why = (f"rank {rank} (1 to 5)" if not 1 <= rank <= 5 else
           f"{len(strides)} strides and {len(box)} box sizes for rank {rank}"
           if len(strides) != rank - 1 or len(box) != rank else
           f"sizes {dims} (1 to 2^32)" if not all(1 <= d <= 1 << 32 for d in dims) else
           f"strides {strides} (multiples of 16 below 2^40)"
           if not all(s % 16 == 0 and 0 < s < 1 << 40 for s in strides) else
           f"box {box} (1 to 256)" if not all(1 <= b <= 256 for b in box) else
           f"an inner box of {box[0] * size} bytes (a multiple of 16)"
           if box[0] * size % 16 else
           f"an inner box of {box[0] * size} bytes swizzled by 128"
           if swizzle == SWIZZLE_128B and box[0] * size > 128 else None)
    return None if why is None else f"cuTensorMapEncodeTiled would refuse {why}"


@functools.lru_cache(maxsize=256)
def _encoded(dtype: int, dims: tuple[int, ...], strides: tuple[int, ...],
             box: tuple[int, ...], swizzle: int) -> tuple[int, ...] | str:
    """:func:`template` through the driver."""
    found = _libcuda()
    if found is None:
        return "no CUDA driver (libcuda.so.1) to encode a tensor map"
    lib, ctx = found
    raw = ctypes.create_string_buffer(MAP_BYTES + 64)
    at = (ctypes.addressof(raw) + 63) & ~63  # a CUtensorMap is 64-byte aligned
    rank = len(dims)
    u64, u32 = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
    lib.cuCtxPushCurrent(ctx)
    err = lib.cuTensorMapEncodeTiled(
        ctypes.c_void_p(at), ctypes.c_int(dtype), ctypes.c_uint32(rank),
        ctypes.c_void_p(PLACEHOLDER), u64(*dims), (ctypes.c_uint64 * max(rank - 1, 1))(*strides),
        u32(*box), u32(*([1] * rank)), ctypes.c_int(0), ctypes.c_int(swizzle), ctypes.c_int(2),
        ctypes.c_int(0))
    lib.cuCtxPopCurrent(ctypes.byref(ctypes.c_void_p()))
    if err:
        return (f"cuTensorMapEncodeTiled refused dims {dims}, strides {strides}, box {box} "
                f"(CUresult {err})")
    return tuple(int.from_bytes(ctypes.string_at(at + 8 * i, 8), "little") for i in range(16))


def geometry_text(dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...],
                  dtype: int = F16) -> str:
    """A ``TMA{rank}`` marker's trailing text: the map's geometry and data type, for an
    emulation of the copy (the expansion ignores it)."""
    return " / ".join(" ".join(map(str, v)) for v in (dims, strides, box, (dtype,)))


def tmap(words: tuple[int, ...], tagged: bool = False) -> str:
    """The marker text of ``TMAP`` (operands: the map's and the operand's global addresses,
    and ``tagged``: the tag's)."""
    return f"{MARK}TMAP %0, %1{', %2' if tagged else ''} ; " + " ".join(f"{w:#x}" for w in words)


def mbexpect(nbytes: int) -> str:
    return f"{MARK}MBEXPECT{nbytes}"


def tma(rank: int) -> str:
    return f"{MARK}TMA{rank}"


def mbinit(count: int) -> str:
    return f"{MARK}MBINIT{count}"


MBARRIVE, MBWAIT = f"{MARK}MBARRIVE", f"{MARK}MBWAIT"
_MARKER = re.compile(r"//\s*@@(TMAP|MBINIT\d+|MBEXPECT\d+|MBARRIVE|TMA\d|MBWAIT)([^\n]*)")


def _instructions(name: str, rest: str) -> str:
    text, _, words = rest.partition(";")
    ops = [o.strip() for o in text.split(",") if o.strip()]
    if name == "TMAP":
        stores = " ".join(f"mov.b64 w, {w}; st.global.u64 [{ops[0]}+{8 * i}], w;"
                          for i, w in enumerate(words.split()))
        write = (f"{stores} tensormap.replace.tile.global_address.global.b1024"
                 f".b64 [{ops[0]}], {ops[1]}; fence.proxy.tensormap::generic.release.gpu;")
        if len(ops) == 3:  # tagged: written only where the tag differs, then tagged
            write = (f".reg .pred p; ld.global.u64 w, [{ops[2]}]; setp.eq.u64 p, w, {ops[1]}; "
                     f"@p bra KEPT; {write} st.global.u64 [{ops[2]}], {ops[1]}; KEPT:")
        return (f"{{ .reg .b64 w; {write} "
                f"fence.proxy.tensormap::generic.acquire.gpu [{ops[0]}], 128; }}")
    if name.startswith("MBINIT"):
        return (f"mbarrier.init.shared::cta.b64 [{ops[0]}], {name[6:]}; "
                "fence.mbarrier_init.release.cluster; fence.proxy.async.shared::cta;")
    if name.startswith("MBEXPECT"):
        return (f"{{ .reg .b64 s; mbarrier.arrive.expect_tx.shared::cta.b64 s, [{ops[0]}], "
                f"{name[8:]}; }}")
    if name == "MBARRIVE":
        return f"{{ .reg .b64 s; mbarrier.arrive.shared::cta.b64 s, [{ops[0]}]; }}"
    if name == "MBWAIT":
        return (f"{{ .reg .pred p; WAIT: mbarrier.try_wait.parity.shared::cta.b64 p, "
                f"[{ops[0]}], {ops[1]}; @!p bra WAIT; }}")
    rank = int(name[3:])
    coords = ", ".join(ops[2:2 + rank])
    return (f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx"
            f"::bytes [{ops[0]}], [{ops[1]}, {{{coords}}}], [{ops[2 + rank]}];")


def expand(ptx: str) -> str:
    """``ptx`` with its TMA markers replaced by their instructions (PTX ISA 8.3 at least)."""
    if not _MARKER.search(ptx):
        return ptx
    return at_least(_MARKER.sub(lambda m: _instructions(m.group(1), m.group(2)), ptx), (8, 3))


# the markers as kernel IR statements, for the generators that copy by TMA (wgmma_tma,
# wgmma_ss, attention_tma): each work-group's maps in scratch, a full and an empty mbarrier a
# stage in the local i32 array BARRIERS
BARRIERS = "tma_bar"


def _asm(text: str, *ins: tuple[str, Expr]) -> Stmt:
    return InlineAsm(text, (), ins, True, ("memory",))


def barrier(stage: Expr, stages: int, empty: int = 0) -> Expr:
    """The local address of ``stage``'s full mbarrier (its copies landed) or ``empty`` one
    (every warp read it), of ``stages`` each in :data:`BARRIERS`."""
    at = add(mul(stage, idx(2)), idx(2 * stages * empty))
    return Cast(DType.i32, Cast(INDEX, Bin("+", Var(BARRIERS), at)))


def region(maps: int) -> int:
    """The bytes of scratch a work-group's ``maps`` tensor maps take (and their tags after
    them, under :data:`KEEP_MAPS`: a 128-byte block more, keeping the next region aligned)."""
    return (maps + KEEP_MAPS) * MAP_BYTES


def write_map(words: tuple[int, ...], base: Expr, index: int, maps: int,
              address: Expr) -> Stmt:
    """Map ``index`` of the ``maps`` in the region at global ``base``: template ``words``
    with the operand's ``address`` (under :data:`KEEP_MAPS`, only where its tag differs)."""
    at = map_at(base, index * MAP_BYTES)
    if not KEEP_MAPS:
        return _asm(tmap(words), ("l", at), ("l", address))
    tag = map_at(base, maps * MAP_BYTES + 8 * index)
    return _asm(tmap(words, True), ("l", at), ("l", address), ("l", tag))


def map_at(base: Expr, offset: int) -> Expr:
    """The global address ``offset`` bytes into the region at ``base``."""
    return Bin("+", base, Lit(offset, INDEX)) if offset else base


def init(bar: Expr, count: int) -> Stmt:
    return _asm(f"{mbinit(count)} %0", ("r", bar))


def wait(bar: Expr, phase: Expr) -> Stmt:
    """Wait until ``bar``'s phase of parity ``phase`` completed."""
    return _asm(f"{MBWAIT} %0, %1", ("r", bar), ("r", Cast(DType.i32, phase)))


def arrive(bar: Expr) -> Stmt:
    return _asm(f"{MBARRIVE} %0", ("r", bar))


def refill(step: Expr, stage: Expr, stages: int, nbytes: int) -> list[Stmt]:
    """The issuing work-item's wait for every warp to give ``stage`` back (where step
    ``step`` is not the stage's first use), then its arrival on the stage's full barrier
    expecting the step's ``nbytes``."""
    out: list[Stmt] = []
    if not (isinstance(step, Lit) and step.value < stages):  # the stage was used
        out.append(If(Bin(">=", step, idx(stages)), (wait(
            barrier(stage, stages, 1), mod(add(div(step, stages), idx(1)), 2)),)))
    out.append(_asm(f"{mbexpect(nbytes)} %0", ("r", barrier(stage, stages))))
    return out


def copy(dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...], dtype: int,
         dst: Expr, at: Expr, coords: list[Expr], bar: Expr) -> Stmt:
    """The box of the map at global ``at`` (of ``dims``, ``strides``, ``box``, ``dtype``) at
    ``coords`` into local address ``dst``, completing on ``bar``."""
    rank = len(box)
    text = (f"{tma(rank)} {', '.join(f'%{i}' for i in range(rank + 3))} ; "
            f"{geometry_text(dims, strides, box, dtype)}")
    return _asm(text, ("r", dst), ("l", at), *(("r", Cast(DType.i32, c)) for c in coords),
                ("r", bar))
