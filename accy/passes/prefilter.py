"""The rewrite passes' prefilter: whether any of the named rules may match a program.

Every rule's left-hand side is matched against the IR nodes, as egglog would match it in the
fresh e-graph, where every e-class is one IR node: a repeated variable must bind one node,
literal attributes must agree, and the conditions the rule recorded
(``rewrites.has_type``/``holds``) are evaluated. It over-approximates (operands of commutative
ops and einsum operand lists match in any order; unrecorded conditions count as true), so if
no rule can match, saturation could not change anything and no e-graph is built. Rules that
only reorder operands (``permutes``) do not count. ``tests/rewrite_rules/test_prefilter.py``
checks the over-approximation against egglog on random programs.

:func:`dormant` answers a coarser question for the rules that remain: which can never match
in a run on the program, whatever the others do. A rule's left-hand side needs the ops in
it; the ops a run can ever hold are the program's and those that rules which can match
mention (their right-hand sides and actions), to a fixed point. Declaring only the others
keeps the e-graph small: egglog copies every declared rule on each ``push``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from egglog.declarations import ClassMethodRef
from egglog.deconstruct import (
    get_callable_args,
    get_callable_fn,
    get_literal_value,
    get_var_name,
)

from accy.egraph.rules import RULES, Condition, on_unregister
from accy.egraph.sorts import SIGNATURES, encode_attr, signature
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Program

_COMMUTATIVE = frozenset({Op.ADD, Op.MUL, Op.MAX, Op.MIN, Op.EQ, Op.NE, Op.AND, Op.OR})
_MAX_PERMUTED = 6  # einsum/concat lists longer than this match any pattern (over-approximate)


Term = tuple[str, Any] | None  # ("lit", value), ("var", name), or None (anything)
Env = dict[str, Any]


@dataclass(frozen=True)
class Skeleton:
    """A left-hand side as the matcher sees it: ops, variables, literal attributes."""

    kind: str  # "var" (a Tensor variable), "any", "op", "full", "list"
    name: str = ""  # of a variable
    op: Op | None = None
    children: tuple[Skeleton, ...] = ()
    attrs: tuple[tuple[str, Term], ...] = ()  # (attribute, term), attributes egglog-encoded
    type: Term = None  # the type text
    value: Term = None  # a splat's value
    open: bool = False  # a list pattern with a tail variable (matches longer lists)


_ANY = Skeleton("any")


def skeleton(expr: Any) -> Skeleton:
    """The skeleton of an egglog pattern (unknown constructs match anything)."""
    name = get_var_name(expr)
    if name is not None:
        return Skeleton("var", name)
    fn, args = get_callable_fn(expr), get_callable_args(expr)
    fname = str(fn) if fn is not None else ""
    if fname == "Tensor.full":
        return Skeleton("full", value=_term(args[0]), type=_term(args[1]))
    if fname == "Tensor.constant":
        return Skeleton("op", op=Op.CONSTANT, attrs=(("value", _term(args[0])),),
                        type=_term(args[1]))
    if fname in ("TensorList.nil", "TensorList.cons"):
        items: list[Skeleton] = []
        while fname == "TensorList.cons":
            items.append(skeleton(args[0]))
            fn, args = get_callable_fn(args[1]), get_callable_args(args[1])
            fname = str(fn) if fn is not None else ""
        return Skeleton("list", children=tuple(items), open=fname != "TensorList.nil")
    sig = _BY_METHOD.get(fname)
    if sig is None or args is None:
        return _ANY
    k = 1 if sig.operands is None else sig.operands
    attrs = tuple((attr, _term(a)) for (attr, _), a in zip(sig.attrs, args[k:-1], strict=True))
    return Skeleton("op", op=sig.op, children=tuple(skeleton(a) for a in args[:k]),
                    attrs=attrs, type=_term(args[-1]))


_BY_METHOD = {f"Tensor.{sig.method}": sig for sig in SIGNATURES.values()}


def _term(expr: Any) -> Term:
    name = get_var_name(expr)
    if name is not None:
        return ("var", name)
    try:
        value = get_literal_value(expr)
    except Exception:  # noqa: BLE001 - a computed value, not a literal
        return None
    return None if value is None else ("lit", value)


def _bind(env: Env, term: Term, value: Any) -> Env | None:
    if term is None:
        return env
    kind, x = term
    if kind == "lit":
        return env if x == value else None
    if x in env:
        return env if env[x] is value or env[x] == value else None
    return {**env, x: value}


def _splat(node: Node) -> float | None:
    data, size = node.attr("value"), node.type.size
    item = node.type.dtype.itemsize
    if size == 0 or data != data[:item] * size:
        return None
    return float(node.value.reshape(-1)[0])


def _match(sk: Skeleton, node: Node, env: Env) -> Iterator[Env]:
    """Every binding under which ``node`` is an instance of ``sk``, given ``env``."""
    if sk.kind == "any":
        yield env
        return
    if sk.kind == "var":
        out = _bind(env, ("var", sk.name), node)
        if out is not None:
            yield out
        return
    if sk.kind == "full":
        value = _splat(node) if node.op is Op.CONSTANT else None
        out = None if value is None else _bind(env, sk.type, str(node.type))
        out = None if out is None else _bind(out, sk.value, value)
        if out is not None:
            yield out
        return
    if sk.op is not node.op:
        return
    out = _bind(env, sk.type, str(node.type))
    if out is not None and sk.attrs:
        kinds = dict(signature(node.op).attrs)
        for attr, term in sk.attrs:
            if out is not None and term is not None:
                out = _bind(out, term, encode_attr(kinds[attr], node.attr(attr)))
    if out is None:
        return
    if node.op.arity is None:
        yield from _match_list(sk.children[0], node.srcs, out)
    elif node.op in _COMMUTATIVE and len(sk.children) == 2:
        yield from _match_all(sk.children, node.srcs, out)
        yield from _match_all(sk.children, node.srcs[::-1], out)
    else:
        yield from _match_all(sk.children, node.srcs, out)


def _match_all(sks: Sequence[Skeleton], nodes: Sequence[Node], env: Env) -> Iterator[Env]:
    if not sks:
        yield env
        return
    for out in _match(sks[0], nodes[0], env):
        yield from _match_all(sks[1:], nodes[1:], out)


def _match_list(sk: Skeleton, srcs: tuple[Node, ...], env: Env) -> Iterator[Env]:
    if sk.kind != "list":
        yield env
        return
    n = len(sk.children)
    if len(srcs) < n or (not sk.open and len(srcs) != n):
        return
    if len(srcs) > _MAX_PERMUTED:
        yield env
        return
    for pick in itertools.permutations(srcs, n):
        yield from _match_all(sk.children, pick, env)


def _holds(conditions: Sequence[Condition], env: Env) -> bool:
    """Whether the recorded conditions may hold under ``env`` (unknown values: they may)."""
    for cond in conditions:
        if cond.kind == "type":
            node = env.get(cond.var)
            if not isinstance(node, Node):
                continue
            out = _bind(env, ("var", cond.type_var), str(node.type))
            if out is None:
                return False
            env = out
            continue
        args = []
        for kind, x in cond.args:
            if kind == "lit":
                args.append(x)
            elif kind in ("var", "f64") and x in env and not isinstance(env[x], Node):
                args.append(repr(env[x]) if kind == "f64" else env[x])
            else:
                break
        else:
            assert cond.fn is not None
            if not cond.fn(*args):
                return False
    return True


@dataclass(frozen=True)
class _Pattern:
    skeleton: Skeleton
    conditions: tuple[Condition, ...]


@cache
def _patterns(name: str) -> tuple[_Pattern, ...]:
    rule = RULES[name]
    return tuple(_Pattern(skeleton(p), rule.conditions) for p in rule.patterns)


on_unregister(lambda rs: _patterns.cache_clear())  # a rule name may come back with new patterns


def could_fire(program: Program, names: Iterable[str]) -> bool:
    """Whether any of the named rules (``permutes`` rules aside) may match ``program``; a
    rule that recorded no pattern (a general ``rule``) may always."""
    by_root: dict[Op | None, list[_Pattern]] = {}
    for name in names:
        if not RULES[name].permutes:
            if not RULES[name].patterns:
                return True
            for pat in _patterns(name):
                sk = pat.skeleton
                by_root.setdefault(sk.op if sk.kind == "op" else None, []).append(pat)
    anywhere = by_root.get(None, [])
    return any(_holds(pat.conditions, env)
               for n in program.nodes() for pat in (*by_root.get(n.op, ()), *anywhere)
               for env in _match(pat.skeleton, n, {}))


# ---- rules that can never match a run --------------------------------------------------------

_OP_OF_METHOD = {sig.method: sig.op for sig in SIGNATURES.values()} | {
    "full": Op.CONSTANT, "constant": Op.CONSTANT, "param": Op.PARAM}


def _needs(sk: Skeleton, out: set[Op]) -> set[Op]:
    """The ops a node matching ``sk`` must contain (a splat is a constant)."""
    if sk.kind == "op" and sk.op is not None:
        out.add(sk.op)
    elif sk.kind == "full":
        out.add(Op.CONSTANT)
    for child in sk.children:
        _needs(child, out)
    return out


def _mentioned(obj: Any, out: set[Op], seen: set[int]) -> set[Op]:
    """Every op whose Tensor constructor the egglog declaration ``obj`` names."""
    if id(obj) in seen:
        return out
    seen.add(id(obj))
    if isinstance(obj, ClassMethodRef):
        if obj.ident.name == "Tensor" and obj.method_name in _OP_OF_METHOD:
            out.add(_OP_OF_METHOD[obj.method_name])
    elif isinstance(obj, tuple | list | frozenset | set):
        for x in obj:
            _mentioned(x, out, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            _mentioned(x, out, seen)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _mentioned(getattr(obj, f.name), out, seen)
    return out


@cache
def _reach(name: str) -> tuple[tuple[frozenset[Op], ...] | None, frozenset[Op]]:
    """(the ops each of the rule's patterns needs, None for a rule without patterns; every op
    the rule names, which include all it can make)."""
    rule = RULES[name]
    needs = tuple(frozenset(_needs(p.skeleton, set())) for p in _patterns(name)) or None
    seen: set[int] = set()
    makes: set[Op] = set()
    for egg in rule.egg_rules:
        _mentioned(egg.decl, makes, seen)
    return needs, frozenset(makes)


on_unregister(lambda rs: (_reach.cache_clear(), _dormant.cache_clear()))


def dormant(programs: Iterable[Program], names: Sequence[str]) -> frozenset[str]:
    """The rules among ``names`` that cannot match in any run on ``programs`` (one e-graph
    holding them all): a pattern of theirs needs an op that neither the programs hold nor
    any rule that can match names (module docstring). Over-approximates what can match, as
    :func:`could_fire` does: conditions and attributes are not looked at."""
    ops = frozenset(n.op for p in programs for n in p.nodes())
    return _dormant(ops, tuple(names))


@lru_cache(maxsize=256)
def _dormant(ops: frozenset[Op], names: tuple[str, ...]) -> frozenset[str]:
    reach, waiting = set(ops), list(names)
    changed = True
    while changed:
        changed, still = False, []
        for name in waiting:
            needs, makes = _reach(name)
            if needs is None or any(n <= reach for n in needs):
                changed |= not makes <= reach
                reach |= makes
            else:
                still.append(name)
        waiting = still
    return frozenset(waiting)
