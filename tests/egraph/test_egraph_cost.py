"""Cost models from shapes and dtypes, their registry, and cost-driven extraction."""

from __future__ import annotations

import random

import pytest
from egraph_support import F32, T, factor_programs, func, mk, prog, toy_rules
from hypothesis import given, settings

import accy
from accy.builder import trace
from accy.egraph.convert import extract, to_egraph
from accy.egraph.cost import (
    COST_MODELS,
    FlopsBytes,
    bytes_moved,
    cost_model,
    flops,
    priced_operands,
    program_cost,
    register_cost_model,
)
from accy.egraph.driver import saturate
from accy.experiments.measure import rewrite_stats
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Function, Program
from accy.ir.types import DType, TensorType
from accy.testing import programs


def cost_of(node, model="flops-bytes"):
    return cost_model(model).node_cost(
        node.op, node.type, tuple(s.type for s in priced_operands(node.op, node.srcs)),
        dict(node.attrs))


def only(program):
    return program.function().results[0]


def test_registry_has_the_models_and_lists_them_when_unknown():
    assert {"flops-bytes", "flops", "bytes", "nodes"} <= set(COST_MODELS)
    with pytest.raises(KeyError, match="valid cost models: bytes, flops, flops-bytes"):
        cost_model("fast")
    with pytest.raises(ValueError, match="already registered"):
        register_cost_model(FlopsBytes("nodes", "again"))


def test_custom_model_is_usable_by_name():
    model = register_cost_model(FlopsBytes("test-bytes-heavy", "bytes x 100", 1, 100))
    try:
        spread, factored = factor_programs()
        assert program_cost(spread, "test-bytes-heavy") > program_cost(factored, model)
    finally:
        del COST_MODELS["test-bytes-heavy"]


@pytest.mark.parametrize("model", ["flops-bytes", "flops", "bytes", "nodes"])
def test_every_model_ranks_factoring_cheaper(model):
    spread, factored = factor_programs(1024)
    assert program_cost(spread, model) > program_cost(factored, model)


def test_flops_and_bytes_by_op_group():
    a, b = (Node(Op.PARAM, T(F32, 2, 3), (), {"index": i}) for i in range(2))
    w = Node(Op.PARAM, T(F32, 3, 4), (), {"index": 2})
    add = mk(Op.ADD, a, b)
    assert flops(add.op, add.type, (a.type, b.type), {}) == 6
    assert bytes_moved(add.op, add.type, (a.type, b.type), {}) == 3 * 24
    red = mk(Op.REDUCE_SUM, a, axes=(1,), keepdims=False)
    assert flops(red.op, red.type, (a.type,), dict(red.attrs)) == 6  # input elements
    mm = mk(Op.EINSUM, a, w, spec="ij,jk->ik")
    assert flops(mm.op, mm.type, (a.type, w.type), dict(mm.attrs)) == 2 * 2 * 3 * 4
    tr = mk(Op.TRANSPOSE, a, perm=(1, 0))
    assert flops(tr.op, tr.type, (a.type,), dict(tr.attrs)) == 0  # movement: bytes only
    assert cost_of(tr) == 4 * (24 + 24)
    assert cost_of(a) == 0 and cost_of(tr, "nodes") == 1


@pytest.mark.parametrize("dtype", list(DType), ids=lambda d: d.value)
def test_bytes_moved_counts_each_dtypes_item_size(dtype):
    x, s = TensorType((2, 3), dtype), TensorType((), dtype)
    assert bytes_moved(Op.ADD, x, (x, s), {}) == 2 * x.nbytes + s.nbytes
    i = TensorType((4,), DType.i64)
    assert bytes_moved(Op.GATHER, s, (x, i), {"axis": 0}) == 2 * s.nbytes + i.nbytes
    row = TensorType((1, 3), dtype)  # a slice reads only the elements it keeps
    assert bytes_moved(Op.SLICE, row, (x,), {"axis": 0, "start": 1, "stop": 2}) == 2 * row.nbytes


def test_extraction_takes_the_factored_form():
    spread, factored = factor_programs(1024)
    for model in ("flops-bytes", "nodes"):
        peg = to_egraph(spread)
        report = saturate(peg, toy_rules())
        assert report.stop_reason == "saturated"
        out = extract(peg, model)
        mul = out.program.function().results[0]
        assert mul.op is Op.MUL and {s.op for s in mul.srcs} == {Op.PARAM, Op.ADD}
        assert out.cost == program_cost(factored, model) < program_cost(spread, model)
        assert out.cost_model == model


def test_extraction_is_never_dearer_than_the_input():
    # a heavily shared random DAG: tree costs count shared subterms per use, so a tree-optimal
    # term can be a dearer program; the input is in the e-graph and wins then
    rng = random.Random(7)
    v = T(F32, 16)
    params = tuple(Node(Op.PARAM, v, (), {"index": i}) for i in range(6))
    nodes = list(params)
    for _ in range(60):
        nodes.append(mk(rng.choice([Op.ADD, Op.MUL]), rng.choice(nodes[-8:]), rng.choice(nodes)))
    p = Program((Function("f", params, tuple(f"x{i}" for i in range(6)), (nodes[-1],)),))
    peg = to_egraph(p)
    saturate(peg, toy_rules(), iterations=3)
    out = extract(peg)
    assert out.cost <= program_cost(p)


def test_programs_equal_under_the_rules_extract_to_one_program():
    # ties go to the smallest digest: operand order in the input does not matter
    v = T(F32, 16)
    one = prog(func("f", [v, v, v], lambda a, b, c: mk(
        Op.ADD, mk(Op.MUL, a, b), mk(Op.MUL, a, c))))
    other = prog(func("f", [v, v, v], lambda a, b, c: mk(
        Op.ADD, mk(Op.MUL, c, a), mk(Op.MUL, b, a))))
    outs = []
    for p in (one, other):
        peg = to_egraph(p)
        saturate(peg, toy_rules())
        outs.append(extract(peg).program)
    assert outs[0] == outs[1]


def test_einsum_cost_sees_operand_shapes():
    # the same result type, different contracted sizes: only operand types tell them apart
    small = prog(func("f", [T(F32, 4, 2), T(F32, 2, 4)],
                      lambda a, b: mk(Op.EINSUM, a, b, spec="ij,jk->ik")))
    big = prog(func("f", [T(F32, 4, 64), T(F32, 64, 4)],
                    lambda a, b: mk(Op.EINSUM, a, b, spec="ij,jk->ik")))
    assert only(small).type == only(big).type
    assert extract(to_egraph(small)).cost < extract(to_egraph(big)).cost


def test_a_value_read_twice_by_one_op_is_priced_once():
    square = prog(func("f", [T(F32, 256)], lambda a: mk(Op.MUL, a, a)))
    product = prog(func("f", [T(F32, 256), T(F32, 256)], lambda a, b: mk(Op.MUL, a, b)))
    assert program_cost(square) == 256 + 4 * 2 * 1024  # reads 1 KiB, writes 1 KiB
    assert program_cost(product) == 256 + 4 * 3 * 1024
    # so x * x is cheaper than pow(x, 2), which also reads its exponent: extraction takes it
    # (a canonical form: the kernels compute pow(x, 2) as x * x either way)
    job = accy.prepare(trace(lambda x: (x ** 2.0).mean(axes=-1), accy.f32[8, 256]))
    assert rewrite_stats(job)["canonicalize"]["rules_fired"]["pow-two"] >= 1
    assert Op.POW not in {n.op for n in job.product.program.nodes()}


@settings(max_examples=25, deadline=None)
@given(programs(max_nodes=10, functions=(1, 2)))
def test_program_cost_prices_every_distinct_node_once(p):
    # program_cost prices alike nodes once: the same sum as pricing each node by itself
    for model in ("flops-bytes", "nodes"):
        assert program_cost(p, model) == sum(cost_of(n, model) for n in p.nodes())


@settings(max_examples=25, deadline=None)
@given(programs(max_nodes=10, functions=(1, 2)))
def test_extraction_cost_is_the_program_cost_of_what_it_extracts(p):
    # the extracted program's cost is read off the chosen e-nodes, the input's may be passed
    # in: both as program_cost gives them, unused parameters and shared nodes included
    peg = to_egraph(p)
    saturate(peg, toy_rules(), iterations=3)
    for model in ("flops-bytes", "nodes", "bytes"):
        out = extract(peg, model)
        assert out.cost == program_cost(out.program, model) <= program_cost(p, model)
        assert extract(peg, model, input_cost=program_cost(p, model)) == out


def test_extraction_cost_counts_unused_parameters_and_shared_nodes_once():
    # f's third parameter is used by nothing; g's parameter is f's first (the same node)
    v = T(F32, 4)
    p = prog(func("f", [v, v, v], lambda a, b, c: mk(Op.ADD, a, b)),
             func("g", [v], lambda a: mk(Op.NEG, a)))
    out = extract(to_egraph(p), "nodes")
    assert out.program == p
    assert out.cost == program_cost(p, "nodes") == 5  # three parameters, add, neg
