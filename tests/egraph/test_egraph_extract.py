"""Extractors (greedy-dag, tree, ilp), acceptance by region, dangling e-nodes, deep programs."""

from __future__ import annotations

import pytest
from egraph_support import F32, T, func, mk, prog
from hypothesis import HealthCheck, given, settings

import rewrites
from accy.egraph.convert import extract, from_egraph, to_egraph
from accy.egraph.cost import EClassGraph, ENode, program_cost
from accy.egraph.driver import saturate
from accy.egraph.extract import EXTRACTORS, choose, extractor
from accy.ir.ops import Op
from accy.ir.types import TensorType
from accy.passes import rewriting
from accy.testing import programs

M = T(F32, 64, 64)
SATURATE = ("canonical", "fold", "algebra", "einsum", "activation", "layout")


def shared_matmul():
    """m = a @ b used twice (m + m^T), beside an unrelated log(softmax(x)): ``m^T`` is also
    ``b^T @ a^T`` (one einsum), cheaper as a tree than transposing ``m`` but a second matmul
    in the program."""
    def body(a, b, x):
        m = mk(Op.EINSUM, a, b, spec="ij,jk->ik")
        return (mk(Op.ADD, m, mk(Op.TRANSPOSE, m, perm=(1, 0))),
                mk(Op.LOG, mk(Op.SOFTMAX, x, axis=1)))
    return prog(func("f", [M, M, T(F32, 32, 100)], body))


def saturated(p, rulesets=SATURATE):
    rewrites.load(rulesets)
    peg = to_egraph(p)
    saturate(peg, rulesets, rules=rewriting.select(rulesets))
    return peg


def count(program, op):
    return sum(n.op is op for n in program.nodes())


def test_whole_extractions_duplicate_the_matmul():
    # both extractors take b^T @ a^T for m^T on its own (the cheaper term of that e-class,
    # greedy-dag too: it chooses per class), a second matmul in the program; all or nothing
    # then keeps the input and loses the log-softmax win
    peg = saturated(shared_matmul())
    assert count(from_egraph_tree_without_fallback(peg), Op.EINSUM) == 2
    for name in ("tree", "greedy-dag"):
        out = extract(peg, extractor=name, regions=False, options={"sharing": False})
        assert out.program == peg.program
    # the sharing search switches m^T back to transposing the one matmul: both wins kept
    out = extract(peg, regions=False)
    assert count(out.program, Op.EINSUM) == 1 and count(out.program, Op.LOG_SOFTMAX) == 1
    assert out.sharing is not None and out.sharing.switches_kept >= 1


def from_egraph_tree_without_fallback(peg):
    from accy.egraph.convert import _rebuild, read_egraph
    from accy.egraph.regions import extracted_picks

    graph, handles = read_egraph(peg.egraph)
    roots = [handles[h] for h in peg.roots()]
    return _rebuild(peg.program, roots, extracted_picks(choose(graph, roots, name="tree")))


@pytest.mark.parametrize("name", ["tree", "greedy-dag"])
def test_regions_keep_the_log_softmax_win_without_duplicating_the_matmul(name):
    peg = saturated(shared_matmul())
    out = extract(peg, extractor=name)
    assert count(out.program, Op.EINSUM) == 1 and count(out.program, Op.LOG_SOFTMAX) == 1
    assert out.cost == program_cost(out.program) < program_cost(peg.program)
    assert out.regions is not None and out.regions.kept >= 1


def test_two_independent_wins_are_both_kept_beside_a_dearer_part():
    # one result holds the matmul trap and -(-c); the other log(softmax(x))
    def body(a, b, c, x):
        m = mk(Op.EINSUM, a, b, spec="ij,jk->ik")
        trap = mk(Op.ADD, m, mk(Op.TRANSPOSE, m, perm=(1, 0)))
        return (mk(Op.ADD, trap, mk(Op.NEG, mk(Op.NEG, c))),
                mk(Op.LOG, mk(Op.SOFTMAX, x, axis=1)))
    p = prog(func("f", [M, M, M, T(F32, 32, 100)], body))
    peg = saturated(p)
    for name in ("tree", "greedy-dag"):
        out = extract(peg, extractor=name)
        q = out.program
        assert count(q, Op.NEG) == 0 and count(q, Op.LOG_SOFTMAX) == 1, name
        assert count(q, Op.EINSUM) == 1, name
    tree_whole = extract(peg, extractor="tree", regions=False)
    assert tree_whole.program == p  # all-or-nothing lost both wins


def test_unknown_extractor_lists_the_valid_ones():
    with pytest.raises(KeyError, match="greedy-dag, tree, ilp"):
        extractor("best")
    assert set(EXTRACTORS) == {"greedy-dag", "tree", "ilp"}


def test_dangling_e_nodes_are_dropped_not_fatal():
    # issue #13: an e-node over an e-class that no row has as output (egglog left a merged
    # id behind); a class left without e-nodes drops its users' e-nodes in turn
    t = TensorType((4,), F32)
    g = EClassGraph()
    g.add(0, ENode(Op.PARAM, (), (("index", 0),), t))
    g.add(1, ENode(Op.NEG, (0,), (), t))
    g.add(1, ENode(Op.NEG, (99,), (), t))  # 99: no e-nodes
    g.add(2, ENode(Op.EXP, (3,), (), t))
    g.add(3, ENode(Op.ABS, (98,), (), t))  # emptied: 2's only e-node goes too
    g.add(4, ENode(Op.ADD, (1, 1), (), t))
    g.add(4, ENode(Op.ADD, (1, 2), (), t))
    with pytest.raises(KeyError, match="drop_dangling"):
        choose(g, [4])
    assert g.drop_dangling() == 4 and g.dangling == 4
    assert sorted(g.classes) == [0, 1, 4] and len(g.classes[4]) == 1
    for name in ("tree", "greedy-dag"):
        choices = choose(g, [4], name=name)
        assert choices[4].node.children == (1, 1)


def test_dag_costs_count_shared_classes_once():
    t = TensorType((1000,), F32)
    g = EClassGraph()
    g.add(0, ENode(Op.PARAM, (), (("index", 0),), t))
    g.add(1, ENode(Op.EXP, (0,), (), t))
    g.add(2, ENode(Op.ADD, (1, 1), (), t))
    g.add(3, ENode(Op.MUL, (2, 1), (), t))
    dag, tree = choose(g, [3], "flops", "greedy-dag"), choose(g, [3], "flops", "tree")
    assert dag[3].cost == 3000 and tree[3].cost == 5000  # exp counted once, or per use


def test_greedy_dag_prefers_a_shared_subterm_that_tree_cost_counts_twice():
    # class 5: add(s, s) with s = exp(exp(p)) (tree 7, DAG 4: the parameter costs one too)
    # or neg(neg(neg(neg(p)))) (tree and DAG 5)
    t = TensorType((4,), F32)
    g = EClassGraph()
    g.add(0, ENode(Op.PARAM, (), (("index", 0),), t))
    g.add(1, ENode(Op.EXP, (0,), (), t))
    g.add(2, ENode(Op.EXP, (1,), (), t))
    for c in (3, 4, 6):
        g.add(c, ENode(Op.NEG, (c - 1 if c != 3 else 0,), (), t))
    g.add(5, ENode(Op.ADD, (2, 2), (), t))
    g.add(5, ENode(Op.NEG, (6,), (), t))
    g.classes[6] = [ENode(Op.NEG, (4,), (), t)]
    dag, tree = choose(g, [5], "nodes", "greedy-dag"), choose(g, [5], "nodes", "tree")
    assert dag[5].node.op is Op.ADD and dag[5].cost == 4
    assert tree[5].node.op is Op.NEG and tree[5].cost == 5


def chain(n: int):
    def body(a):
        x = a
        for i in range(n):
            x = mk(Op.NEG if i % 2 else Op.EXP, x)
        return x
    return prog(func("deep", [T(F32, 4)], body))


@pytest.mark.parametrize("name", ["tree", "greedy-dag"])
def test_a_20000_node_chain_converts_and_extracts_without_recursion(name):
    p = chain(20_000)
    peg = to_egraph(p)
    out = extract(peg, extractor=name)
    assert out.program == p and out.cost == program_cost(p)


def test_extraction_ignores_e_class_ids():
    # another program in the e-graph first shifts every e-class id
    p = shared_matmul()
    first = extract(saturated(p))
    rewrites.load(SATURATE)
    peg = to_egraph(chain(50))
    peg = to_egraph(p, peg.egraph)
    saturate(peg, SATURATE, rules=rewriting.select(SATURATE))
    second = extract(peg)
    assert first == second and first.program.fingerprint() == second.program.fingerprint()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(max_nodes=10, functions=(1, 2)))
def test_extraction_never_costs_more_than_the_input(p):
    peg = saturated(p, ("canonical", "algebra", "activation", "layout"))
    before = program_cost(p)
    for name in ("greedy-dag", "tree"):
        out = extract(peg, extractor=name)
        assert out.cost == program_cost(out.program) <= before
        again = extract(peg, extractor=name)
        assert again == out  # deterministic


def test_from_egraph_without_rules_is_the_input():
    p = shared_matmul()
    assert from_egraph(to_egraph(p)) == p


def test_ilp_finds_the_cheapest_dag_that_greedy_misses():
    peg = saturated(shared_matmul())
    ilp = extract(peg, extractor="ilp", regions=False)
    assert count(ilp.program, Op.EINSUM) == 1 and count(ilp.program, Op.LOG_SOFTMAX) == 1
    assert ilp.cost == extract(peg).cost < program_cost(peg.program)
    assert ilp.note == ""


def test_ilp_rules_out_cycles_and_falls_back_at_its_time_limit():
    # class 1 = neg(class 1) or exp(p): the cyclic e-node is never chosen
    t = TensorType((4,), F32)
    g = EClassGraph()
    g.add(0, ENode(Op.PARAM, (), (("index", 0),), t))
    g.add(1, ENode(Op.NEG, (1,), (), t))
    g.add(1, ENode(Op.EXP, (0,), (), t))
    g.add(2, ENode(Op.ADD, (1, 2), (), t))  # cyclic through itself
    g.add(2, ENode(Op.MUL, (1, 1), (), t))
    choices = choose(g, [2], name="ilp")
    assert choices[2].node.op is Op.MUL and choices[1].node.op is Op.EXP
    options = {"time_limit_s": 1e-9}
    peg = saturated(shared_matmul())
    from accy.egraph.convert import read_egraph

    graph, handles = read_egraph(peg.egraph)
    roots = [handles[h] for h in peg.roots()]
    greedy = choose(graph, roots, name="greedy-dag")
    assert choose(graph, roots, name="ilp", options=options) == greedy
    assert "greedy-dag result used" in options["note"]
