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
this package; it makes a :class:`Theme` (a registered ``RuleSet`` whose rules must carry a
policy tag and a doc) and adds rules with ``rewrite`` or ``birewrite``, each with a
kebab-case name, a ``policy`` and a one-line ``doc``; a new theme module is one line in
``THEMES``::

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
from functools import partial
from typing import Any

from egglog import BigInt, BigRat, Fact, String, eq, f64, i64
from egglog.deconstruct import get_callable_args, get_callable_fn, get_literal_value, get_var_name

from accy.egraph.rules import (
    RULES,
    RULESETS,
    Arg,
    Condition,
    NamedRule,
    Policy,
    RuleSet,
    RuleThen,
    py_test,
    py_text,
    unknown_name,
)
from accy.egraph.rules import unregister as unregister_ruleset
from accy.egraph.sorts import Tensor

__all__ = [
    "POLICIES", "THEMES", "Theme", "allowed_policies", "check_name", "has_type", "holds",
    "load", "py_f64", "py_int", "rule_info", "same_types", "unregister",
]

POLICIES: dict[str, str] = {
    "exact": "the same IEEE result for every input (sums: the same terms); always on",
    "stable": "equal in real arithmetic, at least as accurate (stable forms); on by default",
    "finite-math": "exact for finite inputs only (inf, nan, signed zeros differ); "
                   "finite-math=true or fast-math=true",
    "fast-math": "rounds differently (reassociation, distributivity); fast-math=true",
}

THEMES: dict[str, str] = {
    "canonical": "rewrites.canonical",
    "fold": "rewrites.canonical",
    "algebra": "rewrites.algebra",
    "einsum": "rewrites.einsum",
    "activation": "rewrites.activation",
    "layout": "rewrites.layout",
    "concat": "rewrites.concat",
    "merge": "rewrites.merge",
}
"""Built-in rule set name -> the module that registers it (imported by :func:`load`). Not a
registry: the rule sets and their rules live in ``accy.egraph.rules.RULESETS``/``RULES``,
with the rule sets scripts define at run time (:class:`Theme` of any other name)."""


class Theme(RuleSet):
    """A registered rule set whose every rule carries a policy tag and a one-line doc.

    The built-in themes are listed in ``THEMES`` with their modules; any other name makes a
    rule set defined at run time, by a script or a notebook, which :func:`unregister` removes
    again. The conditions written with :func:`has_type`, :func:`holds` and
    :func:`same_types` go into each rule's record for the passes' prefilter."""

    def rewrite(self, name: str, lhs: Any, rhs: Any, *when: Any,  # type: ignore[override]
                policy: Policy, doc: str, permutes: bool = False) -> NamedRule:
        """``lhs`` -> ``rhs`` where ``when`` holds."""
        _check_doc(name, doc)
        return super().rewrite(name, lhs, rhs, *when, doc=doc, policy=policy,
                               permutes=permutes, conditions=_recorded(when))

    def birewrite(self, name: str, lhs: Any, rhs: Any, *when: Any,  # type: ignore[override]
                  policy: Policy, doc: str) -> NamedRule:
        """``lhs`` <-> ``rhs`` under one name (``when`` must hold, and bind, both ways)."""
        _check_doc(name, doc)
        return super().birewrite(name, lhs, rhs, *when, doc=doc, policy=policy,
                                 conditions=_recorded(when))

    def rule(self, name: str, *facts: Any, policy: Policy,  # type: ignore[override]
             doc: str, patterns: tuple[Any, ...] = (), multi: bool = False) -> RuleThen:
        """A general rule (several patterns, any actions): ``theme.rule(name, *facts,
        policy=..., doc=..., patterns=(...)).then(*actions)``; ``patterns``, terms every
        match contains one of, let the prefilter skip programs holding none. ``multi``: it
        matches several terms at once, so ``saturate`` runs it in its first
        ``multi-pattern-iterations`` iterations only (Tensat's cap on e-graph growth)."""
        _check_doc(name, doc)
        return super().rule(name, *facts, doc=doc, policy=policy, patterns=patterns,
                            conditions=_recorded(facts), multi=multi)


def _check_doc(name: str, doc: str) -> None:
    if not doc or "\n" in doc:
        raise ValueError(f"rule {name!r} needs a one-line doc")


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


# ---- the registry, by name --------------------------------------------------------------------


def load(rulesets: Iterable[str] | None = None) -> list[RuleSet]:
    """Import the built-in themes among ``rulesets`` and return the named rule sets (built in
    or defined at run time) from the registry; by default every theme, and every registered
    rule set (themes first, then those defined at run time, in the order they were).

    An unknown name is a ``KeyError`` with the closest and every valid name (the message of
    :func:`check_name`)."""
    names = list(THEMES) if rulesets is None else list(rulesets)
    for n in names:
        check_name(n, rule_sets_only=True)
        if n in THEMES:
            importlib.import_module(THEMES[n])
    if rulesets is None:
        names = list(dict.fromkeys([*THEMES, *RULESETS]))
    return [RULESETS[n] for n in names]


def check_name(name: str, *, rule_sets_only: bool = False) -> None:
    """Raise ``KeyError`` unless ``name`` is a registered (or built-in) rule set or, unless
    ``rule_sets_only``, a rule; the message suggests the closest names (difflib).

    What pipeline text is checked with when it is read (``saturate{rulesets=... rules=...
    disable=...}``) and the passes again when they run, with the same message: a rule set
    defined after the text was read counts, one removed since fails the run. Built-in rule
    set names need no import; a rule name loads the built-in themes first."""
    if name in THEMES or name in RULESETS:
        return
    if rule_sets_only:
        raise KeyError(unknown_name("rule set", name, [*THEMES, *RULESETS]))
    if name not in RULES:
        load()
    if name not in RULES:
        sets = list(dict.fromkeys([*THEMES, *RULESETS]))
        raise KeyError(unknown_name("rule or rule set", name, [*sets, *RULES],
                                    f"valid rule sets: {', '.join(sets)} "
                                    "(accy rules lists the rules)"))


def unregister(name: str) -> None:
    """Remove the rule set ``name`` defined at run time (a :class:`Theme` of a script or a
    notebook): its rules leave the registry, and every cache of the passes forgets them
    (:func:`accy.egraph.rules.unregister`), so the set can be defined again under the same
    names. Built-in themes cannot be removed: ``saturate{disable=...}`` switches rules off."""
    if name in THEMES:
        raise ValueError(f"rule set {name!r} is built in ({THEMES[name]}); switch its rules "
                         "off with saturate{disable=...} instead")
    unregister_ruleset(name)


def rule_info(name: str) -> NamedRule:
    """The record of a registered rule (policy, doc, patterns...); an unknown name lists the
    closest and every valid one."""
    try:
        return RULES[name]
    except KeyError:
        raise KeyError(unknown_name("rule", name, sorted(RULES))) from None


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
