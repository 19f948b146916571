"""Named rules over accy's tensor sorts (:mod:`accy.egraph.sorts`), and the Python calls rules
use to compute types and other attributes: what ``rewrites/*.py`` build their rule sets with.

Types in rules
--------------
egglog forbids looking ``x.ty`` up in actions, so rules bind it in their conditions::

    a, b, c = tensors("a b c")
    t, tb, tc = types("t tb tc")
    algebra.rewrite(                      # operands of the result's type: reuse t
        "factor-mul-add",
        Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
        Tensor.mul(a, Tensor.add(b, c, t), t),
        eq(b.ty).to(t), eq(c.ty).to(t),
    )
    algebra.rewrite(                      # broadcasting operands: ask shapes.infer
        "factor-mul-add-broadcast",
        Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
        Tensor.mul(a, Tensor.add(b, c, infer_type("add", tb, tc)), t),
        eq(tb).to(b.ty), eq(tc).to(c.ty),
    )

A right-hand side gives every new node its type. Where that is none of the bound types,
``infer_type("add", tb, tc)`` computes it with ``accy.ir.shapes.infer`` inside egglog (a
``PyObject`` call); ``py_text`` and ``py_test`` do the same for any Python function of strings
and ints (einsum spec rewriting, constant folding with numpy semantics).

Performance: compare a ``.ty`` with a type variable of the pattern (``eq(b.ty).to(t)``), or
two looked-up types with ``same_type(tb, tc)`` (a filter). Joining two lookups on one fresh
variable (``eq(tb).to(b.ty), eq(tb).to(c.ty)``) makes egglog's planner scan the type table:
thirty times slower on a 10k-node e-graph.

The rule registry
-----------------
Every rule has a stable kebab-case name; ``RuleSet(name, doc)`` registers itself in
``RULESETS`` and its rules in ``RULES`` (duplicate names, and a rule named like a rule set,
are errors). These two dicts are accy's one rule registry: the built-in themes of
``rewrites`` (a ``rewrites.Theme`` is a ``RuleSet`` whose rules must carry a policy tag and a
doc), rule sets defined at run time by scripts, the passes' rule selection, ``accy rules``,
run reports and ``check_rule`` all read them. One record per rule, :class:`NamedRule`: its
name, rule set, floating-point policy (``rewrites``'s docstring states them; None for the
untagged rules of test rule sets, which no pass selects), doc, the patterns and conditions
the passes' prefilter evaluates on the IR, and its egglog rules.

The name is the egglog rule name, so it is what run reports carry; ``driver.select_rules``
picks rules by rule set, ``rules=`` and ``disable=``, naming rules or rule sets.
:func:`unregister` removes a set and its rules again, and has every module that caches
something by rule name forget it (:func:`on_unregister`), so a notebook can redefine a rule
set under the same names. :func:`unknown_name` words the error for a name that is not
registered (with difflib's did-you-mean), the same at parse time and at run time.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from egglog import Bool, Fact, String, eq, i64, rule, subsume, union, var
from egglog import PyObject as _PyObject
from egglog.egraph import RewriteOrRule

from accy.egraph import pyobjects
from accy.egraph.sorts import Tensor, TensorList, decode_attr, parse_type, signature
from accy.ir.ops import Op
from accy.ir.shapes import infer

__all__ = [
    "POLICY_TAGS", "RULES", "RULESETS", "Arg", "Condition", "NamedRule", "Policy", "RuleSet",
    "RuleThen", "generation", "infer_type", "on_unregister", "py_test", "py_text", "same_type",
    "unknown_name", "unregister",
]

# ---- Python inside rules ----------------------------------------------------------------------

pyobjects.install()  # egglog pickles every PyObject value: plain ones the fast way


def _pyobject(arg: Any) -> _PyObject:
    if isinstance(arg, bool) or not isinstance(arg, str | int | String | i64 | _PyObject):
        raise TypeError(f"a Python call in a rule takes Strings, i64s, str or int, got {arg!r}")
    if isinstance(arg, String):
        return _PyObject.from_string(arg)
    if isinstance(arg, i64):
        return _PyObject.from_int(arg)
    return arg if isinstance(arg, _PyObject) else _PyObject(arg)


def py_text(fn: Callable[..., str], *args: Any) -> String:
    """A String computed by ``fn(*args)`` when the rule fires (args: Strings, i64s, str, int).

    ``fn`` must be picklable (a module-level function, or a ``functools.partial`` of one).
    """
    return _PyObject(fn)(*(_pyobject(a) for a in args)).to_string()


def py_test(fn: Callable[..., bool], *args: Any) -> Fact:
    """A rule condition that holds where ``fn(*args)`` is true (args as for :func:`py_text`)."""
    return eq(_PyObject(fn)(*(_pyobject(a) for a in args)).to_bool()).to(Bool(True))


def _all_equal(*xs: Any) -> bool:
    return all(x == xs[0] for x in xs)


def same_type(*type_texts: Any) -> Fact:
    """A rule condition that holds where the given type texts (Strings) are all equal."""
    return py_test(_all_equal, *type_texts)


_INFERRED: dict[tuple[Any, ...], str] = {}  # _infer_text's results by its arguments
_INFERRED_MAX = 1 << 16  # entries; the memo starts over when full


def _infer_text(op_value: str, dynamic: tuple[str, ...], static: tuple[tuple[str, Any], ...],
                *args: Any) -> str:
    """The type text ``infer_type`` computes; remembered, as egglog calls it once per match
    and matches repeat the same operand types many times (``shapes.infer`` is pure)."""
    key = (op_value, dynamic, static, *args)
    out = _INFERRED.get(key)
    if out is None:
        if len(_INFERRED) >= _INFERRED_MAX:
            _INFERRED.clear()
        out = _INFERRED[key] = _infer_uncached(op_value, dynamic, static, *args)
    return out


def _infer_uncached(op_value: str, dynamic: tuple[str, ...],
                    static: tuple[tuple[str, Any], ...], *args: Any) -> str:
    op = Op(op_value)
    kinds = dict(signature(op).attrs)
    n = len(args) - len(dynamic)
    operand_types = tuple(parse_type(a) for a in args[:n])
    attrs = dict(static) | {k: decode_attr(kinds[k], v) for k, v in zip(dynamic, args[n:],
                                                                          strict=True)}
    result, _ = infer(op, operand_types, attrs)
    return str(result)


def infer_type(op: Op | str, *operand_types: Any, **attrs: Any) -> String:
    """The type text of ``op`` (an Op or its name) over operands of the given type texts.

    ``accy.ir.shapes.infer`` computes it when the rule fires (and raises there on operands it
    rejects). Attributes are given in their egglog form (``axes="[0]"``, ``axis=1``, a String
    variable) or, for bools, as a Python ``bool``: ``infer_type("reduce_sum", t, axes=ax,
    keepdims=False)``.
    """
    op = Op.parse(op) if isinstance(op, str) else op
    kinds = dict(signature(op).attrs)
    if set(attrs) != set(kinds):
        raise TypeError(f"infer_type({op.value}) takes attributes {sorted(kinds)}, "
                        f"got {sorted(attrs)}")
    static = tuple((k, v) for k, v in attrs.items() if isinstance(v, bool))
    dynamic = tuple(k for k in attrs if not isinstance(attrs[k], bool))
    fn = partial(_infer_text, op.value, dynamic, static)
    return py_text(fn, *operand_types, *(attrs[k] for k in dynamic))


# ---- named rules ------------------------------------------------------------------------------

Policy = Literal["exact", "stable", "finite-math", "fast-math"]
POLICY_TAGS: tuple[str, ...] = typing.get_args(Policy)
"""The floating-point policy tags, weakest promise last (``rewrites`` says what each means)."""

Arg = tuple[str, Any]  # ("var", name), ("f64", f64 variable name), ("lit", value), ("?", None)


@dataclass(frozen=True)
class Condition:
    """A rule condition the prefilter can evaluate on the IR: ``type`` (tensor variable ``var``
    has the type bound to ``type_var``, binding it if unbound) or ``test`` (``fn(*args)`` is
    true). ``rewrites.has_type``/``holds`` make them."""

    kind: Literal["type", "test"]
    var: str = ""
    type_var: str = ""
    fn: Callable[..., bool] | None = None
    args: tuple[Arg, ...] = ()


_NAME_RE = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
RULESETS: dict[str, RuleSet] = {}
RULES: dict[str, NamedRule] = {}
_FORGET: list[Callable[[RuleSet], None]] = []  # what caches rules runs when one set leaves
_generation = 0  # bumped by every unregister: caches keyed by rule names include it


def on_unregister(forget: Callable[[RuleSet], None]) -> Callable[[RuleSet], None]:
    """Have ``forget(rule_set)`` called whenever a rule set is unregistered (for modules that
    cache something per rule or rule-set name); returns ``forget``."""
    _FORGET.append(forget)
    return forget


def generation() -> int:
    """How many rule sets have been unregistered: a cache keyed by rule or rule-set names
    adds it to its keys, so a name defined again never meets the old rules."""
    return _generation


def unknown_name(what: str, name: str, valid: Iterable[str], listing: str = "") -> str:
    """The message for an unknown ``what`` (``rule set``, ``rule``...) named ``name``: the
    closest valid names (difflib), then ``listing``, by default every valid name in the order
    given (registration order reads best: built-in themes first)."""
    valid = list(dict.fromkeys(valid))
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ";"
    listing = listing or f"valid {what}s: {', '.join(valid) or '(none registered)'}"
    return f"unknown {what} {name!r}{hint} {listing}"


def unregister(name: str) -> RuleSet:
    """Remove the registered rule set ``name`` and its rules, and what modules cached about
    them (:func:`on_unregister`), so a script or notebook can define it again; returns it."""
    global _generation
    if name not in RULESETS:
        raise KeyError(unknown_name("rule set", name, RULESETS))
    rs = RULESETS.pop(name)
    for r in rs.rules:
        RULES.pop(r.name, None)
    _generation += 1
    for forget in _FORGET:
        forget(rs)
    return rs


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ValueError(f"{what} name {name!r} must be kebab-case (e.g. 'factor-mul-add')")


@dataclass(frozen=True)
class NamedRule:
    """The record of one named rule: what the registry, the passes and reports know of it."""

    name: str
    ruleset: str
    doc: str
    egg_rules: tuple[RewriteOrRule, ...]  # two for a birewrite
    egg_names: tuple[str, ...]  # the egglog rule names, as run reports carry them
    policy: Policy | None = None  # None: untagged (test rule sets); no pass selects it
    patterns: tuple[Any, ...] = ()  # left-hand sides (both sides of a birewrite), for prefilters
    permutes: bool = False  # only reorders operands: never makes a term cheaper by itself
    conditions: tuple[Condition, ...] = ()  # the recorded ones among its conditions
    multi: bool = False  # matches several terms at once: saturate caps its iterations


class RuleThen:
    """A general rule waiting for its actions (:meth:`RuleSet.rule`)."""

    def __init__(self, rs: RuleSet, name: str, facts: tuple[Any, ...],
                 tags: dict[str, Any]) -> None:
        self._rs, self._name, self._facts, self._tags = rs, name, facts, tags

    def then(self, *actions: Any) -> NamedRule:
        egg = rule(*self._facts, name=self._name).then(*actions)
        return self._rs._add(self._name, (egg,), (self._name,), **self._tags)


class RuleSet:
    """A named set of named rules, registered in ``RULESETS`` unless ``register=False``.

    ``RuleSet("algebra", "distributivity and friends")`` then ``rs.rewrite(...)``,
    ``rs.birewrite(...)`` or ``rs.rule(name, *facts).then(*actions)``. Unregistered sets
    (tests, experiments) are passed to the driver as objects; their rule names need only be
    unique within the set.
    """

    def __init__(self, name: str, doc: str, *, register: bool = True) -> None:
        _check_name("rule set", name)
        if register and (name in RULESETS or name in RULES):
            what = "rule set" if name in RULESETS else "rule"
            raise ValueError(f"rule set {name!r} is already registered (as a {what})")
        self.name, self.doc, self.registered = name, doc, register
        self._rules: dict[str, NamedRule] = {}
        if register:
            RULESETS[name] = self

    @property
    def rules(self) -> tuple[NamedRule, ...]:
        """The rules in the order they were added."""
        return tuple(self._rules.values())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {len(self._rules)} rules)"

    def rewrite(self, name: str, lhs: Tensor | TensorList, rhs: Tensor | TensorList,
                *when: Any, doc: str = "", subsume_lhs: bool = False,
                policy: Policy | None = None, permutes: bool = False,
                conditions: tuple[Condition, ...] = ()) -> NamedRule:
        """``lhs`` -> ``rhs`` where the conditions ``when`` hold (``subsume_lhs``: hide lhs).
        ``policy``, ``permutes`` and ``conditions`` (the prefilter's) go into the record."""
        return self._add(name, (_rewrite(name, lhs, rhs, when, subsume_lhs),), (name,),
                         doc=doc, policy=policy, patterns=(lhs,), permutes=permutes,
                         conditions=conditions)

    def birewrite(self, name: str, lhs: Tensor | TensorList, rhs: Tensor | TensorList,
                  *when: Any, doc: str = "", policy: Policy | None = None,
                  conditions: tuple[Condition, ...] = ()) -> NamedRule:
        """``lhs`` <-> ``rhs``: one name for both directions (reverse egglog name ``name<-``)."""
        back = name + "<-"
        rules = (_rewrite(name, lhs, rhs, when, False), _rewrite(back, rhs, lhs, when, False))
        return self._add(name, rules, (name, back), doc=doc, policy=policy,
                         patterns=(lhs, rhs), conditions=conditions)

    def rule(self, name: str, *facts: Any, doc: str = "", policy: Policy | None = None,
             patterns: tuple[Any, ...] = (),
             conditions: tuple[Condition, ...] = (), multi: bool = False) -> RuleThen:
        """A general rule: ``rs.rule("name", eq(x).to(...), ...).then(union(x).with_(...))``.
        ``patterns``: terms one of which any match contains, for the prefilter (none: the
        prefilter assumes the rule may always fire)."""
        return RuleThen(self, name, facts, {"doc": doc, "policy": policy, "patterns": patterns,
                                            "conditions": conditions, "multi": multi})

    def _add(self, name: str, egg_rules: tuple[RewriteOrRule, ...], egg_names: tuple[str, ...],
             *, doc: str, policy: Policy | None, patterns: tuple[Any, ...],
             permutes: bool = False, conditions: tuple[Condition, ...] = (),
             multi: bool = False) -> NamedRule:
        _check_name("rule", name)
        if name in self._rules or (self.registered and (name in RULES or name in RULESETS)):
            other = RULES[name].ruleset if name in RULES else self.name
            raise ValueError(f"rule {name!r} is already registered (in rule set {other!r})")
        if policy is not None and policy not in POLICY_TAGS:
            raise ValueError(f"rule {name!r}: policy {policy!r} is not one of "
                             f"{', '.join(POLICY_TAGS)}")
        named = NamedRule(name, self.name, doc, egg_rules, egg_names, policy, patterns,
                          permutes, conditions, multi)
        self._rules[name] = named
        if self.registered:
            RULES[name] = named
        return named


def _rewrite(egg_name: str, lhs: Any, rhs: Any, when: tuple[Any, ...],
             subsume_lhs: bool) -> RewriteOrRule:
    # a rewrite as a named rule, so its name reaches egglog's run reports
    sort = TensorList if isinstance(lhs, TensorList) else Tensor
    root = var("lhs_root_", sort)
    actions = [union(root).with_(rhs)]
    if subsume_lhs:
        actions.append(subsume(lhs))
    return rule(eq(root).to(lhs), *when, name=egg_name).then(*actions)
