"""Passes: frozen dataclasses whose fields are their options.

A pass declares ``name`` (kebab-case, the name in pipeline text), the ``stage`` it belongs to,
and the analyses it ``preserves``. Its options are dataclass fields made with :func:`option`,
which carries a one-line doc shown by ``accy passes``. ``run(ctx, product)`` returns a new
product; passes keep no state between runs and read no environment variables or globals.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from accy.ir.program import Stage

if TYPE_CHECKING:
    from accy.passes.manager import PassContext
    from accy.product import Product

OptionValue = int | float | bool | str | tuple


def option(default: Any, doc: str) -> Any:
    """Declare a pass option: ``strategy: Literal["a", "b"] = option("a", "which ...")``."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class OptionInfo:
    """What pipeline text may say about one option."""

    name: str  # kebab-case, as written in pipeline text
    field: str  # the dataclass field
    type: Any  # int, float, bool, str, a Literal, or tuple[X, ...]
    default: Any
    doc: str

    @property
    def choices(self) -> tuple[Any, ...] | None:
        t = self.element_type
        return typing.get_args(t) if typing.get_origin(t) is Literal else None

    @property
    def is_list(self) -> bool:
        return typing.get_origin(self.type) is tuple

    @property
    def element_type(self) -> Any:
        return typing.get_args(self.type)[0] if self.is_list else self.type

    @property
    def type_text(self) -> str:
        def one(t: Any) -> str:
            if typing.get_origin(t) is Literal:
                return "|".join(str(a) for a in typing.get_args(t))
            return t.__name__

        return f"list of {one(self.element_type)}" if self.is_list else one(self.type)


@dataclass(frozen=True)
class Pass:
    """Base of every pass. Subclasses are frozen dataclasses registered with ``@register``."""

    name: ClassVar[str]
    stage: ClassVar[Stage]
    preserves: ClassVar[frozenset[str]] = frozenset()

    def run(self, ctx: PassContext, product: Product) -> Product:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    @classmethod
    def options(cls) -> tuple[OptionInfo, ...]:
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            out.append(OptionInfo(
                name=f.name.replace("_", "-"), field=f.name, type=hints[f.name],
                default=f.default, doc=f.metadata.get("doc", ""),
            ))
        return tuple(out)

    def option_values(self) -> dict[str, Any]:
        """Options by kebab-case name, in declaration order."""
        return {o.name: getattr(self, o.field) for o in self.options()}

    def spec(self, full: bool = False) -> str:
        """This pass as pipeline text: ``name{opt=value ...}`` (non-default options unless full)."""
        from accy.passes.spec import format_pass

        return format_pass(self, full=full)

