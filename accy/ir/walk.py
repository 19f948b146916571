"""Post-order evaluation without recursion.

Programs are DAGs as deep as they are long: a traced chain of 20,000 elementwise ops is a path
of 20,000 nodes, and any walk that recurses per operand overflows Python's stack long before
that. Code that evaluates something "operands first, then the node" (kernel generators
computing a value at coordinates, printers, interpreters) writes one ``open`` step instead:
``open(*key)`` returns the finished result when it needs no operands (a memo hit, a leaf), or
a :class:`Pending` naming the operand keys to evaluate first, the step that opens them, and
how to finish from their results. :func:`evaluate` runs the steps from an explicit stack, in
exactly the order a recursive post-order walk would (operands left to right, each completely
before the next), so generated text and variable numbering do not change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Pending:
    """A result waiting for its operands: ``finish(results of operands)`` makes it.

    ``operands`` are argument tuples for ``open``, which returns a result or a Pending.
    """

    operands: Sequence[tuple[Any, ...]]
    open: Callable[..., Any]
    finish: Callable[[list[Any]], Any]
    args: list[Any] = field(default_factory=list)


def evaluate(first: Any) -> Any:
    """The result of ``first``: a result, or a :class:`Pending` to finish."""
    if not isinstance(first, Pending):
        return first
    stack = [first]
    while True:
        top = stack[-1]
        if len(top.args) < len(top.operands):
            sub = top.open(*top.operands[len(top.args)])
            if isinstance(sub, Pending):
                stack.append(sub)
                continue
            done = sub
        else:
            stack.pop()
            done = top.finish(top.args)
            if not stack:
                return done
        stack[-1].args.append(done)
