"""Pipeline text, MLIR style: ``pass-a{opt=1 list=a,b},pass-b``.

Named pipelines (``accy-default``, ``accy-contract`` ...) may be used like a pass and expand
to their passes. ``parse_pipeline(p.text()) == p`` for every pipeline ``p``. Errors point at
the column, list valid pass or option names and types, and the allowed values of an option: a
value outside an option's declared range (:func:`accy.passes.base.option`) is an error here,
naming the pass, the option, the value and the range, never later when the pass runs. So is a
rule or rule-set name (an option declared with ``names=``) that the rule registry does not
know, with difflib's closest names and the caret under the item: checked against the registry
as it is when the text is read (built-in themes, and the rule sets a script has defined so
far); ``rewrites`` (and egglog) is imported only for text that names rules or rule sets, the
built-in themes only for text naming a rule.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any

from accy.errors import PipelineError
from accy.passes.base import OptionInfo, Pass


@dataclass(frozen=True)
class Pipeline:
    """An ordered tuple of configured passes."""

    passes: tuple[Pass, ...]

    def text(self, full: bool = False) -> str:
        """Canonical pipeline text; ``full`` prints every option, defaults included."""
        return ",".join(format_pass(p, full=full) for p in self.passes)

    def replacing(self, text: str) -> Pipeline:
        """This pipeline with every pass named in ``text`` (pipeline text) in place of its
        passes of that name: one pass's options changed in a named pipeline, as ablations
        need (``parse_pipeline("accy-default").replacing("loss-lowering{kernel-library=
        disabled}")``). A pass the pipeline does not run is a :class:`PipelineError`."""
        new = {p.name: p for p in parse_pipeline(text).passes}
        missing = sorted(set(new) - {p.name for p in self.passes})
        if missing:
            raise PipelineError(f"cannot replace {', '.join(missing)}: the pipeline runs no such "
                                f"pass ({self.text()})")
        return Pipeline(tuple(new.get(p.name, p) for p in self.passes))

    def __str__(self) -> str:
        return self.text()

    def __len__(self) -> int:
        return len(self.passes)


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        if len(value) == 1 and value[0] == "":
            return '""'
        return ",".join(format_value(v) for v in value)
    text = repr(value) if isinstance(value, float) else str(value)
    if text == "" or any(c.isspace() or c in ',{}="' for c in text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def format_pass(p: Pass, full: bool = False) -> str:
    parts = [
        f"{o.name}={format_value(getattr(p, o.field))}"
        for o in p.options()
        if full or getattr(p, o.field) != o.default
    ]
    return p.name + ("{" + " ".join(parts) + "}" if parts else "")


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def error(self, message: str, pos: int | None = None) -> PipelineError:
        pos = self.pos if pos is None else pos
        caret = " " * pos + "^"
        return PipelineError(f"column {pos + 1}: {message}\n  {self.text}\n  {caret}")

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def word(self, what: str) -> tuple[str, int]:
        self.skip_space()
        start = self.pos
        while self.pos < len(self.text) and (self.peek().isalnum() or self.peek() in "-_."):
            self.pos += 1
        if start == self.pos:
            found = repr(self.peek()) if self.peek() else "end of text"
            raise self.error(f"expected {what}, found {found}")
        return self.text[start:self.pos], start

    def value(self) -> tuple[list[tuple[str, bool]], list[int]]:
        """Comma-separated items, each bare or double-quoted: [(text, was_quoted)], and where
        each item starts."""
        items, starts = [], []
        while True:
            if self.peek() == '"':
                at = self.pos
                starts.append(at)
                self.pos += 1
                out = []
                while self.peek() and self.peek() != '"':
                    if self.peek() == "\\" and self.pos + 1 < len(self.text):
                        self.pos += 1
                    out.append(self.peek())
                    self.pos += 1
                if self.peek() != '"':
                    raise self.error("unterminated quoted value", at)
                self.pos += 1
                items.append(("".join(out), True))
            else:
                at = self.pos
                starts.append(at)
                while self.peek() and not self.peek().isspace() and self.peek() not in '{},"':
                    self.pos += 1
                items.append((self.text[at:self.pos], False))
            if self.peek() != ",":
                return items, starts
            self.pos += 1


def parse_pipeline(text: str) -> Pipeline:
    """Read pipeline text into a :class:`Pipeline`; raises :class:`PipelineError`."""
    from accy.passes.pipelines import PIPELINES
    from accy.passes.registry import all_passes

    passes = all_passes()
    r = _Reader(text)
    out: list[Pass] = []
    r.skip_space()
    if not r.peek():
        return Pipeline(())
    while True:
        name, at = r.word("a pass or pipeline name")
        r.skip_space()
        if name in PIPELINES:
            if r.peek() == "{":
                raise r.error(f"named pipeline {name!r} takes no options; set them on its passes")
            out.extend(parse_pipeline(PIPELINES[name].text).passes)
        elif name in passes:
            cls = passes[name]
            opts = _options(r, cls) if r.peek() == "{" else {}
            try:
                out.append(cls(**opts))
            except (TypeError, ValueError) as e:
                raise r.error(f"{name}: {e}", at) from None
        else:
            valid = ", ".join(sorted(passes)) + "; pipelines: " + ", ".join(sorted(PIPELINES))
            raise r.error(f"unknown pass or pipeline {name!r}; valid passes: {valid}", at)
        r.skip_space()
        if not r.peek():
            return Pipeline(tuple(out))
        if r.peek() != ",":
            raise r.error(f"expected ',' or end of text after {name!r}, found {r.peek()!r}")
        r.pos += 1


def _options(r: _Reader, cls: type[Pass]) -> dict[str, Any]:
    r.pos += 1  # '{'
    infos = {o.name: o for o in cls.options()}
    values: dict[str, Any] = {}
    while True:
        r.skip_space()
        if r.peek() == "}":
            r.pos += 1
            return values
        if not r.peek():
            raise r.error(f"missing '}}' closing the options of {cls.name}")
        key, at = r.word(f"an option name of {cls.name}")
        info = infos.get(key)
        if info is None:
            listing = ", ".join(f"{o.name} ({o.type_text})" for o in infos.values()) or "none"
            raise r.error(f"pass {cls.name} has no option {key!r}; options: {listing}", at)
        if info.field in values:
            raise r.error(f"option {key!r} given twice", at)
        if r.peek() != "=":
            raise r.error(f"expected '=' after option {key!r}")
        r.pos += 1
        raw, starts = r.value()
        try:
            values[info.field] = convert(info, raw)
            info.check(values[info.field])  # the range, where the value is: column and caret
        except ValueError as e:
            raise r.error(f"option {key} of {cls.name}: {e}", starts[0]) from None
        if info.names is not None:
            for (name, _), at in zip(raw, starts, strict=True):
                try:
                    check_rule_name(name, info.names)
                except KeyError as e:
                    raise r.error(f"option {key} of {cls.name}: {e.args[0]}", at) from None


def check_rule_name(name: str, kind: str) -> None:
    """Raise ``KeyError`` unless the rule registry knows ``name`` as a rule set (``kind``
    ``rule-sets``) or as a rule or rule set (``rules``); ``rewrites.check_name`` says how."""
    if not name:
        return  # an empty list, written ``""``
    import rewrites  # egglog: only for pipeline text that names rules

    rewrites.check_name(name, rule_sets_only=kind == "rule-sets")


def convert(info: OptionInfo, items: list[tuple[str, bool]]) -> Any:
    """Turn option items into the option's Python value; ValueError says what was allowed."""
    if info.is_list:
        if items == [("", False)]:
            return ()
        return tuple(_scalar(info.element_type, text) for text, _ in items)
    if len(items) > 1:
        raise ValueError(f"expected one {info.type_text} value, got a list")
    return _scalar(info.type, items[0][0])


def _scalar(t: Any, raw: str) -> Any:
    if typing.get_origin(t) is typing.Literal:
        choices = typing.get_args(t)
        for c in choices:
            if str(c) == raw:
                return c
        raise ValueError(f"unknown value {raw!r}; allowed values: {', '.join(map(str, choices))}")
    if t is bool:
        if raw in ("true", "false"):
            return raw == "true"
        raise ValueError(f"expected true or false, got {raw!r}")
    if t is int:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
    if t is float:
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
    if t is str:
        return raw
    raise ValueError(f"option type {t} is not supported")
