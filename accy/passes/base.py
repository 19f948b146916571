"""Passes: frozen dataclasses whose fields are their options.

A pass declares ``name`` (kebab-case, the name in pipeline text), the ``stage`` it belongs to,
and the analyses it ``preserves``. Its options are dataclass fields made with :func:`option`,
which carries a one-line doc shown by ``accy passes`` and the values the option allows
(``minimum``/``maximum``/``above`` for numbers, ``choices``, ``nonempty``, ``power_of_two``;
floats must be finite unless ``finite=False``; ``names`` for lists of rule or rule-set
names). Every option is checked against them when pipeline text is read (the error points at
the value; rule names against the rule registry) and when a pass is constructed in Python
(:meth:`Pass.__post_init__`), so a bad value never reaches an e-graph or a launch.
``run(ctx, product)`` returns a new product; passes keep no state between runs and read no
environment variables or globals.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from accy.errors import OptionError
from accy.ir.program import Stage

if TYPE_CHECKING:
    from accy.passes.manager import PassContext
    from accy.product import Product

OptionValue = int | float | bool | str | tuple

COUNT_MAX = 2**31 - 1
"""The largest count option (iterations, limits, widths, work-groups): egglog, the path search
and OpenCL drivers take such counts as 32-bit signed integers (2**32 work-groups kill PoCL)."""

SECONDS_MAX = 86_400.0
"""The longest time limit of a pass, in seconds (a day): a finite budget, never a typo's."""


def option(default: Any, doc: str, *, minimum: float | None = None,
           maximum: float | None = None, above: float | None = None,
           choices: tuple[Any, ...] | None = None, nonempty: bool = False,
           power_of_two: bool = False, finite: bool = True,
           names: Literal["rule-sets", "rules"] | None = None) -> Any:
    """Declare a pass option: ``strategy: Literal["a", "b"] = option("a", "which ...")``.

    The allowed values: ``minimum``/``maximum`` (inclusive) and ``above`` (exclusive lower
    bound) for numbers, ``choices`` for str (each item of a list), ``nonempty`` for str and
    lists, ``power_of_two`` for ints; a float must be finite unless ``finite=False``.
    ``names``: each item names a registered rule set (``rule-sets``) or a rule or rule set
    (``rules``); pipeline text is checked against the registry as it is read
    (:mod:`accy.passes.spec`), a pass constructed in Python when it runs, since a script may
    define its rule set after constructing the pass.
    """
    return field(default=default, metadata={
        "doc": doc, "minimum": minimum, "maximum": maximum, "above": above,
        "choices": None if choices is None else tuple(choices), "nonempty": nonempty,
        "power_of_two": power_of_two, "finite": finite, "names": names})


@dataclass(frozen=True)
class OptionInfo:
    """What pipeline text may say about one option."""

    name: str  # kebab-case, as written in pipeline text
    field: str  # the dataclass field
    type: Any  # int, float, bool, str, a Literal, or tuple[X, ...]
    default: Any
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    above: float | None = None  # exclusive lower bound (time limits: above 0)
    allowed: tuple[Any, ...] | None = None  # declared choices (a Literal has its own)
    nonempty: bool = False
    power_of_two: bool = False
    finite: bool = True
    names: Literal["rule-sets", "rules"] | None = None  # what the items name (rule registry)

    @property
    def choices(self) -> tuple[Any, ...] | None:
        t = self.element_type
        return typing.get_args(t) if typing.get_origin(t) is Literal else self.allowed

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.type) is tuple

    @property
    def element_type(self) -> Any:
        return typing.get_args(self.type)[0] if self.is_list else self.type

    @property
    def is_numeric(self) -> bool:
        return self.element_type in (int, float)

    @property
    def has_range(self) -> bool:
        """Whether a numeric option is bounded on both sides (the registry test asks it)."""
        return (self.minimum is not None or self.above is not None) and self.maximum is not None

    @property
    def type_text(self) -> str:
        def one(t: Any) -> str:
            if typing.get_origin(t) is Literal:
                return "|".join(str(a) for a in typing.get_args(t))
            return t.__name__

        return f"list of {one(self.element_type)}" if self.is_list else one(self.type)

    @property
    def range_text(self) -> str:
        """The allowed values in words (``1 <= iterations <= 2147483647``); "" when any value
        of the type is allowed."""
        parts = []
        low = (f"{_num(self.minimum)} <= " if self.minimum is not None else
               f"{_num(self.above)} < " if self.above is not None else "")
        if low or self.maximum is not None:
            high = f" <= {_num(self.maximum)}" if self.maximum is not None else ""
            parts.append(f"{low}{self.name}{high}")
        if self.power_of_two:
            parts.append("a power of two")
        if self.element_type is float and self.finite:
            parts.append("finite")
        if self.allowed is not None:
            parts.append("one of " + ", ".join(map(str, self.allowed)))
        if self.nonempty:
            parts.append("not empty")
        text = ", ".join(parts)
        return f"each item: {text}" if self.is_list and text and not self.nonempty else text

    def check(self, value: Any) -> None:
        """Raise ValueError (saying what is allowed) unless ``value`` suits this option."""
        if self.is_list:
            if not isinstance(value, tuple):
                raise ValueError(f"expected a tuple ({self.type_text}), got {value!r}")
            if self.nonempty and not value:
                raise ValueError(f"got an empty list; allowed: {self.range_text}")
            for item in value:
                self._check_one(item)
        else:
            self._check_one(value)

    def _check_one(self, value: Any) -> None:
        t = self.element_type
        if typing.get_origin(t) is Literal:
            if value not in typing.get_args(t):
                allowed = ", ".join(map(str, typing.get_args(t)))
                raise ValueError(f"unknown value {value!r}; allowed values: {allowed}")
            return
        # bool is an int to Python, never to an option; an int is a fine float
        if t is bool and not isinstance(value, bool) or t is str and not isinstance(value, str) \
                or t is int and (isinstance(value, bool) or not isinstance(value, int)) \
                or t is float and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"expected {t.__name__}, got {type(value).__name__} {value!r}")
        bad = (
            (t is float and self.finite and not math.isfinite(value))
            or (self.minimum is not None and value < self.minimum)
            or (self.above is not None and value <= self.above)
            or (self.maximum is not None and value > self.maximum)
            or (self.power_of_two and (value <= 0 or value & (value - 1)))
            or (self.allowed is not None and value not in self.allowed)
            or (t is str and self.nonempty and not self.is_list and value == "")
        )
        if bad:
            raise ValueError(f"got {value!r}; allowed: {self.range_text}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else repr(x)


@dataclass(frozen=True)
class Pass:
    """Base of every pass. Subclasses are frozen dataclasses registered with ``@register``.

    Construction checks every option against its declaration (:meth:`OptionInfo.check`) and
    raises :class:`~accy.errors.OptionError` naming the pass, the option, the value and what
    is allowed. A subclass's own ``__post_init__`` runs after that check (it is wrapped when
    the subclass is made), whether or not it calls ``super().__post_init__()``.
    """

    name: ClassVar[str]
    stage: ClassVar[Stage]
    preserves: ClassVar[frozenset[str]] = frozenset()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("__post_init__")
        if own is not None and not getattr(own, "_checks_options", False):
            @functools.wraps(own)
            def checked(self: Pass) -> None:
                self.check_options()
                own(self)

            checked._checks_options = True  # type: ignore[attr-defined]
            cls.__post_init__ = checked  # type: ignore[method-assign]

    def __post_init__(self) -> None:
        self.check_options()

    def check_options(self) -> None:
        """Raise :class:`OptionError` for the first option whose value is not allowed."""
        for o in self.options():
            value = getattr(self, o.field)
            try:
                o.check(value)
            except ValueError as e:
                raise OptionError(f"pass {self.name}: option {o.name}: {e}") from None

    def run(self, ctx: PassContext, product: Product) -> Product:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def options(cls) -> tuple[OptionInfo, ...]:
        return _options_of(cls)

    def option_values(self) -> dict[str, Any]:
        """Options by kebab-case name, in declaration order."""
        return {o.name: getattr(self, o.field) for o in self.options()}

    def spec(self, full: bool = False) -> str:
        """This pass as pipeline text: ``name{opt=value ...}`` (non-default options unless full)."""
        from accy.passes.spec import format_pass

        return format_pass(self, full=full)


@functools.cache
def _options_of(cls: type[Pass]) -> tuple[OptionInfo, ...]:
    # cached: every construction checks its options, and type hints are slow to resolve
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        m = f.metadata
        out.append(OptionInfo(
            name=f.name.replace("_", "-"), field=f.name, type=hints[f.name],
            default=f.default, doc=m.get("doc", ""), minimum=m.get("minimum"),
            maximum=m.get("maximum"), above=m.get("above"), allowed=m.get("choices"),
            nonempty=m.get("nonempty", False), power_of_two=m.get("power_of_two", False),
            finite=m.get("finite", True), names=m.get("names"),
        ))
    return tuple(out)
