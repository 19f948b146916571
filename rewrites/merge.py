"""Multi-pattern merges (rule set ``merge``; Tensat's largest wins): two contractions that
share an operand become slices of one contraction over the concat of the other operands.

``x.W1`` and ``x.W2`` (one einsum spec, ``x`` the same e-class) -> ``M = x.concat(W1, W2)``,
``x.W1 = M[..., :n1]`` and ``x.W2 = M[..., n1:]`` (``merge-shared-first``); ``x1.W`` and
``x2.W`` -> slices of ``concat(x1, x2).W`` (``merge-shared-second``: matmuls sharing a
weight). The concat axis is a free index of the concatenated operand (once in its term and
the output, absent from the shared operand's: ``k`` of ``ij,jk->ik``, of ``bij,bjk->bik``,
of ``bij,jk->bik``); the two operands' shapes must agree on every other axis (the index is
:func:`rewrites.concat.concat_letter`'s). Repeated, merges build wider ones: ``x.[W1 W2]``
and ``x.W3`` give ``x.[[W1 W2] W3]``, and the ``concat`` rules flatten the concat and compose
the slices (``slice-slice``), so Q, K and V become three slices of one ``x.[Wq Wk Wv]``.

The rules match two terms at once, so each pair matches in both orders (egglog cannot order
e-classes: ``x.[W1 W2]`` and ``x.[W2 W1]`` both appear) and every merged contraction can
merge again: the e-graph grows quickly. ``saturate{multi-pattern-iterations=N}`` runs them
only in the first N iterations (Tensat: 1-2). A merge pays off only where extraction counts
the shared contraction once (DAG cost); a tree-cost extractor prices it once per slice.

Exact: every output element adds the same products in the merged contraction (accy's IR
leaves the order of an einsum's additions unspecified), for every dtype.
"""

from __future__ import annotations

from egglog import String, eq, ne, union, var

from accy.egraph.rules import infer_type, py_text
from accy.egraph.sorts import Tensor, TensorList, parse_type, tensors, types
from rewrites import Theme, has_type, holds, py_int
from rewrites._numeric import ints_text
from rewrites.concat import concat_axes, operand_axis, ordered, pair, two_open

merge = Theme("merge", "multi-pattern: contractions (and convolutions) sharing an operand -> "
                       "slices of one over a concat")

x, w1, w2, m1, m2 = tensors("x w1 w2 m1 m2")
l1, l2 = var("l1", TensorList), var("l2", TensorList)
s, t1, t2, tx, tw1, tw2 = types("s t1 t2 tx tw1 tw2")


def _mergeable(spec: str, side: int, type1: str, type2: str) -> bool:
    return concat_axes(spec, side, type1, type2) is not None


def _bounds(which: str, spec: str, side: int, type1: str, type2: str, out1: str,
            out2: str) -> str:
    """Starts or stops of the slice giving the first or second result from the merged one:
    ``which`` is ``starts1``, ``stops1``, ``starts2`` or ``stops2``."""
    _, axis = concat_axes(spec, side, type1, type2) or (0, 0)
    first, second = parse_type(out1).shape, parse_type(out2).shape
    if which == "starts1":
        return ints_text([0] * len(first))
    if which == "stops1":
        return ints_text(first)
    if which == "starts2":
        return ints_text([first[i] if i == axis else 0 for i in range(len(first))])
    return ints_text([first[i] + second[i] if i == axis else second[i]
                      for i in range(len(first))])


def _ones(type_text: str) -> str:
    return ints_text([1] * parse_type(type_text).rank)


for _side, _where in ((1, "first"), (0, "second")):
    def _two(shared: Tensor, part: Tensor, side: int = _side):  # noqa: ANN202
        return pair(*ordered(shared, part, side))

    _wax = py_int(operand_axis, s, _side, tw1, tw2)
    _tcat = infer_type("concat", tw1, tw2, axis=_wax)
    _merged = Tensor.einsum(_two(x, Tensor.concat(pair(w1, w2), _wax, _tcat)), s,
                            infer_type("einsum", *ordered(tx, _tcat, _side), spec=s))
    _args = (s, _side, tw1, tw2, t1, t2)
    # lists end in a variable, not nil (see concat.two_open): the two-term spec makes it nil
    _first = Tensor.einsum(two_open(x, w1, l1, _side), s, t1)
    merge.rule(
        f"merge-shared-{_where}",
        eq(m1).to(_first), eq(m2).to(Tensor.einsum(two_open(x, w2, l2, _side), s, t2)),
        ne(w1).to(w2),
        has_type(x, tx), has_type(w1, tw1), has_type(w2, tw2),
        holds(_mergeable, s, _side, tw1, tw2),
        policy="exact", patterns=(_first,), multi=True,
        doc=f"two einsums sharing their {_where} operand -> slices of one einsum over a "
            "concat of the other operands (multi-pattern)",
    ).then(
        union(m1).with_(Tensor.slice(_merged, py_text(_bounds, "starts1", *_args),
                                     py_text(_bounds, "stops1", *_args), py_text(_ones, t1),
                                     t1)),
        union(m2).with_(Tensor.slice(_merged, py_text(_bounds, "starts2", *_args),
                                     py_text(_bounds, "stops2", *_args), py_text(_ones, t2),
                                     t2)),
    )


# ---- convolutions of one input (Tensat/TASO's conv merging) ----------------------------------
# conv(x, W1) and conv(x, W2) with one window (strides, pads, dilations; one group) and
# kernels of one size -> slices of conv(x, concat(W1, W2)) along the output channels: each
# output channel is the same sum of products either way (exact).

st, pd, dl = var("st", String), var("pd", String), var("dl", String)


def _same_kernel(type1: str, type2: str) -> bool:
    a, b = parse_type(type1), parse_type(type2)
    return a.rank == b.rank == 4 and a.shape[1:] == b.shape[1:] and a.dtype is b.dtype


def _channel_bounds(which: str, out1: str, out2: str) -> str:
    """Starts or stops of the slice of the merged convolution's output that gives the first
    (``starts1``/``stops1``) or the second (``starts2``/``stops2``) result."""
    n, o1, h, w = parse_type(out1).shape
    o2 = parse_type(out2).shape[1]
    return ints_text({"starts1": (0, 0, 0, 0), "stops1": (n, o1, h, w),
                      "starts2": (0, o1, 0, 0), "stops2": (n, o1 + o2, h, w)}[which])


_tcw = infer_type("concat", tw1, tw2, axis=0)
_merged_conv = Tensor.conv2d(x, Tensor.concat(pair(w1, w2), 0, _tcw), st, pd, dl, 1,
                             infer_type("conv2d", tx, _tcw, strides=st, pads=pd, dilations=dl,
                                        groups=1))
_conv1 = Tensor.conv2d(x, w1, st, pd, dl, 1, t1)
merge.rule(
    "merge-conv-shared-input",
    eq(m1).to(_conv1), eq(m2).to(Tensor.conv2d(x, w2, st, pd, dl, 1, t2)),
    ne(w1).to(w2),
    has_type(x, tx), has_type(w1, tw1), has_type(w2, tw2),
    holds(_same_kernel, tw1, tw2),
    policy="exact", patterns=(_conv1,), multi=True,
    doc="two convolutions of one input with one window and kernel size -> slices of one "
        "convolution over the concatenated weights (multi-pattern)",
).then(
    union(m1).with_(Tensor.slice(_merged_conv, py_text(_channel_bounds, "starts1", t1, t2),
                                 py_text(_channel_bounds, "stops1", t1, t2),
                                 py_text(_ones, t1), t1)),
    union(m2).with_(Tensor.slice(_merged_conv, py_text(_channel_bounds, "starts2", t1, t2),
                                 py_text(_channel_bounds, "stops2", t1, t2),
                                 py_text(_ones, t2), t2)),
)
