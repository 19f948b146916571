"""accy's rewrite rules: egglog rule sets by theme, every rule named and tagged with a policy.

Themes and their rule sets (``load()`` imports them; nothing is imported before it is asked
for, like the pass registry):

==============  =====================  ===================================================
rule set        module                 what
==============  =====================  ===================================================
``canonical``   ``rewrites.canonical`` identities, oriented constants, movement folding
``fold``        ``rewrites.canonical`` constant folding of elementwise ops on splats
``algebra``     ``rewrites.algebra``   commutativity, distributivity, exp/log, division
``einsum``      ``rewrites.einsum``    merge/split contractions, absorb movement, scalars
``activation``  ``rewrites.activation`` softmax/log-softmax/cross-entropy forms
``layout``      ``rewrites.layout``    transpose/reshape/broadcast motion
``concat``      ``rewrites.concat``    concat/slice identities, concat through contractions
                                       and elementwise ops
``merge``       ``rewrites.merge``     multi-pattern: two contractions sharing an operand ->
                                       slices of one contraction over a concat
==============  =====================  ===================================================

Multi-pattern rules (``Theme.rule``) match several terms at once (Tensat's): their
``RuleInfo.multi`` is true, and ``saturate{multi-pattern-iterations=N}`` runs them only in
the first N iterations, which keeps the e-graph small.

Floating-point policy
---------------------
Every rule carries exactly one policy tag. It says how the rule's right-hand side may differ
from its left-hand side when both are evaluated in IEEE arithmetic (what ``accy.interpret``
computes at the program's precision):

``exact``
    The same result for every input, infinities, NaN and signed zeros included (NaN payloads
    aside). Sums and contractions count as exact when they add the same terms: accy's IR leaves
    the order of a reduction's or an einsum's additions unspecified (the interpreter, tree
    reductions and tiled contractions each choose their own), so absorbing a transpose into an
    einsum spec is exact, and so is constant folding (it evaluates with the interpreter's
    numpy semantics in the op's dtype). Always enabled.
``stable``
    Equal in real arithmetic; the right-hand side rounds differently but is at least as
    accurate, and is the numerically stable form (``log(softmax(x))`` -> ``log_softmax(x)``,
    ``exp(x)/sum(exp(x))`` -> ``softmax(x)``, ``sum`` of n broadcast copies -> ``x * n``).
    Where the left-hand side overflows or meets an infinity the stable form may give a finite
    result (or an infinity) where it gave NaN: ``softmax-from-shifted``,
    ``log-softmax-from-shifted`` and ``cross-entropy-from-one-hot`` on a row holding ``+inf``
    (the random-program check, ``accy.testing.check_rule``, found these; they are intended).
    Enabled by default; rule sets and ``disable=`` switch them off.
``finite-math``
    Exact for finite inputs, but not for infinities, NaN or the sign of zero (``x * 0 -> 0``,
    ``x - x -> 0``, ``x + 0 -> x`` turns ``-0`` into ``+0``, ``max`` commuted picks the other
    zero). Off unless the pass is given ``finite-math=true`` (or ``fast-math=true``).
``fast-math``
    Equal in real arithmetic but rounds differently, possibly less accurately, and may
    overflow where the original does not: reassociation (``(x + c1) + c2 -> x + (c1 + c2)``,
    merging or re-pairing contractions), distributivity (``a*b + a*c <-> a*(b + c)``),
    division by a constant that is not a power of two as a multiplication by its reciprocal,
    ``log(exp(x)) -> x``. Off unless the pass is given ``fast-math=true`` (which also enables
    ``finite-math`` rules, as GCC's ``-ffast-math`` implies ``-ffinite-math-only``).

Integer and bool rules are tagged by what they do to those dtypes: wrapping integer arithmetic
is associative and ``i - i == 0``, so those variants are ``exact`` (``add-zero-int``).

Writing rules
-------------
A theme module imports only :mod:`accy.egraph.sorts`, :mod:`accy.egraph.rules`, egglog and
this package; it makes a
:class:`Theme` (a registered ``RuleSet`` plus tags) and adds rules with ``rewrite`` or
``birewrite``, each with a kebab-case name, a ``policy`` and a one-line ``doc``::

    algebra = Theme("algebra", "distributivity, exp/log identities")
    algebra.rewrite("factor-mul-add",
                    Tensor.add(Tensor.mul(a, b, t), Tensor.mul(a, c, t), t),
                    Tensor.mul(a, Tensor.add(b, c, infer_type("add", tb, tc)), t),
                    eq(tb).to(b.ty), eq(tc).to(c.ty),
                    policy="fast-math", doc="a*b + a*c -> a*(b + c): one multiply fewer")

Conditions are written with :func:`has_type` (``eq(x.ty).to(t)``), :func:`holds`
(``py_test``) and :func:`same_types` (``same_type``): the same egglog facts, but recorded, so
the passes' prefilter can evaluate them on the IR before building an e-graph (a rule whose
pattern occurs nowhere, or whose conditions fail everywhere, cannot fire). Plain ``eq``/
``py_test`` facts work too; the prefilter then assumes they might hold.

Python computes what egglog's primitives cannot: ``py_text`` (from ``accy.egraph.rules``), and here
:func:`py_f64` (a float, e.g. a folded constant) and :func:`py_int` (an int, e.g. an axis).
Their functions must be module-level (picklable) and total: an exception inside a rule aborts
the saturation, so guard with :func:`holds` first.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from egglog import BigInt, BigRat, Fact, String, eq, f64, i64
from egglog.deconstruct import get_callable_args, get_callable_fn, get_literal_value, get_var_name

from accy.egraph.rules import RULESETS, RuleSet, py_test, py_text
from accy.egraph.rules import unregister as unregister_ruleset
from accy.egraph.sorts import Tensor

__all__ = [
    "POLICIES", "RULE_INFO", "THEMES", "Condition", "Policy", "RuleInfo", "Theme",
    "allowed_policies", "has_type", "holds", "load", "py_f64", "py_int", "rule_info",
    "same_types", "unregister",
]

Policy = Literal["exact", "stable", "finite-math", "fast-math"]

POLICIES: dict[str, str] = {
    "exact": "the same IEEE result for every input (sums: the same terms); always on",
    "stable": "equal in real arithmetic, at least as accurate (stable forms); on by default",
    "finite-math": "exact for finite inputs only (inf, nan, signed zeros differ); "
                   "finite-math=true or fast-math=true",
    "fast-math": "rounds differently (reassociation, distributivity); fast-math=true",
}

THEMES: dict[str, str | None] = {
    "canonical": "rewrites.canonical",
    "fold": "rewrites.canonical",
    "algebra": "rewrites.algebra",
    "einsum": "rewrites.einsum",
    "activation": "rewrites.activation",
    "layout": "rewrites.layout",
    "concat": "rewrites.concat",
    "merge": "rewrites.merge",
}
"""Rule set name -> the module that registers it (imported by :func:`load`); None for rule
sets defined at run time (:class:`Theme`)."""


Arg = tuple[str, Any]  # ("var", name), ("f64", f64 variable name), ("lit", value), ("?", None)


@dataclass(frozen=True)
class Condition:
    """A condition the prefilter can evaluate: ``type`` (tensor variable ``var`` has the type
    bound to ``type_var``, binding it if unbound) or ``test`` (``fn(*args)`` is true)."""

    kind: Literal["type", "test"]
    var: str = ""
    type_var: str = ""
    fn: Callable[..., bool] | None = None
    args: tuple[Arg, ...] = ()


@dataclass(frozen=True)
class RuleInfo:
    """What accy knows about a named rule beyond its egglog form."""

    name: str
    ruleset: str
    policy: Policy
    doc: str
    patterns: tuple[Any, ...]  # left-hand sides (both sides of a birewrite), for prefilters
    permutes: bool = False  # only reorders operands: never makes a term cheaper by itself
    conditions: tuple[Condition, ...] = ()  # the recorded ones among its conditions
    multi: bool = False  # matches several terms at once (Theme.rule): iterations are capped


RULE_INFO: dict[str, RuleInfo] = {}
"""Rule name -> its tag, doc and patterns, for every rule of every loaded theme."""


class Theme:
    """A registered rule set whose rules carry a policy tag and a doc (module docstring).

    The built-in themes are listed in ``THEMES`` with their modules; any other name makes a
    rule set defined at run time, by a script or a notebook (``THEMES[name]`` is None: there
    is nothing to import), which :func:`unregister` removes again."""

    def __init__(self, name: str, doc: str) -> None:
        self.ruleset = RuleSet(name, doc)
        self.name = name
        THEMES.setdefault(name, None)

    def rewrite(self, name: str, lhs: Any, rhs: Any, *when: Any, policy: Policy, doc: str,
                permutes: bool = False) -> None:
        """``lhs`` -> ``rhs`` where ``when`` holds."""
        self._check(name, policy, doc)
        self.ruleset.rewrite(name, lhs, rhs, *when, doc=doc)
        RULE_INFO[name] = RuleInfo(name, self.name, policy, doc, (lhs,), permutes,
                                   _recorded(when))

    def birewrite(self, name: str, lhs: Any, rhs: Any, *when: Any, policy: Policy,
                  doc: str) -> None:
        """``lhs`` <-> ``rhs`` under one name (``when`` must hold, and bind, both ways)."""
        self._check(name, policy, doc)
        self.ruleset.birewrite(name, lhs, rhs, *when, doc=doc)
        RULE_INFO[name] = RuleInfo(name, self.name, policy, doc, (lhs, rhs), False,
                                   _recorded(when))

    def rule(self, name: str, *facts: Any, policy: Policy, doc: str,
             pattern: Any) -> _ThemeRule:
        """A multi-pattern rule: ``facts`` match several terms, ``.then(*actions)`` acts.

        ``pattern`` is one of the matched terms, the prefilter's left-hand side (the rule
        cannot fire where it occurs nowhere); conditions on variables it does not bind count
        as true there."""
        self._check(name, policy, doc)
        return _ThemeRule(self, name, facts, policy, doc, pattern)

    @staticmethod
    def _check(name: str, policy: Policy, doc: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"rule {name!r}: policy {policy!r} is not one of "
                             f"{', '.join(POLICIES)}")
        if not doc:
            raise ValueError(f"rule {name!r} needs a one-line doc")
        if name in RULE_INFO:
            raise ValueError(f"rule {name!r} is already registered (in rule set "
                             f"{RULE_INFO[name].ruleset!r})")


class _ThemeRule:
    def __init__(self, theme: Theme, name: str, facts: tuple[Any, ...], policy: Policy,
                 doc: str, pattern: Any) -> None:
        self._args = theme, name, facts, policy, doc, pattern

    def then(self, *actions: Any) -> None:
        theme, name, facts, policy, doc, pattern = self._args
        theme.ruleset.rule(name, *facts, doc=doc).then(*actions)
        RULE_INFO[name] = RuleInfo(name, theme.name, policy, doc, (pattern,), False,
                                   _recorded(facts), multi=True)


# ---- conditions -------------------------------------------------------------------------------

_PENDING: dict[int, tuple[Fact, Condition]] = {}  # made by the helpers, until a rule takes them


def _record(fact: Fact, condition: Condition) -> Fact:
    _PENDING[id(fact)] = (fact, condition)
    return fact


def _recorded(when: tuple[Any, ...]) -> tuple[Condition, ...]:
    return tuple(_PENDING.pop(id(f))[1] for f in when if id(f) in _PENDING)


def _arg(x: Any) -> Arg:
    if isinstance(x, str | int) and not isinstance(x, bool):
        return ("lit", x)
    name = get_var_name(x)
    if name is not None:
        return ("var", name)
    inner = get_callable_args(x)
    if str(get_callable_fn(x)).endswith(".to_string") and inner and len(inner) == 1:
        inner_name = get_var_name(inner[0])
        if inner_name is not None and isinstance(inner[0], f64):
            return ("f64", inner_name)
    literal = get_literal_value(x)
    return ("lit", literal) if literal is not None else ("?", None)


def has_type(x: Tensor, t: String) -> Fact:
    """``eq(x.ty).to(t)``: binds ``t`` to the type of ``x``, or checks it when bound."""
    return _record(eq(x.ty).to(t), Condition("type", var=get_var_name(x) or "",
                                             type_var=get_var_name(t) or ""))


def holds(fn: Callable[..., bool], *args: Any) -> Fact:
    """``py_test(fn, *args)``: ``fn`` (module-level, total) is true of the bound values."""
    return _record(py_test(fn, *args), Condition("test", fn=fn, args=tuple(map(_arg, args))))


def _all_equal(*xs: str) -> bool:
    return all(x == xs[0] for x in xs)


def same_types(*type_vars: String) -> Fact:
    """The bound type texts are all equal (``rules.same_type``, recorded)."""
    return holds(_all_equal, *type_vars)


def load(rulesets: Iterable[str] | None = None) -> list[RuleSet]:
    """Import the themes of ``rulesets`` (all by default) and return their rule sets.

    An unknown name is a ``KeyError`` that lists the valid ones.
    """
    names = list(THEMES) if rulesets is None else list(rulesets)
    for n in names:
        if n not in THEMES:
            raise KeyError(f"unknown rule set {n!r}; valid rule sets: {', '.join(THEMES)}")
        module = THEMES[n]
        if module is not None:
            importlib.import_module(module)
    return [RULESETS[n] for n in names]


def unregister(name: str) -> None:
    """Remove the rule set ``name`` defined at run time (a :class:`Theme` of a script or a
    notebook): its rules leave every registry, and every cache of the passes forgets them
    (:func:`accy.egraph.rules.unregister`), so the set can be defined again under the same
    names. Built-in themes cannot be removed: ``saturate{disable=...}`` switches rules off."""
    if name not in THEMES:
        raise KeyError(f"unknown rule set {name!r}; valid rule sets: {', '.join(THEMES)}")
    if THEMES[name] is not None:
        raise ValueError(f"rule set {name!r} is built in ({THEMES[name]}); switch its rules "
                         "off with saturate{disable=...} instead")
    for rule in unregister_ruleset(name).rules:
        RULE_INFO.pop(rule.name, None)
    del THEMES[name]


def rule_info(name: str) -> RuleInfo:
    """The tag and doc of a loaded rule; an unknown name lists the valid ones."""
    try:
        return RULE_INFO[name]
    except KeyError:
        raise KeyError(f"unknown rule {name!r}; valid rules: "
                       f"{', '.join(sorted(RULE_INFO))}") from None


def allowed_policies(*, finite_math: bool = False, fast_math: bool = False) -> frozenset[str]:
    """The policy tags a pass enables: ``exact`` and ``stable``, plus what the flags ask for."""
    out = {"exact", "stable"}
    if finite_math or fast_math:
        out.add("finite-math")
    if fast_math:
        out.add("fast-math")
    return frozenset(out)


# ---- Python values inside rules ---------------------------------------------------------------


def _ratio_part(fn: Callable[..., float], index: int, *args: Any) -> str:
    return str(float(fn(*args)).as_integer_ratio()[index])


def py_f64(fn: Callable[..., float], *args: Any) -> f64:
    """An f64 computed by ``fn(*args)`` when the rule fires (``py_text``'s arguments).

    egglog has no Python-to-float conversion, so the value travels as an exact ratio of two
    big integers (``BigRat.to_f64`` rounds it back to the very same double). ``fn`` must return
    a finite float; guard the rule with a ``py_test`` where it might not.
    """
    return BigRat(BigInt.from_string(py_text(partial(_ratio_part, fn, 0), *args)),
                  BigInt.from_string(py_text(partial(_ratio_part, fn, 1), *args))).to_f64()


def _int_text(fn: Callable[..., int], *args: Any) -> str:
    return str(int(fn(*args)))


def py_int(fn: Callable[..., int], *args: Any) -> i64:
    """An i64 computed by ``fn(*args)`` when the rule fires (e.g. an axis from an axes text)."""
    return BigRat(BigInt.from_string(py_text(partial(_int_text, fn), *args)),
                  BigInt(1)).to_i64()
