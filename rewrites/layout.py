"""Movement through elementwise ops (rule set ``layout``): transposes and reshapes move in
both directions, broadcasts move after the op.

Moving a transpose through ``f`` lets it meet another transpose (``transpose-transpose``
cancels them) or an einsum (``einsum-absorb-transpose`` makes it free); moving a broadcast
after ``f`` computes ``f`` on the small tensor. All exact: elementwise ops act on each element
alone, wherever it sits. Binary ops move only when both operands have the result's type (no
implicit broadcasting to undo).
"""

from __future__ import annotations

from egglog import eq

from accy.egraph.rules import infer_type
from accy.egraph.sorts import Tensor, tensors, types
from rewrites import Theme, has_type, same_types

layout = Theme("layout", "transpose/reshape/broadcast motion through elementwise ops")

x, a, b = tensors("x a b")
t, t1, t2, tx, ta, tb, p, s, d = types("t t1 t2 tx ta tb p s d")

UNARY = ("neg", "abs", "exp", "log", "sqrt", "relu", "gelu", "gelu_tanh", "sigmoid", "tanh")
BINARY = ("add", "sub", "mul", "div", "max", "min")

for _op in UNARY:
    _f = getattr(Tensor, _op)
    layout.birewrite(f"transpose-through-{_op.replace('_', '-')}",
                     Tensor.transpose(_f(x, t1), p, t), _f(Tensor.transpose(x, p, t), t),
                     has_type(x, t1), policy="exact",
                     doc=f"transpose({_op}(x)) <-> {_op}(transpose(x))")
    layout.birewrite(f"reshape-through-{_op.replace('_', '-')}",
                     Tensor.reshape(_f(x, t1), s, t), _f(Tensor.reshape(x, s, t), t),
                     has_type(x, t1), policy="exact",
                     doc=f"reshape({_op}(x)) <-> {_op}(reshape(x))")
    layout.rewrite(f"broadcast-through-{_op.replace('_', '-')}",
                   _f(Tensor.broadcast(x, s, t1), t), Tensor.broadcast(_f(x, tx), s, t),
                   has_type(x, tx), policy="exact",
                   doc=f"{_op}(broadcast(x)) -> broadcast({_op}(x)): {_op} on fewer elements")

# cast changes the dtype, so the moved node's type comes from shapes.infer
_cast_of_x = infer_type("cast", tx, dtype=d)
layout.birewrite("transpose-through-cast",
                 Tensor.transpose(Tensor.cast(x, d, t1), p, t),
                 Tensor.cast(Tensor.transpose(x, p, t2), d, t),
                 has_type(x, tx), eq(t1).to(_cast_of_x),
                 eq(t2).to(infer_type("transpose", tx, perm=p)), policy="exact",
                 doc="transpose(cast(x)) <-> cast(transpose(x))")
layout.birewrite("reshape-through-cast",
                 Tensor.reshape(Tensor.cast(x, d, t1), s, t),
                 Tensor.cast(Tensor.reshape(x, s, t2), d, t),
                 has_type(x, tx), eq(t1).to(_cast_of_x),
                 eq(t2).to(infer_type("reshape", tx, shape=s)), policy="exact",
                 doc="reshape(cast(x)) <-> cast(reshape(x))")
layout.rewrite("broadcast-through-cast",
               Tensor.cast(Tensor.broadcast(x, s, t1), d, t),
               Tensor.broadcast(Tensor.cast(x, d, _cast_of_x), s, t),
               has_type(x, tx), policy="exact",
               doc="cast(broadcast(x)) -> broadcast(cast(x)): cast fewer elements")

for _op in BINARY:
    _g = getattr(Tensor, _op)
    layout.birewrite(f"transpose-through-{_op}",
                     Tensor.transpose(_g(a, b, t1), p, t),
                     _g(Tensor.transpose(a, p, t), Tensor.transpose(b, p, t), t),
                     has_type(a, t1), has_type(b, tb), same_types(t1, tb), policy="exact",
                     doc=f"transpose({_op}(a, b)) <-> {_op}(transpose(a), transpose(b))")
    layout.birewrite(f"reshape-through-{_op}",
                     Tensor.reshape(_g(a, b, t1), s, t),
                     _g(Tensor.reshape(a, s, t), Tensor.reshape(b, s, t), t),
                     has_type(a, t1), has_type(b, tb), same_types(t1, tb), policy="exact",
                     doc=f"reshape({_op}(a, b)) <-> {_op}(reshape(a), reshape(b))")
    layout.rewrite(f"broadcast-through-{_op}",
                   _g(Tensor.broadcast(a, s, t), Tensor.broadcast(b, s, t), t),
                   Tensor.broadcast(_g(a, b, ta), s, t),
                   has_type(a, ta), has_type(b, tb), same_types(ta, tb), policy="exact",
                   doc=f"{_op}(broadcast(a), broadcast(b)) -> broadcast({_op}(a, b))")

del _op
