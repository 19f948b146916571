"""Cost models that price kernels: ``kernels`` (analytical) and ``measured`` (calibrated).

``flops-bytes`` charges every op for reading its operands and writing its result, so an
elementwise chain of ten ops costs ten round trips through memory, and an N-operand einsum
costs ``N * prod(every index size)`` although ``einsum-lowering`` runs it as a searched chain
of pairwise contractions. The fused kernels accy generates do neither, so that model and the
clock disagree (``papers/ablation.md``: under fast-math tensor_network's cost fell 5.8e7x
while its kernels got 1.7x slower). These two models price what the kernels do.

The approximation (stated, since an e-node's cost sees only its op, result type, operand
types and attributes, never its consumers):

* **movement** ops (reshape, transpose, broadcast, slice, concat) cost ``movement`` (1 ps):
  read by an elementwise consumer, reduction or row op they become index arithmetic. (A
  movement op read by a contraction is copied by a kernel of its own; the cost cannot see
  that, but the rule-written form without the movement costs one node less either way.)
* **elementwise** ops cost ``element_ops[op]`` (``measured``: each float op timed on its
  own) or else ``element[class]`` per element, plus ``node`` per e-node, no bytes: they fuse
  into their consumer's kernel (or take a producer as prologue), so their intermediates
  never make a memory round trip. The one chain that ends in memory (a function result)
  pays no write here: that write is the same whatever the rewrites did.
* **heavy** ops (reduction, contraction, row op, gather, scatter-add, loss) are kernel
  boundaries: ``launch + per_byte * bytes + per_flop * flops`` with their kind's
  coefficients, bytes being operands read once and result written once. An einsum of more
  than two operands is priced as ``einsum-lowering`` runs it: local sums, then the pairwise
  path :mod:`accy.contraction` searches (the pass's defaults), one launch per step, its
  intermediates through memory. Each contraction step is priced by its shape class
  (:func:`contraction_class`: square, small-k, small-output, batched), whose time per FLOP
  differs by up to an order of magnitude; where ``measured`` timed a series of the class,
  its times are interpolated log-log in FLOPs (bytes for the other heavy kinds) and the
  linear fit extends them past the series' ends (:class:`Fit`).
* A value read by several kernels is a kernel boundary too; the DAG extractor
  (``greedy-dag``) counts a shared subterm once, which is the nearest per-node stand-in.

Costs are integers in picoseconds. ``kernels`` uses a nominal device (5 us a launch,
20 GB/s, 100 GFLOP/s cheap elementwise, 8x that for transcendental ops); ``measured`` uses the
coefficients fitted on a real device by ``accy calibrate`` (``accy.experiments.calibrate``:
micro-programs per op kind, contraction shape class and elementwise op, run through accy's
own pipeline, ``time = launch + a * bytes + b * flops`` fitted per kind by non-negative least
squares, TASO-style, with each series' points kept to interpolate).

Calibrations are cached per device and driver at ``$XDG_CACHE_HOME/accy/costs/<digest>.json``
(digest of ``platform:device:driver``) with ``devices.json`` mapping each device selector that
was calibrated to its digest. This module only reads them (the egraph layer does not touch
devices). ``measured`` means the calibration of ``$ACCY_COST_CALIBRATION`` (a file) if set,
else of the selector ``$ACCY_DEVICE`` (else ``pocl``), the runtime's own default;
``measured:SELECTOR`` names the device (``saturate{cost=measured:nvidia}``). Without a
calibration it raises :class:`CalibrationMissingError` saying which command makes one: it does
not calibrate on first use, because that takes a minute on a device a compile may not have.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from accy.contraction import PathOptions, search_path
from accy.egraph.cost import (
    _ITEMSIZE,
    COST_MODEL_FAMILIES,
    _einsum_terms,
    bytes_moved,
    flops,
    register_cost_model,
)
from accy.errors import AccyError
from accy.ir.ops import Op, OpKind
from accy.ir.shapes import parse_einsum
from accy.ir.types import TensorType

__all__ = [
    "CALIBRATION_ENV", "CALIBRATION_FORMAT", "CONTRACTION_CLASSES", "HEAVY_KINDS",
    "CalibrationMissingError", "Fit", "KernelCost", "cache_dir", "calibration_path",
    "contraction_class", "device_digest", "einsum_steps", "find_calibration", "index_path",
    "load_calibration", "measured", "op_class",
]

CALIBRATION_FORMAT = 2  # 2: contraction shape classes, series points, per-op elements
CALIBRATION_ENV = "ACCY_COST_CALIBRATION"
_DEVICE_ENV, _DEFAULT_SELECTOR = "ACCY_DEVICE", "pocl"  # as accy.backends.opencl.runtime
HEAVY_KINDS = ("reduce", "contraction", "rowwise", "gather", "scatter_add", "loss")
ELEMENT_CLASSES = ("cheap", "transcendental")
# elementwise ops a few times dearer per element than an add (polynomial or iterative math)
_TRANSCENDENTAL = frozenset({Op.EXP, Op.LOG, Op.SQRT, Op.RSQRT, Op.SIN, Op.COS, Op.ERF,
                             Op.GELU, Op.GELU_TANH, Op.SIGMOID, Op.TANH, Op.POW, Op.DIV,
                             Op.RECIPROCAL})


class CalibrationMissingError(AccyError):
    """The ``measured`` cost model has no calibration for the device (message says how)."""


@dataclass(frozen=True)
class Fit:
    """One kernel of a kind or shape class, in picoseconds: ``launch + per_byte * bytes +
    per_flop * flops``, or, where the calibration timed a series of the class (``points``:
    ``(feature, ps)``, feature ascending, times made non-decreasing), the series' time
    interpolated log-log in ``feature`` (``"flops"`` or ``"bytes"``) and, outside the series,
    its end time scaled by the linear fit's ratio (so the series' ends join the fit's shape)."""

    launch: float
    per_byte: float
    per_flop: float
    feature: str = "bytes"
    points: tuple[tuple[float, float], ...] = ()

    def linear(self, nbytes: float, nflops: float) -> float:
        return self.launch + self.per_byte * nbytes + self.per_flop * nflops

    def time(self, nbytes: float, nflops: float) -> float:
        lin = self.linear(nbytes, nflops)
        if not self.points:
            return lin
        x = nflops if self.feature == "flops" else nbytes
        first, last = self.points[0], self.points[-1]
        if x <= first[0] or x >= last[0]:
            # outside the series: its end's time, scaled as the fit scales this kernel's
            # bytes and FLOPs from the end's size to its own
            end_x, end_t = first if x <= first[0] else last
            r = end_x / max(x, 1e-9)
            return end_t * lin / max(self.linear(r * nbytes, r * nflops), 1e-9)
        for (x0, t0), (x1, t1) in itertools.pairwise(self.points):
            if x0 <= x <= x1:
                w = math.log(x / x0) / math.log(x1 / x0) if x1 > x0 else 1.0
                return math.exp((1 - w) * math.log(t0) + w * math.log(t1))
        return lin  # unreachable: the points cover [first, last]

    def document(self) -> dict[str, Any]:
        """As a calibration file holds it."""
        return {"launch": self.launch, "per_byte": self.per_byte, "per_flop": self.per_flop,
                "feature": self.feature, "points": [list(p) for p in self.points]}

    @classmethod
    def read(cls, doc: Mapping[str, Any]) -> Fit:
        points = tuple((float(x), float(t)) for x, t in doc.get("points", ()))
        if any(x <= 0 or t <= 0 for x, t in points) or list(points) != sorted(points):
            raise ValueError("a fit's points must be positive and ascending")
        feature = str(doc.get("feature", "bytes"))
        if feature not in ("bytes", "flops"):
            raise ValueError(f"a fit's feature must be bytes or flops, not {feature!r}")
        return cls(float(doc["launch"]), float(doc["per_byte"]), float(doc["per_flop"]),
                   feature, points)


# pairwise contraction steps by shape (``contraction_class``): a kernel's time per FLOP
# differs by an order of magnitude between them (reuse, parallelism, reduction depth)
CONTRACTION_CLASSES = ("square", "small-k", "small-output", "batched")
SMALL_K = 32  # summed elements per output below which a contraction is bandwidth-bound
SMALL_OUTPUT = 4096  # output elements (per batch) below which it is a dot product, few items


def contraction_class(batch: int, m: int, n: int, k: int) -> str:
    """The shape class of a contraction step: ``batch`` the product of its letters in both
    operands and the result, ``m``/``n`` of those in one operand and the result, ``k`` of
    the summed ones."""
    if batch > 1:
        return "batched"
    if k < SMALL_K:
        return "small-k"
    if m * n < SMALL_OUTPUT:
        return "small-output"
    return "square"


def op_class(op: Op) -> str:
    """The calibration class of an op: a heavy kind, an element class, movement or source."""
    kind = op.kind
    if kind is OpKind.SOURCE:
        return "source"
    if kind is OpKind.MOVEMENT or op is Op.PAD:
        return "movement"
    if op is Op.CONV2D:
        return "contraction"
    if op in (Op.MAX_POOL2D, Op.AVG_POOL2D):
        return "reduce"
    if op.is_elementwise:
        return "transcendental" if op in _TRANSCENDENTAL else "cheap"
    if kind is OpKind.REDUCE:
        return "reduce"
    if kind is OpKind.EINSUM:
        return "contraction"
    if kind is OpKind.ROWWISE:
        return "rowwise"
    if kind is OpKind.LOSS:
        return "loss"
    if op is Op.GATHER:
        return "gather"
    if op is Op.SCATTER_ADD:
        return "scatter_add"
    raise NotImplementedError(f"no cost class for op {op.value}")


def _step(letters: list[set[str]], kept: set[str], elems: Callable[[Iterable[str]], int]
          ) -> tuple[str, int, int, int]:
    """``(class, flops, elements read, elements written)`` of one kernel over ``letters``
    (one or two operands) writing ``kept``."""
    union = set().union(*letters)
    if len(letters) == 1:  # a local sum (or a diagonal / copy): a reduction kernel
        return ("reduce", elems(union), elems(union), elems(kept))
    a, b = letters
    batch = elems(a & b & kept)
    cls = contraction_class(batch, elems((a - b) & kept), elems((b - a) & kept),
                            elems(union - kept))
    return (cls, 2 * elems(union), elems(a) + elems(b), elems(kept))


@lru_cache(maxsize=4096)
def einsum_steps(spec: str, shapes: tuple[tuple[int, ...], ...]
                 ) -> tuple[tuple[str, int, int, int], ...]:
    """``(class, flops, elements read, elements written)`` per kernel of an einsum, as
    ``einsum-lowering`` (its defaults) runs it: per operand a local sum of the letters no other
    operand or the output has (class ``reduce``), then the pairwise contractions along the
    path :func:`accy.contraction.search_path` finds (strategy ``auto``, FLOPs objective), each
    of its :func:`contraction_class`. One or two operands are one step."""
    terms = list(_einsum_terms(spec, tuple(len(s) for s in shapes)))
    out = parse_einsum(spec, [len(s) for s in shapes])[1]
    size: dict[str, int] = {}
    for term, shape in zip(terms, shapes, strict=True):
        size.update(zip(term, shape, strict=True))

    def elems(letters: Iterable[str]) -> int:
        return math.prod(size[c] for c in set(letters))

    if len(terms) <= 2:
        return (_step([set(t) for t in terms], set(out), elems),)
    steps: list[tuple[str, int, int, int]] = []
    live: list[set[str]] = []
    for i, term in enumerate(terms):
        elsewhere = set(out).union(*(set(t) for j, t in enumerate(terms) if j != i))
        keep = set(term) & elsewhere
        if keep != set(term):
            steps.append(_step([set(term)], keep, elems))
        live.append(keep)
    path = search_path(terms, out, size, "auto", _PATH_OPTIONS).path
    for pair in path:
        picked = [live[k] for k in pair]
        rest = [t for k, t in enumerate(live) if k not in pair]
        kept = set().union(*picked) & set(out).union(*rest)
        if len(picked) == 2:
            steps.append(_step(picked, kept, elems))
        elif kept != picked[0]:
            steps.append(_step(picked, kept, elems))
        live = [*rest, kept]
    return tuple(steps)


_PATH_OPTIONS = PathOptions()  # einsum-lowering's defaults


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: the fields are dicts
class KernelCost:
    """Kernels and fusion, per e-node (module docstring); all values in picoseconds."""

    name: str
    description: str
    kinds: Mapping[str, Fit]  # per heavy kind
    element: Mapping[str, float]  # per element of an elementwise op, per element class
    node: float = 100.0  # per elementwise e-node
    movement: float = 1.0  # per movement e-node: index arithmetic
    source: str = "nominal"  # or the calibration file it came from
    # per element of an elementwise op timed on its own (op name -> ps), before its class
    element_ops: Mapping[str, float] = field(default_factory=dict)
    # (launch, per summed element): the least time of a contraction step summing K elements
    # per output, whose K loop runs in sequence when its outputs are few (the calibration's
    # ``small-output`` series, a few outputs summing ever longer rows); none when (0, 0)
    depth: tuple[float, float] = (0.0, 0.0)

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: Mapping[str, Any]) -> int:
        cls = op_class(op)
        if cls == "source":
            return 0
        if cls == "movement":
            return round(self.movement)
        if cls in self.element:
            per = self.element_ops.get(op.value)
            return round(self.node + (self.element[cls] if per is None else per) * type.size)
        return round(sum(t for _, t in self.kernels(op, type, operands, attrs)))

    def kernels(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                attrs: Mapping[str, Any], series: bool = True) -> list[tuple[float, float]]:
        """``(launch, time)`` of each kernel a heavy op runs as on its own: an einsum's steps
        (each at least its :attr:`depth` time), else one kernel of its kind. ``series``: the
        time interpolated in the calibrated series (:meth:`Fit.time`), else the linear fit's."""
        cls = op_class(op)
        if cls == "contraction" and op is Op.EINSUM:  # conv2d: bytes and FLOPs below
            item = _ITEMSIZE[id(type.dtype)]
            out = []
            for step, work, read, written in einsum_steps(str(attrs["spec"]),
                                                          tuple(t.shape for t in operands)):
                fit = self.step_fit(step)
                nbytes = item * (read + written)
                t = fit.time(nbytes, work) if series else fit.linear(nbytes, work)
                if step != "reduce":
                    t = max(t, self.depth[0] + self.depth[1] * work / (2 * max(written, 1)))
                out.append((fit.launch, t))
            return out
        fit = self.kinds[cls]
        nbytes, nflops = bytes_moved(op, type, operands, attrs), flops(op, type, operands, attrs)
        return [(fit.launch, fit.time(nbytes, nflops) if series else fit.linear(nbytes, nflops))]

    def step_fit(self, step: str) -> Fit:
        """The fit of an einsum step's class (``reduce`` or a contraction class), else of
        contractions as a whole (a model without shape classes: ``kernels``)."""
        if step == "reduce":
            return self.kinds["reduce"]
        return self.kinds.get(f"contraction:{step}") or self.kinds["contraction"]

    def fits(self) -> dict[str, Any]:
        """The coefficients, as a calibration file holds them."""
        return {"kinds": {k: f.document() for k, f in self.kinds.items()},
                "element": dict(self.element), "element_ops": dict(self.element_ops),
                "node": self.node, "movement": self.movement,
                "depth": {"launch": self.depth[0], "per_element": self.depth[1]}}


_NOMINAL_LAUNCH, _NOMINAL_BYTE, _NOMINAL_FLOP = 5e6, 50.0, 10.0  # 5 us, 20 GB/s, 100 GFLOP/s
KERNELS = register_cost_model(KernelCost(
    "kernels", "kernel launches and fusion on a nominal device (picoseconds): heavy ops pay "
    "launch + bytes + FLOPs, fused elementwise and movement ops only their arithmetic",
    {k: Fit(_NOMINAL_LAUNCH, _NOMINAL_BYTE, _NOMINAL_FLOP) for k in HEAVY_KINDS},
    {"cheap": _NOMINAL_FLOP, "transcendental": 8 * _NOMINAL_FLOP}))


# ---- calibration files: where they are, reading them -----------------------------------------


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/accy/costs`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "accy" / "costs"


def device_digest(device_key: str) -> str:
    """The file name stem of a device's calibration: a hash of ``platform:device:driver``
    (a new driver is a new device: its kernels may run at other speeds) and the format."""
    text = f"{CALIBRATION_FORMAT}|{device_key}".encode()
    return hashlib.blake2b(text, digest_size=10).hexdigest()


def calibration_path(device_key: str) -> Path:
    return cache_dir() / f"{device_digest(device_key)}.json"


def index_path() -> Path:
    """``devices.json``: device selector -> digest of the device it selected when calibrated."""
    return cache_dir() / "devices.json"


def find_calibration(selector: str | None = None) -> Path:
    """The calibration file for ``selector`` (module docstring for the defaults)."""
    if selector is None and (explicit := os.environ.get(CALIBRATION_ENV, "").strip()):
        path = Path(explicit)
        if not path.is_file():
            raise CalibrationMissingError(f"${CALIBRATION_ENV} names {path}, which is not a "
                                          f"file; run `accy calibrate` or unset it")
        return path
    sel = selector or os.environ.get(_DEVICE_ENV, "").strip() or _DEFAULT_SELECTOR
    try:
        digest = json.loads(index_path().read_text()).get(sel)
    except (OSError, ValueError, AttributeError):
        digest = None
    path = cache_dir() / f"{digest}.json" if digest else None
    if path is None or not path.is_file():
        raise CalibrationMissingError(
            f"the measured cost model has no calibration for device {sel!r} in "
            f"{cache_dir()}; run `accy calibrate --device {sel}` (about a minute) or set "
            f"${CALIBRATION_ENV} to a calibration file")
    return path


@lru_cache(maxsize=32)
def _load(path: str, mtime_ns: int) -> KernelCost:
    try:
        doc = json.loads(Path(path).read_text())
        if doc.get("format") != CALIBRATION_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}, expected {CALIBRATION_FORMAT}")
        fits = doc["fits"]
        kinds = {k: Fit.read(f) for k, f in fits["kinds"].items()}
        missing = [k for k in HEAVY_KINDS if k not in kinds]
        if missing:
            raise ValueError(f"no fit for {', '.join(missing)}")
        element = {c: float(fits["element"][c]) for c in ELEMENT_CLASSES}
        device = doc.get("device", {}).get("key", "?")
        depth = fits.get("depth", {})  # files made before it have none: no bound
        return KernelCost("measured", f"kernel times calibrated on {device}", kinds, element,
                          float(fits.get("node", 0.0)), float(fits.get("movement", 1.0)),
                          source=path, element_ops={
                              str(op): float(v) for op, v in fits.get("element_ops", {}).items()},
                          depth=(float(depth.get("launch", 0.0)),
                                 float(depth.get("per_element", 0.0))))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise CalibrationMissingError(f"cost calibration {path} is unusable ({e}); run "
                                      f"`accy calibrate --force` to make it again") from None


def load_calibration(path: str | os.PathLike[str]) -> KernelCost:
    """The ``measured`` model of one calibration file (cached until the file changes)."""
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except OSError as e:
        raise CalibrationMissingError(f"cost calibration {p} cannot be read ({e})") from None
    return _load(str(p), mtime)


def measured(selector: str | None = None) -> KernelCost:
    """The ``measured`` model for a device selector (None: module docstring)."""
    return load_calibration(find_calibration(selector))


COST_MODEL_FAMILIES["measured"] = measured
