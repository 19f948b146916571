"""egglog's PyObject values pickled the fast way: the same bytes as cloudpickle's."""

from __future__ import annotations

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accy.egraph import pyobjects, rules
from accy.egraph.rules import _infer_text, _infer_uncached

PLAIN = st.one_of(st.text(), st.integers(), st.booleans(), st.none(), st.binary(),
                  st.floats(allow_nan=False))


def test_installed_with_the_rules():
    assert pyobjects.installed() and cloudpickle.dumps is pyobjects.dumps


@given(PLAIN)
def test_plain_values_pickle_to_cloudpickles_bytes(value):
    assert pyobjects.dumps(value) == pyobjects._cloudpickle_dumps(value)
    for protocol in (2, 4, 5):
        assert (pyobjects.dumps(value, protocol) ==
                pyobjects._cloudpickle_dumps(value, protocol))


def test_other_objects_go_to_cloudpickle():
    class Text(str):  # a subclass is not plain: cloudpickle pickles its class by value
        pass

    fn = lambda x: x + 1  # noqa: E731 - cloudpickle's case: no importable name
    assert cloudpickle.loads(pyobjects.dumps(fn))(1) == 2
    assert pyobjects.dumps(Text("a")) == pyobjects._cloudpickle_dumps(Text("a"))
    assert pyobjects.dumps(("a", 1)) == pyobjects._cloudpickle_dumps(("a", 1))


@pytest.mark.parametrize("args", [
    ("add", (), (), "f32[4,3]", "f32[3]"),
    ("concat", ("axis",), (), "f32[4,3]", "f32[4,5]", 1),
    ("einsum", ("spec",), (), "f32[4,3]", "f32[3,2]", "ij,jk->ik"),
])
def test_inferred_types_are_remembered(args):
    rules._INFERRED.clear()
    first = _infer_text(*args)
    assert first == _infer_uncached(*args) and rules._INFERRED[args] == first
    assert _infer_text(*args) == first


def test_an_inference_that_fails_is_not_remembered():
    rules._INFERRED.clear()
    with pytest.raises(Exception, match="."):
        _infer_text("add", (), (), "f32[4,3]", "f32[5]")
    assert not rules._INFERRED
