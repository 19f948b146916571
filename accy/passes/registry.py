"""The pass registry: pass name -> pass class. Duplicate names are errors."""

from __future__ import annotations

from accy.passes.base import Pass

PASSES: dict[str, type[Pass]] = {}


def register[P: type[Pass]](cls: P) -> P:
    """Class decorator adding a pass to the registry under ``cls.name``."""
    name = cls.name
    if name in PASSES:
        raise ValueError(f"pass {name!r} is already registered by {PASSES[name].__qualname__}")
    if name != name.lower() or "_" in name or " " in name:
        raise ValueError(f"pass name {name!r} must be kebab-case")
    PASSES[name] = cls
    return cls


def lookup(name: str) -> type[Pass]:
    _load_builtin_passes()
    try:
        return PASSES[name]
    except KeyError:
        valid = ", ".join(sorted(PASSES))
        raise KeyError(f"unknown pass {name!r}; valid passes: {valid}") from None


def all_passes() -> dict[str, type[Pass]]:
    _load_builtin_passes()
    return dict(PASSES)


def _load_builtin_passes() -> None:
    import accy.passes.stages  # noqa: F401  (importing registers every built-in pass)
