"""IR <-> e-graph: exact round trips of every op, constants, sharing; typed extraction."""

from __future__ import annotations

import numpy as np
import pytest
from egglog import eq
from egraph_support import BOOL, F32, T, const, func, mk, op_case, prog, toy_rules
from hypothesis import given, settings

from accy.egraph.convert import extract, from_egraph, handle, read_egraph, term, to_egraph
from accy.egraph.cost import bytes_moved
from accy.egraph.driver import saturate
from accy.egraph.rules import RuleSet
from accy.egraph.sorts import Tensor, tensors, types
from accy.errors import EGraphError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.printer import print_program
from accy.testing import programs


def roundtrip(p):
    peg = to_egraph(p)
    q = from_egraph(peg)
    assert q == p  # nodes are hash-consed: equal programs are the very same nodes
    assert len(q.nodes()) == len(p.nodes())
    assert print_program(q) == print_program(p)
    return peg


@pytest.mark.parametrize("op", list(Op), ids=lambda o: o.value)
def test_roundtrip_every_op(op):
    roundtrip(op_case(op))


@pytest.mark.parametrize("arr", [
    np.float32(2.5), np.full((2, 3), -1.25, np.float32), np.arange(6, dtype=np.float64),
    np.full(3, -0.0, np.float32), np.full(2, np.nan, np.float32),
    np.array([np.inf, np.inf], np.float32), np.full(4, 7, np.int32),
    np.full(2, 2**60 + 1, np.int64), np.array([True, True]), np.array([True, False]),
    np.zeros((0, 3), np.float32), np.full(5, 0.1, np.float16),
], ids=lambda a: f"{a.dtype}{list(np.shape(a))}")
def test_constants_roundtrip_bit_exactly(arr):
    p = prog(func("f", [], lambda: const(arr)))
    peg = roundtrip(p)
    (result,) = from_egraph(peg).function().results
    assert result.attr("value") == np.asarray(arr).tobytes()


def test_uniform_constants_use_full_and_others_keep_their_bytes():
    full = term(const(np.full((2, 2), 3.0, np.float32)))
    assert str(full) == 'Tensor.full(3.0, "f32[2,2]")'
    neg_zero = term(const(np.full(2, -0.0, np.float32)))
    assert str(neg_zero).startswith("Tensor.constant(")
    ramp = term(const(np.arange(2, dtype=np.int32)))
    assert str(ramp) == 'Tensor.constant("0x0000000001000000", "i32[2]")'


def test_raw_bytes_constants_roundtrip():
    odd_bool = Node(Op.CONSTANT, T(BOOL, 2), (), {"value": b"\x02\x02"})  # not 0/1 bytes
    roundtrip(prog(func("f", [], lambda: odd_bool)))


def test_shared_subterms_stay_shared():
    v = T(F32, 8)

    def body(a, b):
        s = mk(Op.EXP, mk(Op.ADD, a, b))  # used three times
        return mk(Op.MUL, mk(Op.ADD, s, s), s), s

    p = prog(func("f", [v, v], body))
    peg = roundtrip(p)
    q = from_egraph(peg)
    shared = q.function().results[1]
    mul = q.function().results[0]
    assert mul.srcs[1] is shared and mul.srcs[0].srcs == (shared, shared)
    # one e-class per node: the e-graph holds no copy of the shared subterm
    graph, handles = read_egraph(peg.egraph)
    assert graph.num_nodes == len(p.nodes())


def test_multi_function_programs_share_nodes_across_functions():
    v = T(F32, 4)
    f = func("f", [v, v], lambda a, b: mk(Op.ADD, a, b))
    g = func("g", [v, v], lambda a, b: (mk(Op.ADD, a, b), mk(Op.NEG, a)))
    roundtrip(prog(f, g))


def test_term_is_the_class_to_egraph_made():
    p = op_case(Op.EINSUM)
    peg = to_egraph(p)
    for r in p.function().results:
        assert peg.egraph.check_bool(eq(term(r)).to(handle(peg.handles[r])))


def test_two_programs_can_share_an_egraph():
    p, q = op_case(Op.ADD), op_case(Op.SOFTMAX)
    first = to_egraph(p)
    second = to_egraph(q, first.egraph)
    assert from_egraph(first) == p and from_egraph(second) == q


@settings(max_examples=15)
@given(programs(max_nodes=8, functions=(1, 2)))
def test_random_programs_roundtrip(p):
    roundtrip(p)


def test_ill_typed_rule_is_caught_at_extraction():
    # a reshape whose shape attribute disagrees with the type it claims (cheaper than neg,
    # so extraction picks it): from_egraph re-infers every node and refuses it
    (x,) = tensors("x")
    (t,) = types("t")
    bad = RuleSet("bad", "an unsound rule", register=False)
    bad.rewrite("neg-to-reshape", Tensor.neg(x, t), Tensor.reshape(x, "[2, 2]", t))
    p = prog(func("f", [T(F32, 4)], lambda a: mk(Op.NEG, a)))
    peg = to_egraph(p)
    saturate(peg, bad)
    with pytest.raises(EGraphError, match="ill-typed reshape"):
        from_egraph(peg)


def test_ill_typed_term_is_caught_beside_a_well_typed_one_of_the_same_op():
    # extraction infers each (op, type, operand types, attributes) combination once: a bad
    # reshape that differs from a good one only in its operand's type is still inferred
    (x,) = tensors("x")
    (t,) = types("t")
    bad = RuleSet("bad", "an unsound rule", register=False)
    bad.rewrite("slice-to-reshape", Tensor.slice(x, "[0, 0]", "[2, 2]", "[1, 1]", t),
                Tensor.reshape(x, "[2, 2]", t))
    p = prog(func("f", [T(F32, 4), T(F32, 2, 3)], lambda a, b: (
        mk(Op.RESHAPE, a, shape=(2, 2)), mk(Op.SLICE, b, starts=(0, 0), stops=(2, 2),
                                              steps=(1, 1)))))
    peg = to_egraph(p)
    saturate(peg, bad)
    # priced so that the bad reshape is cheaper than the slice: extraction takes it
    with pytest.raises(EGraphError, match="ill-typed term.*cannot reshape 6 elements"):
        extract(peg, _SlicesDear(), regions=False)


class _SlicesDear:
    """Bytes moved, slices eight times dearer."""

    name, description = "slices-dear", "bytes moved, slices eight times dearer"

    def node_cost(self, op, type, operands, attrs):
        return (8 if op is Op.SLICE else 1) * bytes_moved(op, type, operands, attrs)


def test_extraction_is_deterministic():
    p = op_case(Op.ADD)
    out = []
    for _ in range(2):
        peg = to_egraph(p)
        saturate(peg, toy_rules(), time_limit_s=600.0)  # saturation ends it, not the clock
        out.append(extract(peg))
    assert out[0] == out[1]
    assert out[0].program.fingerprint() == out[1].program.fingerprint()
