"""``accy calibrate``: fit the ``measured`` cost model's coefficients on an OpenCL device.

Micro-programs, a few per op kind and size class (an elementwise chain of 1 and 6 cheap or
transcendental ops, a row reduction and a full one, pairwise contractions of each shape class
of ``kernel_cost.contraction_class`` -- square, small-k over small dimensions as a tensor
network's steps, small-output dot products, batched --, softmax rows, gathers, scatter-adds,
cross-entropies, and per float elementwise op a row reduction of sums of it), then larger
ones of each series (``GROWTH``: about 8x the work a step) until the series' largest takes
``GROW_UNTIL`` times its smallest, its data would pass ``MAX_BYTES`` (or the device's largest
buffer), or ``MAX_GROWTH`` steps: a fixed list sized for a CPU is all launch overhead on a
GPU, where the fit must see kernels from launch-bound to bandwidth- and compute-bound to
price the programs' own sizes. They go through accy's own pipeline (``accy-default`` without
``saturate``, so they stay as written) and are timed on the device: the median of
``repeats`` calls of the sum of the OpenCL profiling events, after a warm-up call. Per heavy
kind and contraction class, ``time = launch + per_byte * bytes + per_flop * flops`` is fitted
by non-negative least squares (so time never falls as a size grows) over that kind's programs
(gathers, scatter-adds, losses, reductions and row ops by bytes alone: their FLOPs go with
their bytes), with bytes and FLOPs counted exactly as :mod:`accy.egraph.kernel_cost` prices an
e-node, and the series' own times are kept for the model to interpolate; the elementwise
chains fit ``launch + per_byte * bytes + cheap * elements + transcendental * elements``, whose
two per-element terms are what a fused elementwise e-node of no timed op costs, and each op
series gives its op's own per-element time (:func:`element_ops`). About 25 s on PoCL.

The result goes to ``kernel_cost.calibration_path(device key)`` (the device's
``platform:device:driver``; a new driver gets a new file) through ``accy.files`` (a private
folder, an atomic write), and ``devices.json`` maps the selector to it. A calibration on file
is reused unless ``force`` (or a full one is asked for where a ``quick`` one lies).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from accy.egraph import kernel_cost as kc
from accy.egraph.cost import bytes_moved, flops
from accy.files import atomic_write, private_dir
from accy.ir.ops import Op
from accy.ir.program import Program

__all__ = ["MICRO_PROGRAMS", "calibrate", "fit", "micro_programs", "samples_of"]

# the float elementwise ops timed one by one (``op:NAME`` series: a sum of 4 applications
# summed along rows, so fused into a reduction kernel as most elementwise ops are), to price
# a fused e-node of that op per element: pow, erf or a division differ by 10-100x on a CPU
# although all are "transcendental"; the other elementwise ops are priced by their class
ELEMENT_OPS = ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "reciprocal",
               "floor", "ceil", "erf", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh", "add",
               "sub", "mul", "div", "max", "min", "pow")

# the pow series' exponents: whole ones, as in x**2 (a variance) or x**3 (gelu-tanh); a
# fractional exponent takes several times longer on some devices (PoCL), and is underpriced
_EXPONENTS = (2.0, 3.0)
OP_ROW = 256  # row length of the op series' reductions

# (kind, parameters) per micro-program; sizes chosen to span launch-bound to bandwidth-bound
# on a CPU within about a minute of PoCL builds and runs (``quick``: tiny, for tests)
MICRO_PROGRAMS: dict[str, list[tuple[str, tuple[int, ...]]]] = {
    "full": [
        *[("cheap", (n, k)) for n in (1 << 12, 1 << 18) for k in (1, 6)],
        *[("transcendental", (n, k)) for n in (1 << 12, 1 << 18) for k in (1, 6)],
        ("reduce", (64, 64)), ("reduce", (256, 512)), ("reduce", (1024, 1024)),
        ("reduce", (1, 1 << 18)),
        ("contraction:square", (64, 64, 64)), ("contraction:square", (128, 256, 128)),
        ("contraction:square", (256, 256, 256)),
        ("contraction:small-k", (16, 4, 8)), ("contraction:small-k", (32, 4, 16)),
        ("contraction:small-output", (16, 256, 16)), ("contraction:small-output", (16, 2048, 16)),
        ("contraction:batched", (8, 16, 16, 16)), ("contraction:batched", (8, 64, 64, 64)),
        ("rowwise", (64, 64)), ("rowwise", (256, 512)), ("rowwise", (1024, 1024)),
        ("gather", (256, 32, 128)), ("gather", (2048, 64, 1024)), ("gather", (8192, 128, 4096)),
        ("scatter_add", (256, 32, 128)), ("scatter_add", (2048, 64, 1024)),
        ("scatter_add", (8192, 128, 4096)),
        ("loss", (32, 64)), ("loss", (256, 512)), ("loss", (1024, 1024)),
        *[(f"op:{op}", (n, 4)) for op in ELEMENT_OPS for n in (1 << 12, 1 << 18)],
    ],
    "quick": [
        ("cheap", (64, 1)), ("cheap", (256, 3)), ("transcendental", (64, 1)),
        ("transcendental", (256, 3)),
        ("reduce", (4, 8)), ("reduce", (16, 32)), ("contraction:square", (64, 32, 64)),
        ("contraction:square", (64, 64, 64)), ("contraction:small-k", (16, 4, 2)),
        ("contraction:small-k", (24, 4, 2)), ("contraction:small-output", (4, 32, 4)),
        ("contraction:small-output", (4, 64, 4)), ("contraction:batched", (2, 4, 4, 4)),
        ("contraction:batched", (2, 8, 8, 8)), ("rowwise", (4, 8)), ("rowwise", (16, 32)),
        ("gather", (16, 4, 8)), ("gather", (64, 8, 32)), ("scatter_add", (16, 4, 8)),
        ("scatter_add", (64, 8, 32)), ("loss", (4, 8)), ("loss", (16, 32)),
        ("op:pow", (64, 2)), ("op:div", (64, 2)),
    ],
}


# the next micro-program of a series: about 8x the work of ``dims``
GROWTH: dict[str, Callable[[tuple[int, ...]], tuple[int, ...]]] = {
    "cheap": lambda d: (d[0] * 8, d[1]),
    "transcendental": lambda d: (d[0] * 8, d[1]),
    "reduce": lambda d: (d[0] * 4, d[1] * 2),
    "contraction:square": lambda d: (d[0] * 2, d[1] * 2, d[2] * 2),
    "contraction:small-k": lambda d: (d[0] * 2, d[1], d[2]),  # k stays small
    "contraction:small-output": lambda d: (d[0], d[1] * 8, d[2]),
    "contraction:batched": lambda d: (d[0], d[1] * 2, d[2] * 2, d[3] * 2),
    "rowwise": lambda d: (d[0] * 4, d[1] * 2),
    "gather": lambda d: (d[0] * 2, d[1] * 2, d[2] * 4),
    "scatter_add": lambda d: (d[0] * 2, d[1] * 2, d[2] * 4),
    "loss": lambda d: (d[0] * 4, d[1] * 2),
}
# the contraction series' einsums (letter sizes by ``_letter_sizes``): ``small-k`` multiplies
# small-dimension operands (two letters kept per side, one summed) like the pairwise steps
# of a tensor network; ``small-output`` sums a long letter into few outputs
CONTRACTION_SPECS = {
    "contraction:square": "ik,kj->ij",
    "contraction:small-k": "aik,kjb->aijb",
    "contraction:small-output": "ik,jk->ij",
    "contraction:batched": "bik,bkj->bij",
}


def _letter_sizes(kind: str, dims: tuple[int, ...]) -> tuple[int, ...]:
    """The sizes of a contraction series' letters, in alphabetical order, from its dims."""
    if kind == "contraction:square":
        m, k, n = dims
        return (m, n, k)  # i, j, k
    if kind == "contraction:small-k":
        chi, phys, k = dims  # a, b: chi; i, j: phys; k summed
        return (chi, chi, phys, phys, k)
    if kind == "contraction:small-output":
        m, k, n = dims
        return (m, n, k)
    b, m, k, n = dims
    return (b, m, n, k)


GROWTH.update({f"op:{op}": GROWTH["cheap"] for op in ELEMENT_OPS})
GROW_UNTIL = 30.0  # a series grows until its largest program takes this x its smallest
MAX_GROWTH = 5  # steps past the fixed list, per series
MAX_BYTES = 256 << 20  # parameters + results of one micro-program


def _series(kind: str, dims: tuple[int, ...]) -> tuple[Any, ...]:
    """Programs of one series grow from each other: a chain's length is not scaled."""
    return (kind, dims[1]) if _is_chain(kind) else (kind,)


def _is_chain(kind: str) -> bool:
    """An elementwise micro-program: a chain of one class, or the sums of one op."""
    return kind in kc.ELEMENT_CLASSES or kind.startswith("op:")


def _nbytes(program: Program) -> int:
    fn = program.function()
    return sum(p.type.nbytes for p in fn.params) + sum(r.type.nbytes for r in fn.results)


def _program(kind: str, dims: tuple[int, ...]) -> Program:
    """One micro-program of ``kind`` at ``dims`` (see ``MICRO_PROGRAMS``)."""
    import accy
    from accy.builder import cross_entropy, einsum, gather, scatter_add, trace

    f32, i32 = accy.f32, accy.i32
    if kind in ("cheap", "transcendental"):
        n, k = dims

        def chain(x, y):
            v = x
            for i in range(k):  # alternate ops so no rule or fold could shorten the chain
                if kind == "cheap":
                    v = v * y if i % 2 == 0 else v + y
                else:
                    v = v.tanh() if i % 2 == 0 else v.exp()
            return v

        return trace(chain, f32[n], f32[n], name=f"{kind}{k}")
    if kind.startswith("op:"):
        n, k = dims
        op = Op(kind.removeprefix("op:"))

        def sums(x, y):
            fb = x.fb  # positive operands: a domain every op is finite on
            x, y = fb.op(Op.ABS, x) + 0.5, fb.op(Op.ABS, y) + 0.5
            total = None
            for i in range(k):  # other operands each time, so none is computed once
                xi = x if i == 0 else x * (1 + i / 8)
                if op is Op.POW:  # as programs use it: a constant exponent
                    e = fb.constant(np.array(_EXPONENTS[i % len(_EXPONENTS)], np.float32))
                    v = fb.op(op, xi, e)
                else:
                    v = fb.op(op, xi) if op.arity == 1 else fb.op(op, xi, y)
                total = v if total is None else total + v
            return total.sum(axes=-1)  # fused into a reduction, where most such ops run

        rows = max(n // OP_ROW, 1)
        return trace(sums, f32[rows, OP_ROW], f32[rows, OP_ROW], name="elementwise")
    if kind == "reduce":
        r, c = dims
        return trace(lambda x: x.sum(axes=-1), f32[r, c], name="reduce")
    if kind in CONTRACTION_SPECS:  # every series is one pairwise einsum of its class
        spec = CONTRACTION_SPECS[kind]
        terms = spec.split("->")[0].split(",")
        size = dict(zip("".join(sorted(set("".join(terms)))), _letter_sizes(kind, dims),
                        strict=True))
        return trace(lambda a, b: einsum(spec, a, b),
                     *(f32[tuple(size[c] for c in t)] for t in terms), name="contraction")
    if kind == "rowwise":
        r, c = dims
        return trace(lambda x: x.softmax(-1), f32[r, c], name="rowwise")
    if kind == "gather":
        v, d, n = dims
        return trace(lambda t, ids: gather(t, ids, axis=0), f32[v, d], i32[n], name="gather")
    if kind == "scatter_add":
        v, d, n = dims
        return trace(lambda t, ids, u: scatter_add(t, ids, u, axis=0), f32[v, d], i32[n],
                     f32[n, d], name="scatter_add")
    if kind == "loss":
        n, c = dims
        return trace(cross_entropy, f32[n, c], i32[n], name="loss")
    raise KeyError(f"no micro-program of kind {kind!r}")


def micro_programs(quick: bool = False) -> list[tuple[str, tuple[int, ...], Program]]:
    """The calibration programs: ``(kind, dims, program)``."""
    return [(k, d, _program(k, d)) for k, d in MICRO_PROGRAMS["quick" if quick else "full"]]


def samples_of(kind: str, program: Program) -> dict[str, float]:
    """What the cost model counts in a micro-program: bytes and FLOPs of its heavy op(s), or
    for an elementwise chain the bytes of its inputs and result and the elements per class."""
    out: dict[str, Any] = {"bytes": 0.0, "flops": 0.0, "cheap": 0.0, "transcendental": 0.0,
                           "ops": {}}
    fn = program.function()
    if kind in kc.ELEMENT_CLASSES:  # the op series pay their reduction's bytes, below
        out["bytes"] = float(sum(p.type.nbytes for p in fn.params)
                             + sum(r.type.nbytes for r in fn.results))
    for n in program.nodes():
        cls = kc.op_class(n.op)
        types = tuple(s.type for s in n.srcs)
        if cls in kc.ELEMENT_CLASSES:
            out[cls] += n.type.size
            out["ops"][n.op.value] = out["ops"].get(n.op.value, 0) + n.type.size
        elif cls == "contraction":
            for _, work, read, written in kc.einsum_steps(str(n.attr("spec")),
                                                          tuple(t.shape for t in types)):
                out["flops"] += work
                out["bytes"] += n.type.dtype.itemsize * (read + written)
        elif cls in kc.HEAVY_KINDS:
            out["bytes"] += bytes_moved(n.op, n.type, types, dict(n.attrs))
            out["flops"] += flops(n.op, n.type, types, dict(n.attrs))
    return out


def _inputs(program: Program, rng: np.random.Generator) -> list[np.ndarray]:
    fn = program.function()
    first = fn.params[0].type.shape  # the table (its rows) or the logits (their classes)
    bound = first[-1] if fn.name == "loss" else first[0]
    return [rng.integers(0, bound, p.type.shape).astype(p.type.dtype.numpy)
            if p.type.dtype.is_int else
            rng.standard_normal(p.type.shape).astype(p.type.dtype.numpy) for p in fn.params]


def time_program(program: Program, runtime: Any, repeats: int) -> float:
    """Median kernel time (ns) of ``program`` prepared without saturation, on ``runtime``."""
    import accy
    from accy.backends.registry import open_device
    from accy.experiments.measure import edit_pipeline

    pipe = edit_pipeline("accy-default", lambda p: None if p.name == "saturate" else p)
    job = accy.prepare(program, pipe, target=open_device(runtime)[1])
    exe = job.executable(device=runtime)
    inputs = _inputs(program, np.random.default_rng(0))
    exe(*inputs)  # warm-up: buffers, constants, the driver's first launch
    times = []
    for _ in range(max(repeats, 1)):
        exe(*inputs)
        times.append(sum(exe.last_kernel_ns))
    return float(statistics.median(times))


def fit(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Coefficients (picoseconds) per kind from ``samples`` (``kind``, ``ns`` and the counts of
    :func:`samples_of`): non-negative least squares of the *relative* error (each row divided
    by its time: a 1 us kernel matters as much as a 1 ms one, since a cost only has to rank),
    each column scaled to unit size first so that bytes and FLOPs (millions) and the launch
    column (one) weigh alike. Contractions fit launch, bytes and FLOPs, per shape class
    (``contraction:CLASS``) and pooled (``contraction``, for conv2d); the other heavy kinds,
    whose FLOPs go with their bytes, launch and bytes. Each fit also keeps its series as
    ``points`` (feature, time) for :meth:`kernel_cost.Fit.time` to interpolate: FLOPs for a
    contraction class, bytes for the rest."""
    from scipy.optimize import nnls

    def solve(rows: list[list[float]], ys: list[float]) -> list[float]:
        y = np.maximum(np.asarray(ys, dtype=np.float64), 1.0) * 1e3  # ns -> ps
        a = np.asarray(rows, dtype=np.float64) / y[:, None]
        scale = np.maximum(np.abs(a).max(axis=0), 1e-30)
        coef, _ = nnls(a / scale, np.ones_like(y))
        return [float(c) for c in coef / scale]

    def of(group: list[dict[str, Any]], feature: str) -> dict[str, Any]:
        if feature == "flops":
            launch, per_byte, per_flop = solve([[1.0, s["bytes"], s["flops"]] for s in group],
                                               [s["ns"] for s in group])
        else:
            (launch, per_byte), per_flop = solve([[1.0, s["bytes"]] for s in group],
                                                 [s["ns"] for s in group]), 0.0
        return {"launch": launch, "per_byte": per_byte, "per_flop": per_flop,
                "feature": feature, "points": series_points(group, feature)}

    kinds: dict[str, dict[str, Any]] = {}
    for kind in (*kc.HEAVY_KINDS, *(f"contraction:{c}" for c in kc.CONTRACTION_CLASSES)):
        group = [s for s in samples if s["kind"] == kind
                 or (kind == "contraction" and s["kind"].startswith("contraction:"))]
        if not group:
            raise ValueError(f"no calibration samples of kind {kind}")
        kinds[kind] = of(group, "flops" if kind.startswith("contraction") else "bytes")
    kinds["contraction"]["points"] = []  # pooled over classes: no one series to follow
    chains = [s for s in samples if s["kind"] in kc.ELEMENT_CLASSES]
    if not chains:
        raise ValueError("no calibration samples of elementwise chains")
    launch, per_byte, cheap, trans = solve(
        [[1.0, s["bytes"], s["cheap"], s["transcendental"]] for s in chains],
        [s["ns"] for s in chains])
    kinds_all = {**kinds, "elementwise": {"launch": launch, "per_byte": per_byte,
                                          "per_flop": 0.0}}
    # a fused elementwise e-node costs its arithmetic; keep it above zero so that a longer
    # chain never ties a shorter one when the fit put the work on bytes (noise)
    floor = 1e-3 * max(per_byte, 1e-3)
    element = {"cheap": max(cheap, floor), "transcendental": max(trans, cheap, floor)}
    # the least time of a contraction summing K elements per output: the small-output series
    # (dims m, K, n: few outputs, ever longer sums) against K (kernel_cost.KernelCost.depth)
    long = [s for s in samples if s["kind"] == "contraction:small-output"]
    depth_launch, per_element = solve([[1.0, float(s["dims"][1])] for s in long],
                                      [s["ns"] for s in long])
    return {"kinds": kinds_all, "element": element,
            "element_ops": element_ops(samples, kc.Fit.read(kinds["reduce"]), element, floor),
            "node": 1.0, "movement": 1.0,
            "depth": {"launch": depth_launch, "per_element": per_element}}


def element_ops(samples: list[dict[str, Any]], reduce: kc.Fit,
                element: dict[str, float], floor: float) -> dict[str, float]:
    """Picoseconds per element of each op timed by an ``op:NAME`` series: of its largest
    program (the one its op dominates most), the time the reduction's fit (``reduce``) leaves
    unexplained once the other elementwise ops are paid, per element of the op (at least
    ``floor``)."""
    out: dict[str, float] = {}
    for kind in sorted({s["kind"] for s in samples if s["kind"].startswith("op:")}):
        op = kind.removeprefix("op:")
        top = max((s for s in samples if s["kind"] == kind),
                  key=lambda s: s.get("ops", {}).get(op, 0))
        own = float(top.get("ops", {}).get(op, 0))
        if own <= 0:
            raise ValueError(f"calibration series {kind} has no element of op {op}")
        cls = kc.op_class(Op(op))
        others = {c: top[c] - (own if c == cls else 0.0) for c in kc.ELEMENT_CLASSES}
        base = reduce.time(top["bytes"], top["flops"]) + sum(
            element[c] * others[c] for c in kc.ELEMENT_CLASSES)
        out[op] = max((1e3 * top["ns"] - base) / own, floor)
    return out


def series_points(group: list[dict[str, Any]], feature: str) -> list[list[float]]:
    """A series' ``(feature, ps)`` points, feature ascending, one per feature value (the
    median time there), times made non-decreasing (a larger kernel is never cheaper: what a
    smaller one measured above it is noise)."""
    by: dict[float, list[float]] = {}
    for s in group:
        if s[feature] > 0:
            by.setdefault(float(s[feature]), []).append(max(float(s["ns"]), 1e-3) * 1e3)
    xs = sorted(by)
    ts = np.maximum.accumulate([statistics.median(by[x]) for x in xs]) if xs else []
    return [[x, float(t)] for x, t in zip(xs, ts, strict=True)]


def selector_of(device: str | None) -> str:
    """The selector a calibration is filed under: as ``select_device`` resolves ``None``."""
    return device or os.environ.get("ACCY_DEVICE", "").strip() or "pocl"


def calibrate(device: str | None = None, *, force: bool = False, quick: bool = False,
              repeats: int = 9, timer: Callable[[Program, Any, int], float] | None = None,
              log: Callable[[str], None] | None = None) -> Path:
    """The calibration file of ``device`` (a selector), made when missing or ``force``d.

    ``timer(program, runtime, repeats) -> ns`` replaces the device timing (tests)."""
    from accy.backends.registry import get_backend

    runtime = get_backend().select_device(device)
    key = runtime.info.key
    path = kc.calibration_path(key)
    folder = private_dir(kc.cache_dir())
    reuse = False
    if path.is_file() and not force:
        try:
            reuse = quick or not json.loads(path.read_text()).get("quick", False)
        except ValueError:
            reuse = False
    if not reuse:
        samples: list[dict[str, Any]] = []
        start = time.perf_counter()

        def run(kind: str, dims: tuple[int, ...], program: Program) -> None:
            ns = (timer or time_program)(program, runtime, repeats)
            samples.append({"kind": kind, "dims": list(dims),
                            "ns": ns, **samples_of(kind, program)})
            if log is not None:
                log(f"{kind:<15} {'x'.join(map(str, dims)):<14} {ns / 1e3:10.1f} us")

        for kind, dims, program in micro_programs(quick):
            run(kind, dims, program)
        if not quick:
            limit = min(MAX_BYTES, runtime.info.max_mem_alloc_size or MAX_BYTES)
            _grow(samples, run, limit)
        doc = {"format": kc.CALIBRATION_FORMAT, "quick": quick, "repeats": repeats,
               "device": {"key": key, "name": runtime.info.name,
                          "platform": runtime.info.platform,
                          "driver_version": runtime.info.driver_version},
               "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
               "seconds": round(time.perf_counter() - start, 3),
               "fits": fit(samples), "samples": samples}
        atomic_write(path, json.dumps(doc, indent=1) + "\n")
    _file_selector(folder, selector_of(device), path.stem)
    return path


def _grow(samples: list[dict[str, Any]],
          run: Callable[[str, tuple[int, ...], Program], None], limit: int) -> None:
    """Time larger micro-programs per series (module docstring) until each is long enough."""
    series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for s in samples:
        series.setdefault(_series(s["kind"], tuple(s["dims"])), []).append(s)
    for group in series.values():
        # grow from the most work (the timing may not order the small ones: noise)
        last = max(group, key=lambda s: (s["bytes"] + s["flops"] + s["cheap"]
                                         + s["transcendental"]))
        for _ in range(MAX_GROWTH):
            if max(s["ns"] for s in group) >= GROW_UNTIL * min(s["ns"] for s in group):
                break
            kind, dims = last["kind"], GROWTH[last["kind"]](tuple(last["dims"]))
            program = _program(kind, dims)
            if _nbytes(program) > limit:
                break
            run(kind, dims, program)
            last = samples[-1]
            group.append(last)


def _file_selector(folder: Path, selector: str, digest: str) -> None:
    """Record in ``devices.json`` that ``selector`` selects the device of ``digest``."""
    index = kc.index_path()
    try:
        doc = json.loads(index.read_text())
        doc = doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        doc = {}
    if doc.get(selector) != digest:
        doc[selector] = digest
        atomic_write(folder / index.name, json.dumps(doc, indent=1, sort_keys=True) + "\n")
