"""accy.onnx.load: small models built with onnx.helper, imported, checked against
onnxruntime (interpret, and prepared and run on the OpenCL device)."""

from __future__ import annotations

import numpy as np
import pytest

import accy

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from accy.onnx import OnnxImportError, load  # noqa: E402

RNG = np.random.default_rng(7)


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.ascontiguousarray(arr), name)


def _model(nodes, inputs, outputs, inits, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def cnn_model():
    """conv + batch norm + relu + max pool + conv (grouped, bias) + avg pool + global pool +
    flatten + gemm + softmax."""
    f = TensorProto.FLOAT
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"],
                         epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], strides=[2, 2], pads=[1, 0, 1, 1],
                         group=2),
        helper.make_node("AveragePool", ["c2"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["p2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["fl"]),
        helper.make_node("Gemm", ["fl", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    inits = [_init("w1", _f32(8, 3, 3, 3)), _init("b1", _f32(8)),
             _init("s", _f32(8)), _init("bb", _f32(8)), _init("m", _f32(8)),
             _init("v", np.abs(_f32(8)) + 0.5),
             _init("w2", _f32(6, 4, 3, 3)), _init("wf", _f32(5, 6)), _init("bf", _f32(5))]
    return _model(nodes, [helper.make_tensor_value_info("x", f, [2, 3, 12, 12])],
                  [helper.make_tensor_value_info("y", f, [2, 5])], inits)


def bert_model():
    """A BERT-like block: projections, split heads, scaled scores, softmax, output + erf gelu,
    layer-norm statistics with ReduceMean/Pow/Sqrt."""
    f = TensorProto.FLOAT
    s, d, h = 8, 16, 2
    c = helper.make_node
    nodes = [
        c("MatMul", ["x", "wqkv"], ["qkv"]),
        c("Split", ["qkv", "split"], ["q", "k", "v"], axis=2),
        c("Reshape", ["q", "heads"], ["qh"]), c("Reshape", ["k", "heads"], ["kh"]),
        c("Reshape", ["v", "heads"], ["vh"]),
        c("Transpose", ["qh"], ["qt"], perm=[0, 2, 1, 3]),
        c("Transpose", ["kh"], ["kt"], perm=[0, 2, 3, 1]),
        c("Transpose", ["vh"], ["vt"], perm=[0, 2, 1, 3]),
        c("MatMul", ["qt", "kt"], ["sc"]), c("Div", ["sc", "scale"], ["scs"]),
        c("Softmax", ["scs"], ["pr"], axis=-1), c("MatMul", ["pr", "vt"], ["ctx"]),
        c("Transpose", ["ctx"], ["ctt"], perm=[0, 2, 1, 3]),
        c("Reshape", ["ctt", "flat"], ["cf"]),
        c("Add", ["cf", "x"], ["res"]),
        c("ReduceMean", ["res"], ["mu"], axes=[-1]), c("Sub", ["res", "mu"], ["xc"]),
        c("Pow", ["xc", "two"], ["sq"]), c("ReduceMean", ["sq"], ["var"], axes=[-1]),
        c("Add", ["var", "eps"], ["ve"]), c("Sqrt", ["ve"], ["sd"]),
        c("Div", ["xc", "sd"], ["ln"]),
        c("Slice", ["ln", "st", "en", "ax"], ["sl"]),
        c("Mul", ["sl", "half"], ["hx"]), c("Div", ["sl", "rt2"], ["xs"]),
        c("Erf", ["xs"], ["er"]), c("Add", ["er", "one"], ["e1"]), c("Mul", ["hx", "e1"], ["ge"]),
        c("Gather", ["ge", "idx"], ["y"], axis=1),
    ]
    inits = [_init("wqkv", _f32(d, 3 * d) * 0.3), _init("split", np.array([d] * 3, np.int64)),
             _init("heads", np.array([1, s, h, d // h], np.int64)),
             _init("flat", np.array([1, s, d], np.int64)),
             _init("scale", np.array(np.sqrt(d // h), np.float32)),
             _init("two", np.array(2.0, np.float32)), _init("eps", np.array(1e-5, np.float32)),
             _init("st", np.array([1], np.int64)), _init("en", np.array([100], np.int64)),
             _init("ax", np.array([2], np.int64)), _init("half", np.array(0.5, np.float32)),
             _init("rt2", np.array(np.sqrt(2.0), np.float32)),
             _init("one", np.array(1.0, np.float32)),
             _init("idx", np.array([0, -1, 3], np.int64))]
    return _model(nodes, [helper.make_tensor_value_info("x", f, [1, s, d])],
                  [helper.make_tensor_value_info("y", f, [1, 3, d - 1])], inits)


def _reference(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("make, shape", [(cnn_model, (2, 3, 12, 12)), (bert_model, (1, 8, 16))])
def test_import_matches_onnxruntime_in_the_interpreter(make, shape):
    model = make()
    x = _f32(*shape)
    program = load(model)
    accy.verify(program)
    got = accy.interpret(program, [x], precision="float64")[0]
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-4, atol=1e-5)


def test_initializers_as_parameters():
    model = cnn_model()
    program = load(model, initializers="parameters")
    fn = program.functions[0]
    assert fn.param_names[0] == "x" and len(fn.params) == 10
    x = _f32(2, 3, 12, 12)
    weights = [numpy_helper.to_array(t) for t in model.graph.initializer]
    got = accy.interpret(program, [x, *weights], precision="float64")[0]
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("make, shape", [(cnn_model, (2, 3, 12, 12)), (bert_model, (1, 8, 16))])
def test_prepared_model_runs_on_the_device(device, make, shape):
    model = make()
    x = _f32(*shape)
    job = accy.prepare(load(model))
    (got,) = job.run(x, device=device)
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-3, atol=1e-4)


def test_loads_from_a_path_and_through_the_cli(tmp_path, capsys):
    from accy.cli import main

    path = tmp_path / "cnn.onnx"
    onnx.save(cnn_model(), str(path))
    assert accy.onnx.load(path).functions[0].params[0].type == accy.f32[2, 3, 12, 12]
    assert main(["prepare", str(path), "--until", "tensor"]) == 0
    assert "tensor" in capsys.readouterr().out


def test_unsupported_op_names_op_node_and_opset():
    f = TensorProto.FLOAT
    model = _model([helper.make_node("Hardmax", ["x"], ["y"], name="hm0")],
                   [helper.make_tensor_value_info("x", f, [2, 3])],
                   [helper.make_tensor_value_info("y", f, [2, 3])], [])
    with pytest.raises(OnnxImportError, match=r"Hardmax node 'hm0' \(opset 17\): unsupported"):
        load(model)


def test_symbolic_dimension_is_a_clear_error():
    f = TensorProto.FLOAT
    model = _model([helper.make_node("Relu", ["x"], ["y"])],
                   [helper.make_tensor_value_info("x", f, ["batch", 3])],
                   [helper.make_tensor_value_info("y", f, ["batch", 3])], [])
    with pytest.raises(OnnxImportError, match=r"input 'x': dimension 0 is 'batch'.*static"):
        load(model)


def test_runtime_shape_operand_is_a_clear_error():
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    model = _model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")],
                   [helper.make_tensor_value_info("x", f, [2, 3]),
                    helper.make_tensor_value_info("s", i64, [1])],
                   [helper.make_tensor_value_info("y", f, [6])], [])
    with pytest.raises(OnnxImportError, match=r"Reshape node 'r'.*the shape.*constant"):
        load(model)


@pytest.mark.parametrize("approximate", [None, "none", "tanh"])
def test_gelu_approximate_attribute_is_passed_through(approximate):
    f = TensorProto.FLOAT
    attrs = {} if approximate is None else {"approximate": approximate}
    model = _model([helper.make_node("Gelu", ["x"], ["y"], name="g0", **attrs)],
                   [helper.make_tensor_value_info("x", f, [4, 16])],
                   [helper.make_tensor_value_info("y", f, [4, 16])], [], opset=20)
    program = load(model)
    (node,) = [n for n in program.functions[0].nodes() if n.op.value.startswith("gelu")]
    assert node.op.value == ("gelu_tanh" if approximate == "tanh" else "gelu")
    x = _f32(4, 16) * 3
    got = accy.interpret(program, [x])[0]
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-5, atol=1e-6)
