"""``to_egraph`` writes egglog program text: the e-graph it builds is the one egglog-python's
expression layer builds (``term``), and every literal reads back exactly."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from egglog import Bool, EGraph, String, eq, f64, function, i64, i64Like, set_
from egraph_support import F32, T, const, func, op_case, prog
from hypothesis import given, settings

from accy.egraph.convert import (
    egg_literal,
    from_egraph,
    handle,
    read_egraph,
    term,
    to_egraph,
)
from accy.egraph.sorts import TYPE_RULES, new_egraph
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Program
from accy.testing import programs


@function(egg_fn="probe.f64", merge=lambda old, new: old)
def probe_f64(i: i64Like) -> f64: ...
@function(egg_fn="probe.str", merge=lambda old, new: old)
def probe_str(i: i64Like) -> String: ...
@function(egg_fn="probe.i64", merge=lambda old, new: old)
def probe_i64(i: i64Like) -> i64: ...
@function(egg_fn="probe.bool", merge=lambda old, new: old)
def probe_bool(i: i64Like) -> Bool: ...


_PROBES = {float: (probe_f64, f64, "probe.f64"), str: (probe_str, String, "probe.str"),
           int: (probe_i64, i64, "probe.i64"), bool: (probe_bool, Bool, "probe.bool")}

NAN_PAYLOAD = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_0000_0123))[0]
AWKWARD_FLOATS = [0.0, -0.0, 1.0, -2.5, 0.1, 1 / 3, math.inf, -math.inf, math.nan, 1e16, 1e300,
                  -1.7976931348623157e308, 2.2250738585072014e-308, 5e-324, -5e-324,
                  9007199254740993.0, 3.4028234663852886e38, 1e-45]
AWKWARD_STRINGS = ["", "ij,jk->ik", 'a"b', "a\\b", '\\"', '"', "\\", "\\n", "line\nbreak",
                   "\r\n\t\x00\x01\x7f", "é→ü 😀", "\u2028", "(set x)", "; not a comment",
                   "".join(chr(c) for c in range(0x20, 0x3000))]
AWKWARD_INTS = [0, -1, 1, 2**63 - 1, -(2**63)]


def _read(value):
    """``value`` through egglog-python, then through ``egg_literal`` text: the two primitives
    egglog holds, each in an e-graph of its own (egglog interns ``-0.0`` with ``0.0``)."""
    fn, sort, name = _PROBES[type(value)]
    out = []
    for via_text in (False, True):
        eg = EGraph()
        if via_text:
            eg.function_size(fn)  # declares it
            egg = eg._egraph
            egg.parse_and_run_program(f"(set ({name} 0) {egg_literal(value)})")
        else:
            eg.register(set_(fn(0)).to(sort(value)))
            egg = eg._egraph
        (row,) = egg.freeze().functions[name].rows
        decode = {float: egg.value_to_f64, str: egg.value_to_string, int: egg.value_to_i64,
                  bool: egg.value_to_bool}[type(value)]
        out.append(decode(row.output))
    return out


@pytest.mark.parametrize("value", AWKWARD_FLOATS, ids=repr)
def test_float_literals_read_back_bit_exactly(value):
    python, text = _read(value)
    assert struct.pack("<d", text) == struct.pack("<d", python)
    if not math.isnan(value):
        assert struct.pack("<d", text) == struct.pack("<d", value)


@pytest.mark.parametrize("value", [-math.nan, NAN_PAYLOAD], ids=["-nan", "nan-payload"])
def test_nans_egglog_text_cannot_spell_are_refused(value):
    with pytest.raises(ValueError, match="cannot spell the NaN"):
        egg_literal(value)


@pytest.mark.parametrize("value", AWKWARD_STRINGS + AWKWARD_INTS + [True, False],
                         ids=lambda v: ascii(v)[:24])
def test_string_int_bool_literals_read_back_exactly(value):
    python, text = _read(value)
    assert text == python == value and type(text) is type(value)


def test_egg_literal_refuses_what_egglog_cannot_hold():
    with pytest.raises(TypeError, match="not an egglog primitive"):
        egg_literal(b"\x00")  # type: ignore[arg-type]


def _same_egraph_as_terms(p: Program) -> None:
    """Every node's ``term`` is its handle's class, and the e-graph holds nothing more than
    egglog-python builds from those terms: the same e-nodes, shared subterms once."""
    peg = to_egraph(p)
    for node, h in peg.handles.items():
        assert peg.egraph.check_bool(eq(term(node)).to(handle(h))), node.op
    reference = new_egraph()
    reference.register(*[set_(handle(h)).to(term(n)) for n, h in peg.handles.items()])
    reference.run(TYPE_RULES)
    text_graph, text_handles = read_egraph(peg.egraph)
    ref_graph, ref_handles = read_egraph(reference)
    assert text_graph.num_nodes == ref_graph.num_nodes
    assert len(set(text_handles.values())) == len(set(ref_handles.values())) == len(p.nodes())


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_text_builds_the_python_terms_for_every_op(op):
    _same_egraph_as_terms(op_case(op))


@settings(max_examples=15, deadline=None)
@given(programs(max_nodes=10, functions=(1, 2)))
def test_text_builds_the_python_terms_for_random_programs(p):
    _same_egraph_as_terms(p)


@pytest.mark.parametrize("arr", [
    np.full(2, np.inf), np.full(3, -np.inf, np.float32), np.full(2, 1e300),
    np.full(2, -1.7976931348623157e308), np.full(2, 5e-324), np.full(2, 2.2250738585072014e-308),
    np.full(2, 1 / 3), np.full(2, np.finfo(np.float32).max, np.float32),
    np.full(2, np.finfo(np.float32).smallest_subnormal, np.float32),
    np.full(2, 65504, np.float16), np.full(2, 6e-8, np.float16), np.full(2, 2**53, np.int64),
    np.full(2, -(2**53), np.int64), np.full(2, np.iinfo(np.int32).min, np.int32),
], ids=lambda a: f"{a.dtype}:{a.flat[0]!r}")
def test_uniform_constants_keep_awkward_values_through_full(arr):
    node = const(arr)
    assert str(term(node)).startswith("Tensor.full(")  # the f64 literal path, not bytes
    p = prog(func("f", [], lambda: node))
    _same_egraph_as_terms(p)
    (result,) = from_egraph(to_egraph(p)).function().results
    assert result.attr("value") == arr.tobytes()


@pytest.mark.parametrize("spec", AWKWARD_STRINGS, ids=lambda s: ascii(s)[:24])
def test_string_attributes_keep_quotes_backslashes_and_unicode(spec):
    # not a valid einsum spec: to_egraph takes attributes as they are; inference would refuse
    x = Node(Op.PARAM, T(F32, 2), (), {"index": 0})
    odd = Node(Op.EINSUM, T(F32, 2), (x,), {"spec": spec})
    p = prog(func("f", [T(F32, 2)], lambda a: odd))
    _same_egraph_as_terms(p)
    graph, _ = read_egraph(to_egraph(p).egraph)
    (einsum,) = [n for ns in graph.classes.values() for n in ns if n.op is Op.EINSUM]
    assert einsum.attrs == (("spec", spec),)


def test_large_constants_enter_by_reference_and_come_back_whole():
    import accy
    from accy.egraph.convert import LARGE_CONSTANT_BYTES, extract
    from accy.errors import EGraphError
    from accy.ir.ops import Op

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 512)).astype(np.float32)  # 128 KiB
    small = np.arange(8, dtype=np.float32)
    assert weights.nbytes > LARGE_CONSTANT_BYTES > small.nbytes

    @accy.function
    def f(x: accy.f32[8, 64]):
        w = accy.constant(weights)
        return (x @ w) * 1.0 + accy.constant(np.ones(512, np.float32)).sum() * small.sum()

    peg = to_egraph(f)
    assert len(peg.constants) == 1 and next(iter(peg.constants.values())) == weights.tobytes()
    out = extract(peg)
    consts = [n for n in out.program.nodes() if n.op is Op.CONSTANT]
    assert any(n.attr("value") == weights.tobytes() for n in consts)
    x = rng.standard_normal((8, 64)).astype(np.float32)
    np.testing.assert_array_equal(accy.interpret(out.program, [x])[0],
                                  accy.interpret(f, [x])[0])
    with pytest.raises(EGraphError, match="by reference"):
        read_egraph(peg.egraph)  # without the table the reference means nothing
