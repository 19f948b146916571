"""Pickling nodes and programs: deep graphs, shared subterms, re-interning, digests."""

from __future__ import annotations

import copy
import gc
import pickle

import numpy as np

from accy.ir.interpret import interpret
from accy.ir.node import Node, pack, topological, unpack
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.types import DType, TensorType

VEC = TensorType((4,), DType.f32)


def param(i: int = 0) -> Node:
    return Node(Op.PARAM, VEC, (), {"index": i})


def chain(depth: int) -> Node:
    node = param()
    for i in range(depth):
        node = Node(Op.NEG if i % 2 else Op.EXP, VEC, (node,))
    return node


def diamond_program() -> Program:
    """x, y -> (s*s + s, s) with s = x + y shared three times and a constant."""
    x, y = param(0), param(1)
    s = Node(Op.ADD, VEC, (x, y))
    c = Node(Op.CONSTANT, VEC, (), {"value": np.arange(4, dtype=np.float32).tobytes()})
    out = Node(Op.ADD, VEC, (Node(Op.MUL, VEC, (s, s)), Node(Op.MUL, VEC, (s, c))))
    return Program((Function("f", (x, y), ("x", "y"), (out, s)),))


def test_deep_chain_pickles_and_keeps_its_digest():
    node = chain(50_000)
    digest = node.digest
    back = pickle.loads(pickle.dumps(node))
    assert back is node  # re-interned: the live twin
    assert back.digest == digest
    assert copy.deepcopy(node) is node


def test_deep_chain_rebuilds_without_a_live_twin():
    data = pickle.dumps(chain(50_000))
    expected = chain(50_000).digest
    gc.collect()
    back = pickle.loads(data)
    assert back.digest == expected
    depth, node = 0, back
    while node.srcs:
        node, depth = node.srcs[0], depth + 1
    assert depth == 50_000 and node.op is Op.PARAM


def test_shared_subterms_come_back_shared():
    def pickled() -> tuple[bytes, str, list[bytes]]:
        p = diamond_program()
        return pickle.dumps(p), p.fingerprint(), [n.digest for n in p.nodes()]

    data, fingerprint, digests = pickled()
    gc.collect()  # the originals are gone: sharing must come from the pickle itself
    p = pickle.loads(data)
    f = p.function()
    out, s = f.results
    square, scaled = out.srcs
    assert square.srcs[0] is square.srcs[1] is scaled.srcs[0] is s
    assert s.srcs == f.params
    assert p.fingerprint() == fingerprint
    assert [n.digest for n in p.nodes()] == digests
    assert len(list(topological(f.results))) == len(p.nodes())


def test_unpickled_program_equals_and_computes_the_same():
    p = diamond_program()
    back = pickle.loads(pickle.dumps(p))
    assert back == p
    x = np.array([1, 2, 3, 4], dtype=np.float32)
    y = np.array([0.5, -1, 2, 0], dtype=np.float32)
    for got, want in zip(interpret(back, [x, y]), interpret(p, [x, y]), strict=True):
        np.testing.assert_array_equal(got, want)


def test_attributes_keep_their_values_and_types():
    total = Node(Op.REDUCE_SUM, TensorType((1,), DType.f32), (param(),),
                 {"axes": (0,), "keepdims": True})
    back = pickle.loads(pickle.dumps(total))
    assert back is total
    assert back.attr("keepdims") is True and back.attr("axes") == (0,)


def test_pack_writes_shared_nodes_once_for_several_roots():
    f = diamond_program().function()
    roots = (*f.params, *f.results)
    table, rows = pack(roots)
    assert len(table) == len(list(topological(roots)))
    rows_of = {id(n): i for i, n in enumerate(topological(roots))}
    assert rows == tuple(rows_of[id(r)] for r in roots)
    assert unpack(table, rows) == roots
    assert pickle.loads(pickle.dumps((table, rows))) == (table, rows)


def test_a_function_of_many_results_pickles_each_shared_node_once():
    # every node of a chain is a result (as in a region of a split program): pickled result
    # by result, each would carry the whole chain below it (quadratic)
    x = param()
    nodes = [x]
    for i in range(300):
        nodes.append(Node(Op.NEG if i % 2 else Op.EXP, VEC, (nodes[-1],)))
    f = Function("many", (x,), ("x",), tuple(nodes[1:]))
    two = Program((f, Function("g", (x,), ("x",), (nodes[-1],))))
    alone = len(pickle.dumps(nodes[-1]))  # the chain once
    for value in (f, Program((f,)), two):
        data = pickle.dumps(value)
        assert len(data) < 3 * alone
        back = pickle.loads(data)
        assert back == value and back.fingerprint() == value.fingerprint()
