"""IR <-> e-graph: programs go in as tensor terms, the cheapest terms come out as IR nodes.

``to_egraph(program)`` adds every node of the program to an e-graph exactly once, operands
first, and binds it to an entry of the handle table ``accy.handle(i)``; a node's users refer
to it through its handle, so a node shared by many users (hash-consing makes every common
subexpression one node) is one e-class, never spelled out twice. A single handle table rather
than one egglog ``let`` per shared node, because egglog copies every table on ``push``, which
the driver does every iteration. The handles of the functions' results are the roots. The
terms go in as egglog program text, one ``set`` per node, read by egglog itself (literals
printed by ``egg_literal``): ten times faster than egglog-python's expression layer.

``from_egraph(peg, cost_model)`` (or ``extract`` for the cost and a report as well) reads the
e-graph's rows, has an extractor (``accy.egraph.extract``: ``greedy-dag`` by default, ``tree``,
``ilp``) choose a term for every e-class the roots reach, takes its choices region by region
against the input's nodes (``accy.egraph.regions``) and rebuilds IR nodes bottom-up without
recursion. Nodes are hash-consed, so a class chosen once is one node however many users it
has; every extracted node is re-checked with ``accy.ir.shapes.infer`` against the type its
term carries (once per combination of op, types and attributes), so an ill-typed rule raises
``EGraphError`` instead of producing a wrong program.
Without rules, ``from_egraph(to_egraph(p)) == p``: the same nodes, the same sharing.

``term(node)`` gives the plain egglog term of a node (no handles) for tests and rules.
"""

from __future__ import annotations

import math
import struct
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from egglog import EGraph, function, i64Like, run
from egglog.bindings import Value
from egglog.runtime import resolve_callable

from accy.egraph.cost import (
    DEFAULT_COST_MODEL,
    CostModel,
    EClassGraph,
    ENode,
    bytes_digest,
    cost_model,
    program_cost,
)
from accy.egraph.extract import DEFAULT_EXTRACTOR, choose
from accy.egraph.regions import Pick, RegionReport, accept, extracted_picks, input_picks
from accy.egraph.sharing import ShareReport, improve
from accy.egraph.sorts import (
    FULL_EGG_NAME,
    LIST_CONS_EGG_NAME,
    LIST_NIL_EGG_NAME,
    SIGNATURES,
    TYPE_RULES,
    Tensor,
    TensorList,
    decode_attr,
    encode_attr,
    new_egraph,
    parse_type,
    signature,
    tensor_list,
)
from accy.egraph.steps import run_schedule
from accy.errors import EGraphError, ShapeError
from accy.ir.node import Node, topological
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.shapes import infer
from accy.ir.types import DType, TensorType

__all__ = ["Extraction", "ProgramEGraph", "egg_literal", "extract", "from_egraph", "handle",
           "read_egraph", "term", "to_egraph"]

HANDLE_EGG_NAME = "accy.handle"
Primitive = bool | int | float | str  # what egglog holds as Bool, i64, f64, String
_NAN_BITS = bytes.fromhex("7ff8000000000000")  # egglog reads NaN as Rust's f64::NAN, these bits


@function(egg_fn=HANDLE_EGG_NAME, merge=lambda old, new: old)
def handle(i: i64Like) -> Tensor:
    """The e-class of the ``i``-th node added by ``to_egraph`` (a lookup table, not a term)."""


@dataclass
class ProgramEGraph:
    """A program inside an e-graph: the e-graph and the handle of every node of the program."""

    program: Program
    egraph: EGraph
    handles: dict[Node, int]
    # the bytes of the large constants that entered the e-graph by reference (``_call``)
    constants: dict[str, bytes] = field(default_factory=dict)

    def roots(self) -> list[int]:
        """Handles of every function's results, in order."""
        return [self.handles[r] for f in self.program.functions for r in f.results]


# ---- IR -> e-graph ----------------------------------------------------------------------------


def _fill(value: float, t: TensorType) -> bytes:
    if t.dtype is DType.bool:
        return np.full(t.shape, bool(value), dtype=np.bool_).tobytes()
    scalar = int(value) if t.dtype.is_int else value
    return np.full(t.shape, scalar, dtype=t.dtype.numpy).tobytes()


def full_value(t: TensorType, data: bytes) -> float | None:
    """The one value of a constant of type ``t`` and bytes ``data`` that ``Tensor.full``
    reproduces exactly, if any (constants with one enter e-graphs as ``full``)."""
    size = t.dtype.itemsize
    if t.size == 0 or len(data) != t.nbytes:
        return None
    if t.size > 1 and data[:size] != data[size:2 * size]:
        return None  # the usual case, without the whole comparison below
    first = np.frombuffer(data[:size], dtype=t.dtype.numpy)[0]
    if t.dtype.is_int and abs(int(first)) > 2**53:
        return None
    value = float(first)
    if math.isnan(value) or (value == 0.0 and math.copysign(1.0, value) < 0):
        return None  # egglog's f64 equates -0.0 with 0.0 and every NaN with every other
    return value if _fill(value, t) == data else None


class _Call(NamedTuple):
    """A node as its ``Tensor`` constructor call: the one layout both term builders follow."""

    method: str  # the Tensor classmethod
    egg_name: str  # its egglog function
    operands: tuple[Node, ...]
    variadic: bool  # the operands go in one TensorList (einsum, concat)
    args: tuple[Primitive, ...]  # the attributes, then the type text


# constants of more bytes enter ``to_egraph``'s e-graphs by reference: ``ref:<digest>`` in
# place of their bytes, which ``ProgramEGraph.constants`` keeps (model weights would otherwise
# be written into egglog's program text as hex and parsed back, seconds per megabyte; no rule
# reads such constants' values: rules that do, read small ones, like an arange of classes)
LARGE_CONSTANT_BYTES = 1 << 16
REF_PREFIX = "ref:"


def _call(node: Node, refs: dict[str, bytes] | None = None) -> _Call:
    """The constructor call of ``node`` (uniform constants as ``full``, others as bytes, or,
    with ``refs``, large ones by reference, their bytes put in ``refs``)."""
    ty = str(node.type)
    value = full_value(node.type, node.attr("value")) if node.op is Op.CONSTANT else None
    if value is not None:
        return _Call("full", FULL_EGG_NAME, (), False, (value, ty))
    if refs is not None and node.op is Op.CONSTANT and len(
            data := node.attr("value")) > LARGE_CONSTANT_BYTES:
        key = REF_PREFIX + bytes_digest(data)  # a worker's stand-in: what it stands for
        refs[key] = data
        return _Call("constant", signature(Op.CONSTANT).egg_name, (), False, (key, ty))
    sig = signature(node.op)
    attrs = tuple(encode_attr(kind, node.attr(name)) for name, kind in sig.attrs)
    return _Call(sig.method, sig.egg_name, node.srcs, sig.operands is None, (*attrs, ty))


def term(node: Node) -> Tensor:
    """The egglog term of ``node`` (shared operands are shared Python objects)."""
    memo: dict[Node, Tensor] = {}
    for n in topological((node,)):
        c = _call(n)
        operands: list[Any] = [memo[s] for s in c.operands]
        if c.variadic:
            operands = [tensor_list(*operands)]
        memo[n] = getattr(Tensor, c.method)(*operands, *c.args)
    return memo[node]


def egg_literal(value: Primitive) -> str:
    r"""egglog source text that parses back to exactly the primitive egglog-python makes of
    ``value`` (an i64, Bool, f64 or String).

    Floats print as ``repr`` (the shortest text that round-trips, always with a point, an
    exponent or ``inf``), the NaN ``float("nan")`` as egglog's ``NaN``; egglog's reader has no
    spelling for a NaN with its sign or payload set, so those raise ``ValueError`` (accy never
    puts a NaN in an f64: such constants keep their bytes). Strings escape only ``\`` and
    ``"``, the two escapes egglog's reader needs (it rejects JSON's ``\u``, ``\r``, ``\/``);
    every other character stands as itself, newlines and NUL included.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isnan(value):
            return repr(value)
        if (bits := struct.pack(">d", value)) != _NAN_BITS:
            raise ValueError(f"egglog text cannot spell the NaN 0x{bits.hex()}")
        return "NaN"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"not an egglog primitive: {value!r}")


def to_egraph(program: Program | Function, egraph: EGraph | None = None) -> ProgramEGraph:
    """Add every node of ``program`` to ``egraph`` (a new one by default), each exactly once.

    The nodes go in as one egglog program, ``(set (accy.handle i) term)`` per node with its
    operands spelled as their handles, run by egglog's own reader: building each term through
    egglog-python's expression layer cost ~0.3 ms a node. The e-graph is the same either way
    (``term(node)`` finds every handle's class; a test checks it).
    """
    if isinstance(program, Function):
        program = Program((program,))
    eg = egraph if egraph is not None else new_egraph()
    base = eg.function_size(handle)  # several programs may share one e-graph
    handles: dict[Node, int] = {}
    refs: dict[str, bytes] = {}
    lines: list[str] = []
    methods: set[str] = set()
    lists = False
    for node in program.nodes():
        c = _call(node, refs)
        methods.add(c.method)
        operands = [f"({HANDLE_EGG_NAME} {handles[s]})" for s in c.operands]
        if c.variadic:
            lists = True
            tail = f"({LIST_NIL_EGG_NAME})"
            for o in reversed(operands):
                tail = f"({LIST_CONS_EGG_NAME} {o} {tail})"
            operands = [tail]
        handles[node] = base + len(handles)
        args = " ".join([*operands, *map(egg_literal, c.args)])
        lines.append(f"(set ({HANDLE_EGG_NAME} {handles[node]}) ({c.egg_name} {args}))")
    # egglog-python declares a constructor to egglog when it first meets it; the text names
    # constructors directly, so it meets each one used first (function_size declares it)
    ctors = [getattr(Tensor, m) for m in sorted(methods)]
    declared = eg._state.callable_ref_to_egg_fn  # kept across push/pop
    for ctor in ctors + ([TensorList.nil, TensorList.cons] if lists else []):
        if resolve_callable(ctor)[0] not in declared:
            eg.function_size(ctor)
    eg._egraph.parse_and_run_program("\n".join(lines))
    run_schedule(eg, run(TYPE_RULES))
    return ProgramEGraph(program, eg, handles, refs)


def add_context(peg: ProgramEGraph, context: Any) -> None:
    """Add a region's :class:`accy.egraph.split.Context` to its e-graph: the definitions,
    each made equal to the parameter it defines (the region's parameters are the same terms
    in both programs, so the definitions read them)."""
    ctx = to_egraph(context.program, peg.egraph)
    params, results = context.program.functions[0].params, context.program.functions[0].results
    lines = [f"(union ({HANDLE_EGG_NAME} {ctx.handles[params[i]]}) "
             f"({HANDLE_EGG_NAME} {ctx.handles[r]}))"
             for i, r in zip(context.defines, results, strict=True)]
    peg.egraph._egraph.parse_and_run_program("\n".join(lines))
    peg.constants.update(ctx.constants)


# ---- e-graph -> IR ----------------------------------------------------------------------------


class _Reader:
    """Decodes egglog's raw rows: e-class values to dense ids, primitives to Python values."""

    def __init__(self, egraph: EGraph, constants: Mapping[str, bytes] | None = None) -> None:
        self.constants = constants or {}
        # The bindings-level e-graph: its freeze() returns raw rows in milliseconds, where the
        # high-level EGraph.freeze() builds a Python expression per row (seconds at 100k rows).
        self.raw = egraph._egraph
        self.ids: dict[Value, int] = {}
        self.cache: dict[tuple[str, Value], Any] = {}
        # decoded attributes by (egglog function, raw attribute values; a splat's type too),
        # and types by raw value: e-nodes mostly differ in their operands, not in these
        self.attr_sets: dict[tuple[Any, ...], tuple[tuple[str, Any], ...]] = {}
        self.types: dict[Value, TensorType] = {}

    def eclass(self, v: Value) -> int:
        return self.ids.setdefault(v, len(self.ids))

    def prim(self, kind: str, v: Value) -> Any:
        key = (kind, v)
        if key not in self.cache:
            if kind == "int":
                self.cache[key] = self.raw.value_to_i64(v)
            elif kind == "bool":
                self.cache[key] = self.raw.value_to_bool(v)
            elif kind == "f64":
                self.cache[key] = self.raw.value_to_f64(v)
            else:
                self.cache[key] = self.raw.value_to_string(v)
        return self.cache[key]

    def type(self, v: Value) -> TensorType:
        t = self.types.get(v)
        if t is None:
            t = self.types[v] = parse_type(self.raw.value_to_string(v))
        return t

    def attrs(self, egg_name: str, kinds: Iterable[tuple[str, Any]], values: list[Value]
              ) -> tuple[tuple[str, Any], ...]:
        key = (egg_name, *values)
        out = self.attr_sets.get(key)
        if out is None:
            out = self.attr_sets[key] = tuple(sorted([
                (name, self.decode(kind, self.prim(kind, v)))
                for (name, kind), v in zip(kinds, values, strict=True)]))
        return out

    def decode(self, kind: str, raw: Any) -> Any:
        if kind == "bytes" and str(raw).startswith(REF_PREFIX):
            try:
                return self.constants[raw]
            except KeyError:
                raise EGraphError(f"the e-graph holds a constant by reference ({raw}) that "
                                  "this program did not put there") from None
        return decode_attr(kind, raw)


_SIG_BY_EGG_NAME = {sig.egg_name: sig for sig in SIGNATURES.values()}


def read_egraph(egraph: EGraph, constants: Mapping[str, bytes] | None = None
                ) -> tuple[EClassGraph, dict[int, int]]:
    """The e-graph's tensor e-nodes by e-class, and the e-class of every handle; e-nodes
    over an e-class without e-nodes are dropped (``EClassGraph.drop_dangling``). Constants
    held by reference take their bytes from ``constants`` (``ProgramEGraph.constants``)."""
    r = _Reader(egraph, constants)
    graph = EClassGraph()
    handles: dict[int, int] = {}
    ids = r.ids
    for name, fn in r.raw.freeze().functions.items():
        if name == HANDLE_EGG_NAME:
            to_int = r.raw.value_to_i64
            for row in fn.rows:
                handles[to_int(row.inputs[0])] = r.eclass(row.output)
            continue
        decode = _decoder(name)
        if decode is None:
            continue
        for row in fn.rows:
            node = decode(r, row.inputs)
            c = ids.setdefault(row.output, len(ids))
            if row.subsumed:
                graph.subsumed.add((c, node.op, node.type, node.attrs))
            else:
                graph.add(c, node)
    graph.drop_dangling()
    return graph, handles


def _decoder(egg_name: str) -> Callable[[_Reader, list[Value]], ENode] | None:
    if egg_name == LIST_NIL_EGG_NAME:
        return lambda r, xs: ENode(None, ())
    if egg_name == LIST_CONS_EGG_NAME:
        return lambda r, xs: ENode(None, (r.eclass(xs[0]), r.eclass(xs[1])))
    if egg_name == FULL_EGG_NAME:
        def full(r: _Reader, xs: list[Value]) -> ENode:
            t = r.type(xs[1])
            key = (egg_name, *xs)
            if (attrs := r.attr_sets.get(key)) is None:
                attrs = r.attr_sets[key] = (("value", _fill(r.prim("f64", xs[0]), t)),)
            return ENode(Op.CONSTANT, (), attrs, t)
        return full
    sig = _SIG_BY_EGG_NAME.get(egg_name)
    if sig is None:
        return None
    k = 1 if sig.operands is None else sig.operands

    def decode(r: _Reader, xs: list[Value]) -> ENode:
        ids = r.ids
        children = tuple([ids.setdefault(x, len(ids)) for x in xs[:k]])
        return ENode(sig.op, children, r.attrs(egg_name, sig.attrs, xs[k:-1]), r.type(xs[-1]))
    return decode


@dataclass(frozen=True)
class Extraction:
    """An extracted program and its cost under the model (each distinct node counted once),
    with how it was made (extractor, acceptance by region, dangling e-nodes dropped)."""

    program: Program
    cost: int
    cost_model: str
    extractor: str = DEFAULT_EXTRACTOR
    regions: RegionReport | None = None  # None: extract(regions=False)
    dangling: int = 0  # e-nodes dropped for an operand e-class without e-nodes
    note: str = ""  # what the extractor wants said (the ILP's fallback at its time limit)
    sharing: ShareReport | None = None  # None: no sharing search (options' "sharing" off)
    seconds: float = field(default=0.0, compare=False)
    # of which acceptance by region and the sharing search, the parts bounded by a deadline
    search_seconds: float = field(default=0.0, compare=False)


def extract(peg: ProgramEGraph, model: str | CostModel = DEFAULT_COST_MODEL, *,
            extractor: str = DEFAULT_EXTRACTOR, regions: bool = True,
            input_cost: int | None = None, options: dict[str, Any] | None = None,
            deadline: float | None = None) -> Extraction:
    """The cheapest program equal to ``peg.program`` in the e-graph, under ``model``.

    ``extractor`` names one of ``accy.egraph.extract.EXTRACTORS`` (``options`` are its
    settings). With ``regions`` (the default) the extraction is taken region by region
    (``accy.egraph.regions``): never dearer than the input or the whole extraction, every
    independent win kept. Without, the whole extraction, or the input where that is cheaper
    (``input_cost`` is ``program_cost(peg.program, model)`` where the caller has it).
    Then, unless ``options`` say ``sharing: False`` or the extractor is ``tree``, the
    sharing search (``accy.egraph.sharing``) takes terms that pay only when several classes
    share them (a merged contraction read through slices). Acceptance and the search stop at
    ``deadline`` (``time.perf_counter()``), keeping what they found so far.
    """
    start = time.perf_counter()
    m = cost_model(model)
    graph, handle_classes = read_egraph(peg.egraph, peg.constants)
    roots = [handle_classes[h] for h in peg.roots()]
    opts = dict(options or {})
    choices = choose(graph, roots, m, extractor, opts)
    picks = extracted_picks(choices)
    report = shared = None
    searched = time.perf_counter()
    if regions:
        class_of = {n: handle_classes[h] for n, h in peg.handles.items()}
        inputs, order, forced = input_picks(peg.program, class_of, m, graph)
        picks, report = accept(inputs, order, forced, picks, roots, deadline)
    if opts.get("sharing", True) and extractor != "tree":
        picks, shared = improve(graph, roots, choices, picks, m, deadline)
    searched = time.perf_counter() - searched
    program = _rebuild(peg.program, roots, picks)
    cost = program_cost(program, m)
    if not regions:
        # the input is in the e-graph too, so the cheaper of the two wins (ties go to the
        # extracted form), unless a rule barred one of the input's nodes from extraction
        original = program_cost(peg.program, m) if input_cost is None else input_cost
        if original < cost and not _uses_subsumed(peg, graph, handle_classes):
            program, cost = peg.program, original
    return Extraction(program, cost, m.name, extractor, report, graph.dangling,
                      str(opts.get("note", "")), shared, time.perf_counter() - start,
                      searched)


def _rebuild(source: Program, roots: list[int], picks: dict[int, Pick]) -> Program:
    """The program of the picked terms of ``roots`` (``source``'s functions and parameters).
    Extracted e-nodes are type-checked (``_node``); input nodes are reused as they are where
    their operands are unchanged."""
    memo: dict[int, Node] = {}
    checked: set[tuple[Any, ...]] = set()
    for root in roots:  # post-order without recursion: programs may be thousands deep
        stack = [(root, False)]
        while stack:
            c, ready = stack.pop()
            if c in memo:
                continue
            p = picks[c]
            if ready:
                srcs = tuple([memo[o] for o in p.operands])
                if p.node is not None:
                    memo[c] = p.node if srcs == p.node.srcs else Node(
                        p.op, p.type, srcs, dict(p.attrs))
                else:
                    assert p.enode is not None
                    memo[c] = _node(p.enode, srcs, tuple([id(picks[o].type) for o in
                                                          p.operands]), checked)
            else:
                stack.append((c, True))
                stack.extend((o, False) for o in p.operands if o not in memo)
    results = iter([memo[c] for c in roots])
    return Program(tuple(
        Function(f.name, f.params, f.param_names, tuple(next(results) for _ in f.results))
        for f in source.functions))


def _uses_subsumed(peg: ProgramEGraph, graph: EClassGraph, handle_classes: dict[int, int]
                   ) -> bool:
    """Whether a rule subsumed (barred from extraction) one of the input program's nodes."""
    if not graph.subsumed:
        return False
    return any((handle_classes[h], n.op, n.type, n.attrs) in graph.subsumed
               for n, h in peg.handles.items())


def from_egraph(peg: ProgramEGraph, model: str | CostModel = DEFAULT_COST_MODEL) -> Program:
    """The cheapest program in the e-graph (``extract(peg, model).program``)."""
    return extract(peg, model).program


def _node(n: ENode, srcs: tuple[Node, ...], src_type_ids: tuple[int, ...],
          checked: set[tuple[Any, ...]]) -> Node:
    """The IR node of ``n`` over ``srcs``, its type re-inferred: ``checked`` holds the (op,
    type, operand types, attributes) combinations already found well-typed, by the ids of
    the e-graph's interned types (``src_type_ids``), so each is inferred once."""
    assert n.op is not None and n.type is not None
    attrs = dict(n.attrs)
    if n.op in (Op.PARAM, Op.CONSTANT):
        if n.op is Op.CONSTANT and len(attrs["value"]) != n.type.nbytes:
            raise EGraphError(f"constant of type {n.type} holds {len(attrs['value'])} bytes")
        return Node(n.op, n.type, (), attrs)
    key = (id(n.op), id(n.type), src_type_ids, n.attrs)
    if key in checked:
        return Node(n.op, n.type, srcs, attrs)
    try:
        t, norm = infer(n.op, tuple(s.type for s in srcs), attrs)
    except ShapeError as e:
        raise EGraphError(f"the e-graph holds an ill-typed term (a rule built it): {e}") from None
    if t != n.type or norm != attrs:
        raise EGraphError(
            f"the e-graph holds an ill-typed {n.op.value} term (a rule built it): its type "
            f"argument says {n.type} with {attrs}, its operands give {t} with {norm}")
    checked.add(key)
    return Node(n.op, t, srcs, attrs)
