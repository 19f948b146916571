"""``verify(program, stage)``: every type re-inferred, and only the ops a stage allows.

Ops leave the allowed set of a stage when the pass that lowers them lands (conv lowering in
the tensor stage: the window ops); ``FORBIDDEN_AFTER`` lists those lowerings.
"""

from __future__ import annotations

from accy.errors import ShapeError, VerifyError
from accy.ir.node import Node
from accy.ir.ops import Op
from accy.ir.program import Program, Stage
from accy.ir.shapes import infer

# op -> the first stage at which it may no longer appear (filled as lowering passes land)
FORBIDDEN_AFTER: dict[Op, Stage] = {
    # conv-lowering (tensor stage) rewrites pads; conv2d and the pools too, but under
    # method=direct it keeps them for the direct-conv kernel generator (and the loop nest)
    Op.PAD: Stage.dispatch,
}


def verify_node(node: Node) -> None:
    if node._verified:  # nodes are immutable: a node that passed once passes again
        return
    _verify_node(node)
    object.__setattr__(node, "_verified", True)


def _verify_node(node: Node) -> None:
    if node.op is Op.PARAM or node.op is Op.CONSTANT:
        if node.srcs:
            raise VerifyError(f"{node.op.value} node has operands")
        if node.op is Op.CONSTANT and len(node.attr("value")) != node.type.nbytes:
            raise VerifyError(f"constant of type {node.type} holds {len(node.attr('value'))} "
                              f"bytes, not {node.type.nbytes}")
        return
    try:
        t, attrs = infer(node.op, tuple(s.type for s in node.srcs), dict(node.attrs))
    except ShapeError as e:
        raise VerifyError(str(e)) from None
    if t != node.type:
        raise VerifyError(f"{node.op.value} node has type {node.type} but its operands give {t}")
    if tuple(sorted(attrs.items())) != node.attrs:
        raise VerifyError(f"{node.op.value} node has unnormalized attributes {dict(node.attrs)}")


def verify(program: Program, stage: Stage = Stage.semantic) -> None:
    """Raise :class:`VerifyError` naming the function and op if ``program`` is malformed.

    A program (immutable) that passed at a stage is not walked again for that stage."""
    key = (stage, tuple(FORBIDDEN_AFTER.items()))
    done = program.__dict__.setdefault("_verified_at", set())
    if key in done:
        return
    for fn in program.functions:
        for node in fn.nodes():
            banned = FORBIDDEN_AFTER.get(node.op)
            if banned is not None and stage.index >= banned.index:
                raise VerifyError(f"function {fn.name}: op {node.op.value} may not appear at "
                                  f"stage {stage.value} (it is lowered before {banned.value})")
            try:
                verify_node(node)
            except VerifyError as e:
                raise VerifyError(f"function {fn.name}: {e}") from None
    done.add(key)
