"""Hopper's ``wgmma`` through OpenCL C: deferred PTX instructions and their expansion.

NVIDIA's OpenCL compiler emits PTX for ``.target sm_90`` and rejects ``wgmma``, an ``sm_90a``
feature (it has no option for ``sm_90a``). So a generator writes each such instruction as a
*marker*, a PTX comment inside inline asm (``// @@NAME operands``): the compiler binds the
operands to registers and keeps the statement where it is (volatile, memory clobber), ptxas
ignores the text. The OpenCL runtime then takes the program's PTX, replaces every marker by its
instructions (:func:`expand`: the registers the compiler bound are in the comment), sets
``.target sm_90a`` and builds the program again from that PTX
(:func:`accy.backends.opencl.tensor_cores.build_program`); only on devices of compute
capability 9.0 whose probe ran the very forms below (``WGMMA_F16`` in
``TargetProfile.tensor_cores``).

Markers (the operands the comment lists, in order):

- ``RSTEP{n}_{s}_{t}``: one K step of ``s`` wgmma ``m64n{n}k16`` with f32 accumulators, A from
  registers and B from local memory by descriptor (``t`` = 1: B's core matrices MN-major, B
  stored K x N): the ``n / 2`` accumulators, ``4 s`` A registers (the ``mma.sync`` m16n8k16 A
  fragment of the warp's 16 rows, per wgmma), B's descriptor (advanced 256 bytes, two core
  matrices along K, per wgmma), a register holding 1 (accumulate). Fenced before, committed
  after, in one statement, so the compiler moves no accumulator between them.
- ``TSTEP{n}_{s}_{p}``: the same for TF32 (``m64n{n}k8``, B's core matrices K-major, the only
  form TF32 has): ``p`` products of ``s`` k8 steps each, the ``n / 2`` accumulators, then
  ``4 s`` A registers per product (the ``mma.sync`` m16n8k8 TF32 A fragment), then one B
  descriptor per product (3xTF32: small x big, big x small, big x big).
- ``SSTEP{n}_{s}_{a}_{b}_{t}``: one K step of ``s`` wgmma ``m64n{n}k16`` with A and B both
  from local memory by descriptor (A K-major, B MN-major where ``t`` = 1, else K-major;
  :mod:`accy.kernels.wgmma_ss`): the ``n / 2`` accumulators, A's descriptor, B's, a register
  holding 1; the descriptors advance by ``a`` and ``b`` (16-byte units) per wgmma.
- ``SSTEPT{n}_{s}_{a}_{b}[x{p}]``: the same in TF32 (``m64n{n}k8``, both operands K-major, the
  only form TF32 has); with ``x{p}``, ``p`` runs of them, a pair of descriptors a run (3xTF32's
  products, :mod:`accy.kernels.wgmma_ss3`).
- ``WAIT0``: ``wgmma.wait_group 0``; its operands (the accumulators, the A registers) are the
  registers the waited-for wgmma read or write, kept live until here.
- ``WAIT1``: ``wgmma.wait_group 1``: all but the last step's wgmma done (operands as
  ``WAIT0``'s).
- ``PROXY``: ``fence.proxy.async.shared::cta``: copies into local memory made visible to the
  asynchronous proxy wgmma reads it through.

``RSTEP`` takes a fourth field, ``_{advance}``, where B's descriptor advances other than 16
(16-byte units) per wgmma (the TMA kernel's swizzled stages, :mod:`accy.kernels.wgmma_tma`).
:func:`expand` also expands the TMA and ``mbarrier`` markers (:mod:`accy.kernels.tma`).
"""

from __future__ import annotations

import re

MARK = "// @@"
"""What a source with deferred instructions holds (and nothing else does)."""

_MARKER = re.compile(r"//\s*@@(\w+)([^\n]*)")
_TARGET = re.compile(r"\.target\s+sm_90\b")
_VERSION = re.compile(r"\.version\s+(\d+)\.(\d+)")


def rstep(n: int, steps: int, trans_b: int, advance: int = 16) -> str:
    """The marker text of :func:`step_instructions` (operands follow)."""
    return f"{MARK}RSTEP{n}_{steps}_{trans_b}" + (f"_{advance}" if advance != 16 else "")


def _wgmma_steps(n: int, steps: int, d: list[str], a_of, one: str,
                 runs: list[list[tuple[str, str, int]]], trans: str | None) -> str:
    """Runs of ``steps`` f16 wgmma ``m64n{n}k16`` (TF32 ``m64n{n}k8`` where ``trans`` is None)
    into accumulators ``d``, fenced before and committed after in one block: step ``i``'s A
    operand ``a_of(i)``, B's descriptor ``xb``; each run's descriptors (register, value,
    advance in 16-byte units a step) held in registers; ``trans`` the immediates after the
    scales."""
    shape, imms = ("k8.f32.tf32.tf32", "") if trans is None else ("k16.f32.f16.f16", f", {trans}")
    text = [f"{{ .reg .pred p; .reg .b64 {', '.join(r for r, _, _ in runs[0])}; setp.ne.b32 p, "
            f"{one}, 0;"]
    for j, descs in enumerate(runs):
        text += [f"mov.b64 {r}, {v};" for r, v, _ in descs]
        text += [] if j else ["wgmma.fence.sync.aligned;"]
        for i in range(steps):
            if i:
                text += [f"add.s64 {r}, {r}, {adv};" for r, _, adv in descs]
            text.append(f"wgmma.mma_async.sync.aligned.m64n{n}{shape} {{{', '.join(d)}}}, "
                        f"{a_of(i)}, xb, p, 1, 1{imms};")
    return " ".join(text) + " wgmma.commit_group.sync.aligned; }"


def step_instructions(n: int, steps: int, trans_b: int, ops: list[str], advance: int = 16
                      ) -> str:
    """What marker ``RSTEP{n}_{steps}_{trans_b}[_{advance}]`` with operands ``ops`` expands
    to (B's descriptor advanced by ``advance`` (16-byte units) per wgmma)."""
    d, a, db, one = ops[:n // 2], ops[n // 2:-2], ops[-2], ops[-1]
    if len(a) != 4 * steps:
        raise ValueError(f"wgmma step marker: {len(ops)} operands for n={n}, {steps} steps")
    return _wgmma_steps(n, steps, d, lambda i: f"{{{', '.join(a[4 * i:4 * i + 4])}}}", one,
                        [[("xb", db, advance)]], str(trans_b))


def sstep(n: int, steps: int, a_advance: int, b_advance: int, trans_b: int | None,
          products: int = 1) -> str:
    """The marker text of :func:`ss_instructions` (operands follow): TF32's where ``trans_b``
    is None, of ``products`` runs (TF32 only)."""
    if trans_b is None:
        runs = f"x{products}" if products > 1 else ""
        return f"{MARK}SSTEPT{n}_{steps}_{a_advance}_{b_advance}{runs}"
    return f"{MARK}SSTEP{n}_{steps}_{a_advance}_{b_advance}_{trans_b}"


def ss_instructions(n: int, steps: int, a_advance: int, b_advance: int, trans_b: int | None,
                    ops: list[str], products: int = 1) -> str:
    """What marker ``SSTEP{n}_{steps}_{a_advance}_{b_advance}_{trans_b}`` with operands
    ``ops`` expands to: ``steps`` wgmma ``m64n{n}k16`` with A (K-major) and B (MN-major where
    ``trans_b``, else K-major) both from local memory by descriptor, each advanced by its
    ``advance`` (16-byte units) per wgmma; TF32's ``m64n{n}k8`` (``SSTEPT``, both K-major)
    where ``trans_b`` is None, ``products`` runs of them (``SSTEPT..x{products}``: a pair of
    descriptors a run, the 3xTF32 products of :mod:`accy.kernels.wgmma_ss3`)."""
    if len(ops) != n // 2 + 2 * products + 1:
        raise ValueError(f"wgmma SS step marker: {len(ops)} operands for n={n}, "
                         f"{products} products")
    d, descs, one = ops[:n // 2], ops[n // 2:-1], ops[-1]
    return _wgmma_steps(n, steps, d, lambda i: "xa", one,
                        [[("xa", descs[2 * j], a_advance), ("xb", descs[2 * j + 1], b_advance)]
                         for j in range(products)],
                        None if trans_b is None else f"0, {trans_b}")


def tstep(n: int, steps: int, products: int) -> str:
    """The marker text of :func:`tf32_instructions` (operands follow)."""
    return f"{MARK}TSTEP{n}_{steps}_{products}"


def tf32_instructions(n: int, steps: int, products: int, ops: list[str]) -> str:
    """What marker ``TSTEP{n}_{steps}_{products}`` expands to: ``products`` runs of ``steps``
    TF32 wgmma ``m64n{n}k8`` into the ``n / 2`` accumulators (operands first), each from its
    ``4 steps`` A registers (the operands after the accumulators, product by product) and its
    B descriptor (the last ``products`` operands, advanced 256 bytes per wgmma)."""
    d, a, descs = ops[:n // 2], ops[n // 2:-products], ops[-products:]
    if len(a) != 4 * steps * products:
        raise ValueError(f"TF32 wgmma step marker: {len(ops)} operands for n={n}, {steps} "
                         f"steps, {products} products")
    regs = ", ".join(d)
    text = ["{ .reg .pred p; .reg .b64 xb; setp.ne.b32 p, 1, 0; wgmma.fence.sync.aligned;"]
    for j, desc in enumerate(descs):
        text.append(f"mov.b64 xb, {desc};")
        for i in range(steps):
            if i:
                text.append("add.s64 xb, xb, 16;")
            at = 4 * (steps * j + i)
            text.append(f"wgmma.mma_async.sync.aligned.m64n{n}k8.f32.tf32.tf32 {{{regs}}}, "
                        f"{{{', '.join(a[at:at + 4])}}}, xb, p, 1, 1;")
    return " ".join(text) + " wgmma.commit_group.sync.aligned; }"


WAIT0 = f"{MARK}WAIT0"
WAIT1 = f"{MARK}WAIT1"
PROXY = f"{MARK}PROXY"
# a fence (MEMBAR.ALL.CTA) ptxas moves no wgmma issue across: a wgmma issued before it stays
# ahead of the work after it (accy.kernels.attention_wgmma.PIN)
HOLD = f"{MARK}HOLD"
_FIXED = {"WAIT0": "wgmma.wait_group.sync.aligned 0;",
          "WAIT1": "wgmma.wait_group.sync.aligned 1;",
          "PROXY": "fence.proxy.async.shared::cta;",
          "HOLD": "fence.acq_rel.cta;"}


def descriptor_bits(lbo: int, sbo: int, swizzle_128b: bool = False) -> int:
    """The fixed fields of a wgmma shared-memory matrix descriptor: leading and stride byte
    offsets (each stored >> 4 in 14 bits, at bits 16 and 32) and the layout (bits 62-63: 0
    no swizzling, 1 the 128-byte swizzle TMA writes). The start address (bits 0-13: the
    18-bit local address >> 4) is added per use."""
    return ((lbo >> 4) & 0x3FFF) << 16 | ((sbo >> 4) & 0x3FFF) << 32 | int(swizzle_128b) << 62


def expand(ptx: str) -> str:
    """``ptx`` with every marker replaced by its instructions, for ``.target sm_90a`` (PTX ISA
    8.0 at least). Raises ValueError on a marker it does not know."""
    def repl(m: re.Match) -> str:
        name, ops = m.group(1), [o.strip() for o in m.group(2).split(",") if o.strip()]
        if name in _FIXED:
            return _FIXED[name]
        if tf32 := re.fullmatch(r"TSTEP(\d+)_(\d+)_(\d+)", name):
            return tf32_instructions(int(tf32[1]), int(tf32[2]), int(tf32[3]), ops)
        if ss := (re.fullmatch(r"SSTEP(\d+)_(\d+)_(\d+)_(\d+)_([01])()", name)
                  or re.fullmatch(r"SSTEPT(\d+)_(\d+)_(\d+)_(\d+)()(?:x(\d+))?", name)):
            n, steps, a_adv, b_adv = (int(v) for v in ss.groups()[:4])  # (T: TF32)
            return ss_instructions(n, steps, a_adv, b_adv, int(ss[5]) if ss[5] else None, ops,
                                   int(ss[6] or 1))
        step = re.fullmatch(r"RSTEP(\d+)_(\d+)_([01])(?:_(\d+))?", name)
        if step is None:
            raise ValueError(f"unknown deferred PTX marker @@{name}")
        return step_instructions(int(step[1]), int(step[2]), int(step[3]), ops,
                                 int(step[4] or 16))

    from accy.kernels.tma import expand as tma_expand  # (tma imports MARK from here)

    ptx = _TARGET.sub(".target sm_90a", _MARKER.sub(repl, tma_expand(ptx)))
    return at_least(ptx, (8, 0))


def at_least(ptx: str, version: tuple[int, int]) -> str:
    """``ptx`` declaring PTX ISA ``version`` where it declared an older one."""
    m = _VERSION.search(ptx)
    if m and (int(m.group(1)), int(m.group(2))) < version:
        ptx = ptx.replace(m.group(0), f".version {version[0]}.{version[1]}", 1)
    return ptx
