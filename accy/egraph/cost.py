"""Shape-aware cost models, and extraction of the cheapest term from an e-graph.

Cost models
-----------
A cost model prices one e-node from its op, result type, operand types and attributes;
``COST_MODELS`` is the registry (``register_cost_model``; duplicates are errors, an unknown
name lists the valid ones). Built in:

``flops-bytes`` (the default)
    ``flops + 4 * bytes``: a byte moved costs four FLOPs, about the machine balance of the
    CPUs accy runs on by default (a two-core CPU does ~50 GFLOP/s f32 and streams ~12 GB/s)
    and on the safe side for GPUs (10+ FLOPs per byte), where it under-weights bytes.
``flops``, ``bytes``
    each term alone, for ablations.
``nodes``
    one per tensor e-node: term size, the usual e-graph cost, for comparison.
``kernels``, ``measured`` (and ``measured:DEVICE``)
    kernel launches and fusion, analytical or calibrated on a device: ``kernel_cost``.
    ``measured`` is a family: ``COST_MODEL_FAMILIES`` maps a name to a factory of the
    argument after ``:`` (the device), called each time the model is looked up, so a new
    calibration is seen by the next compile.

FLOPs (``flops``): one per result element for every elementwise op; reductions one per
input element (``reduce_mean`` one more per result element); an N-operand einsum
``N * prod(every index size)`` (``2 * prod`` for the pairwise case: a multiply and an add per
point of the index space); movement ops none; ``scatter_add`` one per update; softmax and
log-softmax five per element (max, subtract, exp, sum, divide/log); cross-entropy five per
logit and one per label. Bytes (``bytes_moved``): every operand read once plus the result
written once (a gather reads only what it gathers, a slice only what it keeps). Parameters
and constants cost nothing: their users pay for reading them.

Extraction
----------
``extract_best`` runs over the e-graph's table rows (decoded by ``convert.read_egraph``),
not through egglog's extractor with a Python cost callback, because:

* an e-node's cost needs its operands' shapes (an einsum's contracted sizes appear in no
  result type), which the decoded graph has at hand for every e-class;
* ties are broken by a structural digest of the candidate term, so equal inputs give the
  same program whatever e-class ids egglog assigned;
* one pass over the rows is much faster than egglog's per-e-node Python callbacks.

It is Knuth's generalization of Dijkstra's algorithm: an e-node is priced once all its
operand classes are final, and the class with the cheapest priced e-node is final next. A
term's key is ``(cost, size, digest)``: tree cost (a subterm used twice counts twice, as in
egglog's own extractor), then term size (so zero-cost cycles can never win), then the digest.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import math
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, NamedTuple, Protocol

from accy.ir.node import AttrValue, attr_text
from accy.ir.ops import Op, OpKind
from accy.ir.program import Program
from accy.ir.shapes import parse_einsum
from accy.ir.types import DType, TensorType

__all__ = [
    "COST_MODELS", "COST_MODEL_FAMILIES", "DEFAULT_COST_MODEL", "Choice", "CostModel",
    "EClassGraph", "ENode", "FlopsBytes", "NodeCount", "bytes_moved", "cost_model",
    "extract_best", "flops", "priced_operands", "program_cost", "register_cost_model",
]

# ---- FLOPs and bytes -------------------------------------------------------------------------

_ROWWISE_FLOPS = 5  # max, subtract, exp, sum, divide (or log and subtract)


def flops(op: Op, type: TensorType, operands: tuple[TensorType, ...],
          attrs: Mapping[str, Any]) -> int:
    """Floating-point (or integer) operations of one op, from shapes alone."""
    kind = op.kind
    if kind in (OpKind.SOURCE, OpKind.MOVEMENT) or op is Op.GATHER:
        return 0
    if op.is_elementwise:
        return type.size
    if kind is OpKind.REDUCE:
        return operands[0].size + (type.size if op is Op.REDUCE_MEAN else 0)
    if op is Op.EINSUM:
        terms = _einsum_terms(str(attrs["spec"]), tuple([t.rank for t in operands]))
        sizes: dict[str, int] = {}
        for term, t in zip(terms, operands, strict=True):
            sizes.update(zip(term, t.shape, strict=True))
        return len(operands) * math.prod(sizes.values())
    if op is Op.SCATTER_ADD:
        return operands[2].size
    if kind is OpKind.ROWWISE:
        return _ROWWISE_FLOPS * type.size
    if op is Op.CROSS_ENTROPY:
        return _ROWWISE_FLOPS * operands[0].size + operands[1].size
    if op is Op.CONV2D:  # a multiply and an add per output element and window element
        return 2 * type.size * math.prod(operands[1].shape[1:])
    if op in (Op.MAX_POOL2D, Op.AVG_POOL2D):
        return type.size * math.prod(attrs["kernel"])
    if op is Op.PAD:
        return 0
    raise NotImplementedError(f"no FLOP count for op {op.value}")


@lru_cache(maxsize=4096)
def _einsum_terms(spec: str, ranks: tuple[int, ...]) -> tuple[str, ...]:
    """The operand terms of an einsum spec: parsing it was most of pricing an einsum, and an
    e-graph holds many einsums of a few specs (commuted or regrouped contractions)."""
    return tuple(parse_einsum(spec, list(ranks))[0])


def bytes_moved(op: Op, type: TensorType, operands: tuple[TensorType, ...],
                attrs: Mapping[str, Any]) -> int:
    """Bytes read and written by one op: operands once, the result once."""
    if op.kind is OpKind.SOURCE:
        return 0
    if op is Op.GATHER:  # reads the gathered elements and the indices
        return 2 * _nbytes(type) + _nbytes(operands[1])
    if op is Op.SLICE:  # reads the elements it keeps
        return 2 * _nbytes(type)
    return sum([_nbytes(t) for t in operands]) + _nbytes(type)


_ITEMSIZE = {id(d): d.itemsize for d in DType}


def _nbytes(t: TensorType) -> int:
    """``t.nbytes`` without a numpy dtype lookup per call (an e-graph prices thousands)."""
    return math.prod(t.shape) * _ITEMSIZE[id(t.dtype)]


def priced_operands[T](op: Op, operands: Sequence[T]) -> Sequence[T]:
    """The operands a cost model is given: all of them, but an elementwise op's repeated
    operand once (``x * x`` reads ``x`` once: else the byte model prices ``pow(x, 2)``
    below ``x * x``). ``operands`` are the operand values (nodes or e-classes)."""
    if len(operands) < 2 or not op.is_elementwise or len(set(operands)) == len(operands):
        return operands
    return tuple(dict.fromkeys(operands))


# ---- models and their registry -------------------------------------------------------------


class CostModel(Protocol):
    """Prices one e-node; costs must be non-negative and are added along a term."""

    name: str
    description: str

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: Mapping[str, Any]) -> int: ...


@dataclass(frozen=True)
class FlopsBytes:
    """``flop_weight * flops + byte_weight * bytes_moved``."""

    name: str
    description: str
    flop_weight: int = 1
    byte_weight: int = 4

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: Mapping[str, Any]) -> int:
        cost = 0
        if self.flop_weight:
            cost += self.flop_weight * flops(op, type, operands, attrs)
        if self.byte_weight:
            cost += self.byte_weight * bytes_moved(op, type, operands, attrs)
        return cost


@dataclass(frozen=True)
class NodeCount:
    """One per tensor node: term size."""

    name: str = "nodes"
    description: str = "term size: one per tensor node (the classic e-graph cost)"

    def node_cost(self, op: Op, type: TensorType, operands: tuple[TensorType, ...],
                  attrs: Mapping[str, Any]) -> int:
        return 1


COST_MODELS: dict[str, CostModel] = {}
DEFAULT_COST_MODEL = "flops-bytes"
# name -> factory(argument after ":" or None): models made per lookup (``measured:nvidia``)
COST_MODEL_FAMILIES: dict[str, Callable[[str | None], CostModel]] = {}


def register_cost_model[M: CostModel](model: M) -> M:
    """Add ``model`` to ``COST_MODELS`` under ``model.name``; duplicate names are errors."""
    if model.name in COST_MODELS:
        raise ValueError(f"cost model {model.name!r} is already registered")
    COST_MODELS[model.name] = model
    return model


def cost_model(model: str | CostModel) -> CostModel:
    """The registered model called ``model`` (a model object passes through), or one made
    by a family: ``family`` or ``family:argument``."""
    if not isinstance(model, str):
        return model
    found = COST_MODELS.get(model)
    if found is not None:
        return found
    family, colon, arg = model.partition(":")
    if family in COST_MODEL_FAMILIES and (arg or not colon):
        return COST_MODEL_FAMILIES[family](arg or None)
    families = "".join(f", {f}[:DEVICE]" for f in sorted(COST_MODEL_FAMILIES))
    raise KeyError(f"unknown cost model {model!r}; valid cost models: "
                   f"{', '.join(sorted(COST_MODELS))}{families}")


register_cost_model(FlopsBytes(
    "flops-bytes", "FLOPs + 4 x bytes moved, from shapes and dtypes (the default)"))
register_cost_model(FlopsBytes("flops", "FLOPs only", flop_weight=1, byte_weight=0))
register_cost_model(FlopsBytes("bytes", "bytes moved only", flop_weight=0, byte_weight=1))
register_cost_model(NodeCount())


def program_cost(program: Program, model: str | CostModel = DEFAULT_COST_MODEL) -> int:
    """Cost of a program: every distinct node once (shared subterms are computed once).

    A model prices a node from its op, types and attributes alone, so nodes alike in those
    (most of a program, typically) are priced once. The key spells types as shape and dtype
    identity: hashing a ``TensorType`` (or an ``Op``) by value is a Python-level call.
    """
    m = cost_model(model)
    prices: dict[tuple[Any, ...], int] = {}
    total = 0
    for n in program.nodes():
        t, srcs = n.type, priced_operands(n.op, n.srcs)
        key = (id(n.op), t.shape, id(t.dtype),
               tuple([(s.type.shape, id(s.type.dtype)) for s in srcs]), n.attrs)
        own = prices.get(key)
        if own is None:
            own = prices[key] = m.node_cost(n.op, t, tuple([s.type for s in srcs]),
                                            dict(n.attrs))
        total += own
    return total


# ---- the decoded e-graph and extraction ------------------------------------------------------


class ENode(NamedTuple):
    """One e-node: an IR op over operand e-classes, or an operand-list node (``op`` None).

    A variadic op (einsum, concat) has one child: its operand list's e-class. A list node is
    ``nil`` (no children) or ``cons`` (head class, tail class). (Named tuples, like ``Choice``:
    extraction makes one per row of the e-graph, and a tuple is made 2-3x faster than a
    frozen dataclass.)
    """

    op: Op | None
    children: tuple[int, ...]
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    type: TensorType | None = None


@dataclass
class EClassGraph:
    """E-classes (ids dense from 0, in egglog's row order) and their e-nodes."""

    classes: dict[int, list[ENode]] = field(default_factory=dict)
    # (e-class, op, type, attrs) of e-nodes a rule subsumed: barred from extraction
    subsumed: set[tuple[int, Op | None, TensorType | None, tuple[Any, ...]]] = field(
        default_factory=set)

    # e-nodes ``drop_dangling`` removed (an operand e-class without e-nodes; driver docstring)
    dangling: int = 0

    def add(self, eclass: int, node: ENode) -> None:
        self.classes.setdefault(eclass, []).append(node)

    def drop_dangling(self) -> int:
        """Drop every e-node with an operand e-class that has no e-nodes (an e-class left
        empty so drops its users' e-nodes in turn); returns how many were dropped."""
        classes = self.classes
        users: dict[int, list[tuple[int, int]]] = {}
        missing: list[int] = []
        for c, nodes in classes.items():
            for i, n in enumerate(nodes):
                for ch in n.children:
                    users.setdefault(ch, []).append((c, i))
                    if ch not in classes:
                        missing.append(ch)
        if not missing:
            return 0
        gone: set[tuple[int, int]] = set()
        emptied: set[int] = set()
        while missing:  # a worklist, not recursion: chains of emptied classes may be long
            m = missing.pop()
            for c, i in users.get(m, ()):
                if (c, i) in gone:
                    continue
                gone.add((c, i))
                if c not in emptied and all((c, j) in gone for j in range(len(classes[c]))):
                    emptied.add(c)
                    missing.append(c)
        for c in {c for c, _ in gone}:
            kept = [n for j, n in enumerate(classes[c]) if (c, j) not in gone]
            if kept:
                classes[c] = kept
            else:
                del classes[c]
        self.dangling += len(gone)
        return len(gone)

    @property
    def num_nodes(self) -> int:
        return sum(len(ns) for ns in self.classes.values())


class Choice(NamedTuple):
    """The cheapest term of an e-class: its root e-node, the root's own cost and the term's key."""

    node: ENode
    own: int  # the root e-node's cost alone (what ``program_cost`` counts for its node)
    cost: int
    size: int
    digest: bytes
    elements: tuple[int, ...] = ()  # for a list class: the operand e-classes, in order


def _reachable(graph: EClassGraph, roots: Iterable[int]) -> list[int]:
    seen: dict[int, None] = {}
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        if c not in graph.classes:
            raise KeyError(f"e-class {c} has no e-nodes of accy's sorts (call "
                           "EClassGraph.drop_dangling first)")
        seen[c] = None
        for n in graph.classes[c]:
            stack.extend(ch for ch in n.children if ch not in seen)
    return list(seen)


_HASHED_BYTES = 1 << 12  # constants above this many bytes go into digests by their hash

# A saturation worker's stand-ins for large constants whose bytes stayed in the parent process
# (``accy.passes.rewrite_worker``) begin with this, then the digest of the parent's bytes, so
# that the worker names and prices them as a run in the parent would (extraction breaks ties
# by these names). Read so only in a worker (``STAND_INS``, which its loop sets): there every
# large non-uniform constant is a stand-in.
STAND_IN_MAGIC = b"\0accy-stand-in:"
STAND_INS = False
_DIGEST_HEX = 32  # characters of a 16-byte digest


def stand_in_digest(data: bytes) -> str | None:
    """The digest a worker's stand-in stands for (None for other bytes, and outside workers)."""
    if STAND_INS and data[:len(STAND_IN_MAGIC)] == STAND_IN_MAGIC:
        return data[len(STAND_IN_MAGIC):len(STAND_IN_MAGIC) + _DIGEST_HEX].decode()
    return None


def bytes_digest(data: bytes) -> str:
    """The hex digest that names large constant bytes (in e-graphs and extraction); inside
    :func:`digests_kept`, each object's is hashed once."""
    kept = getattr(_KEPT, "digests", None)
    if kept is not None and (hit := kept.get(id(data))) is not None and hit[0] is data:
        return hit[1]
    digest = stand_in_digest(data) or hashlib.blake2b(data, digest_size=16).hexdigest()
    if kept is not None and len(data) > _KEPT_MIN_BYTES:
        _keep(kept, data, digest)
    return digest


# Kept digests: a pipeline names a model's weights by digest in every pass and region that
# converts them into an e-graph, extracts them or sends them to a worker, so a large weight
# was hashed three or four times a preparation (the time: the twenty-ninth session's closing
# note on issue #14). The cache holds each
# object it names (so no other object can take its id) and only during one preparation
# (``accy.prepare``), when the program holds the weights anyway; at most _KEPT_MAX_BYTES of
# them, the oldest let go first (temporaries a pass made and dropped stay held no longer).
_KEPT = threading.local()
_KEPT_MIN_BYTES = 1 << 20
_KEPT_MAX_BYTES = 1 << 30


def _keep(kept: dict[int, tuple[bytes, str]], data: bytes, digest: str) -> None:
    kept[id(data)] = (data, digest)
    total = sum(len(d) for d, _ in kept.values())
    while total > _KEPT_MAX_BYTES and len(kept) > 1:
        oldest = next(iter(kept))
        total -= len(kept.pop(oldest)[0])


@contextlib.contextmanager
def digests_kept() -> Iterator[None]:
    """Inside (this thread, the outermost use): :func:`bytes_digest` hashes each large bytes
    object once (see the comment above)."""
    if getattr(_KEPT, "digests", None) is not None:
        yield
        return
    _KEPT.digests = {}
    try:
        yield
    finally:
        _KEPT.digests = None


def _attr_key(value: Any) -> str:
    if isinstance(value, bytes) and len(value) > _HASHED_BYTES:
        return "#" + bytes_digest(value)  # not megabytes of hex
    return attr_text(value)


def _header(node: ENode) -> bytes:
    if node.op is None:
        return b"cons" if node.children else b"nil"
    attrs = "".join(f"|{k}={_attr_key(v)}" for k, v in node.attrs)
    return f"{node.op.value}:{node.type}{attrs}".encode()


class NodePricer:
    """What every extractor computes per e-node, each combination once: its own cost under
    ``model`` and the digest of its term (which breaks ties deterministically).

    Many e-nodes share op, types and attributes (commuted operands, say): price and hash each
    combination once. Keys use ids: ops are enum members, types come interned from
    sorts.parse_type, and hashing either by value is a Python-level call."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.own_costs: dict[tuple[Any, ...], int] = {}
        self.headers: dict[tuple[Any, ...], bytes] = {}
        self.variadic = {id(op) for op in Op if op.arity is None}

    def own(self, n: ENode, kids: list[Choice], best: Mapping[int, Choice]
            ) -> tuple[int, tuple[int, ...]]:
        """``n``'s own cost given its operands' chosen terms ``kids``, and, for an operand
        list (no op: free), the classes it holds."""
        op = n.op
        if op is None:
            return 0, ((n.children[0], *kids[1].elements) if n.children else ())
        operands = kids[0].elements if id(op) in self.variadic else n.children
        types = tuple([best[o].node.type for o in priced_operands(op, operands)])
        key = (id(op), id(n.type), tuple(map(id, types)), n.attrs)
        own = self.own_costs.get(key, -1)
        if own < 0:
            own = self.own_costs[key] = self.model.node_cost(
                op, n.type, types, dict(n.attrs))  # type: ignore[arg-type]
            if own < 0:
                raise ValueError(f"cost model {self.model.name} gave {op.value} a negative "
                                 "cost")
        return own, ()

    def digest(self, n: ENode, kids: list[Choice]) -> bytes:
        hkey = (id(n.op), id(n.type), n.attrs, len(n.children))
        header = self.headers.get(hkey)
        if header is None:
            header = self.headers[hkey] = _header(n)
        h = hashlib.blake2b(header, digest_size=16)
        for kid in kids:
            h.update(kid.digest)
        return h.digest()


def extract_best(graph: EClassGraph, roots: Iterable[int],
                 model: str | CostModel = DEFAULT_COST_MODEL) -> dict[int, Choice]:
    """The cheapest term of every e-class reachable from ``roots`` (module docstring)."""
    m = cost_model(model)
    roots = list(roots)
    entries = [(c, n) for c in _reachable(graph, roots) for n in graph.classes[c]]
    parents: dict[int, list[int]] = {}
    waiting: list[int] = []
    for i, (_, n) in enumerate(entries):
        distinct = dict.fromkeys(n.children)
        waiting.append(len(distinct))
        for ch in distinct:
            parents.setdefault(ch, []).append(i)
    best: dict[int, Choice] = {}
    heap: list[tuple[int, int, bytes, int, Choice]] = []
    pricer = NodePricer(m)
    heappush, heappop = heapq.heappush, heapq.heappop

    def price(i: int) -> None:
        _, n = entries[i]
        kids = [best[ch] for ch in n.children]
        own, elements = pricer.own(n, kids, best)
        cost = own + sum([k.cost for k in kids])
        size = (0 if n.op is None else 1) + sum([k.size for k in kids])
        digest = pricer.digest(n, kids)
        heappush(heap, (cost, size, digest, i, Choice(n, own, cost, size, digest, elements)))

    for i, count in enumerate(waiting):
        if count == 0:
            price(i)
    while heap:
        _, _, _, i, choice = heappop(heap)
        c = entries[i][0]
        if c in best:
            continue
        best[c] = choice
        for j in parents.get(c, ()):
            waiting[j] -= 1
            if waiting[j] == 0:
                price(j)
    missing = [r for r in roots if r not in best]
    if missing:
        raise ValueError(f"e-classes {missing} have no finite term (every e-node is cyclic)")
    return best


# the kernel models register themselves; imported last, as they build on the names above
from accy.egraph import kernel_cost as _kernel_cost  # noqa: E402,F401
