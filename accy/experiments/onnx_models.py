"""The anchors' seven benchmark models as ONNX graphs, built with ``onnx.helper``.

TASO and Tensat compare graph optimizers on BERT, NasRNN, NasNet-A, ResNeXt-50, SqueezeNet,
VGG-19 and Inception-v3. :func:`build` makes each as an ``onnx.ModelProto`` (opset 17) with
random weights from a fixed seed (He-scaled, so activations stay finite and of order one),
at the published shapes unless told otherwise:

=================  ===========================================================================
``bert``           one BERT encoder layer at TASO's shapes: sequence 64, hidden 1024, 16 heads
                   (TASO's ``bert.py``, which Tensat took; BERT-large's width). Unlike TASO's
                   script (attention only, no softmax) the layer is complete: Q/K/V
                   projections with biases, scaled softmax attention, output projection,
                   residual and layer norm (ReduceMean/Pow/Sqrt), a 4096-wide feed-forward
                   block with erf GELU, residual and layer norm. Input [batch, 64, 1024].
``nasrnn``         TASO's NasRNN: hidden 512, 5 unrolled cells, each 8 gates of two matmuls
                   (input and state) and TASO's tree of relu/sigmoid/tanh adds and muls; new
                   weights per cell and an initial state as a weight, as in TASO's
                   ``nasrnn.py``. Inputs ``x0``..``x4`` [batch, 512].
``nasneta``        TASO's NasNet-A: input [batch, 128, 56, 56], 3 stages of 5 normal cells
                   and a reduction cell, 128/256/512 channels, separable convolutions as a
                   grouped convolution and a 1x1 one ("SAME" padding as explicit pads).
``resnext50``      ResNeXt-50 32x4d (torchvision's layout): 7x7 stem, 3/4/6/3 bottleneck
                   blocks of widths 128..1024 with 32 groups, batch norm after every
                   convolution, global average pool and a 1000-way classifier; 224x224.
``squeezenet``     SqueezeNet 1.1 (torchvision's): fire modules, ceil-mode max pools written
                   as end padding, a 1x1 convolution classifier and a global average pool;
                   224x224.
``vgg19``          VGG-19 (configuration E, no batch norm): 16 3x3 convolutions, 5 max pools,
                   three fully connected layers (4096, 4096, 1000); 224x224.
``inception_v3``   Inception-v3 (torchvision's and TASO's ``inceptionv3.py`` layout): the
                   stem, 3 A, 1 B, 4 C, 1 D and 2 E modules, batch norm (eps 1e-3) after
                   every convolution, global average pool and a 1000-way classifier; 299x299.
=================  ===========================================================================

Batch: TASO's scripts (the graphs Tensat imports) build every model at batch 1
(:data:`PAPER_BATCH`), except Inception-v3, whose script runs batch 32. Knobs for smaller
variants: ``image`` (the spatial side of the convolutional models), ``slim`` (divides every
channel count, hidden size, group count and classifier width, at least 1 each), ``depth``
(caps every run of repeated blocks) and, for BERT, ``seq``. Tests use small variants;
``accy experiment models`` the real sizes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MODELS", "PAPER_BATCH", "ModelSpec", "build", "inputs"]

OPSET = 17


def _onnx() -> Any:
    from accy.onnx import _onnx as load_onnx

    return load_onnx()


class _Graph:
    """Nodes, initializers and the static shape of every value while a model is built."""

    def __init__(self, seed: int, slim: int, depth: int | None) -> None:
        self.onnx = _onnx()
        self.rng = np.random.default_rng(seed)
        self.slim = slim
        self.depth = depth
        self.nodes: list[Any] = []
        self.inits: list[Any] = []
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.inputs: list[Any] = []
        self.count = 0

    def ch(self, c: int) -> int:
        """A channel count (or width) divided by ``slim``."""
        return max(c // self.slim, 1)

    def reps(self, n: int) -> int:
        """A run of ``n`` repeated blocks, capped at ``depth``."""
        return n if self.depth is None else min(n, self.depth)

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self.inputs.append(self.onnx.helper.make_tensor_value_info(
            name, self.onnx.TensorProto.FLOAT, list(shape)))
        self.shapes[name] = shape
        return name

    def const(self, base: str, arr: np.ndarray) -> str:
        name = self.name(base)
        arr = np.ascontiguousarray(arr)
        self.inits.append(self.onnx.numpy_helper.from_array(arr, name))
        self.shapes[name] = arr.shape
        return name

    def weight(self, base: str, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> str:
        std = math.sqrt(gain / max(fan_in, 1))
        return self.const(base, (self.rng.standard_normal(shape, dtype=np.float32)
                                 * np.float32(std)))

    def node(self, op: str, ins: list[str], shape: tuple[int, ...], **attrs: Any) -> str:
        out = self.name(op.lower())
        self.nodes.append(self.onnx.helper.make_node(op, ins, [out], name=out, **attrs))
        self.shapes[out] = shape
        return out

    # ---- layers -----------------------------------------------------------------------------

    def conv(self, x: str, cout: int, kernel: int | tuple[int, int], stride: int = 1,
             pad: int | tuple[int, int] | str = 0, groups: int = 1, bn: bool = False,
             relu: bool = True, bias: bool = False, eps: float = 1e-5) -> str:
        n, cin, h, w = self.shapes[x]
        kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
        pads = _pads(h, w, kh, kw, stride, pad)
        oh = (h + pads[0] + pads[2] - kh) // stride + 1
        ow = (w + pads[1] + pads[3] - kw) // stride + 1
        fan_in = cin // groups * kh * kw
        ins = [x, self.weight("w", (cout, cin // groups, kh, kw), fan_in,
                              2.0 if relu else 1.0)]
        if bias:
            ins.append(self.const("b", self.rng.uniform(-0.1, 0.1, cout).astype(np.float32)))
        y = self.node("Conv", ins, (n, cout, oh, ow), kernel_shape=[kh, kw],
                      strides=[stride, stride], pads=pads, group=groups)
        if bn:
            y = self.batch_norm(y, eps)
        return self.node("Relu", [y], self.shapes[y]) if relu else y

    def batch_norm(self, x: str, eps: float) -> str:
        c = self.shapes[x][1]
        r = self.rng
        stats = [r.uniform(0.8, 1.2, c), r.uniform(-0.1, 0.1, c), r.uniform(-0.1, 0.1, c),
                 r.uniform(0.8, 1.2, c)]  # scale, bias, mean, var
        names = [self.const(k, s.astype(np.float32))
                 for k, s in zip(("gamma", "beta", "mean", "var"), stats, strict=True)]
        return self.node("BatchNormalization", [x, *names], self.shapes[x], epsilon=eps)

    def pool(self, op: str, x: str, kernel: int, stride: int, pad: int | str = 0,
             ceil: bool = False, include_pad: bool = False) -> str:
        n, c, h, w = self.shapes[x]
        pads = _pads(h, w, kernel, kernel, stride, pad)
        if ceil:  # ceil mode as end padding (a max pool pads with -inf)
            for i, size in enumerate((h, w)):
                span = size + pads[i] + pads[i + 2] - kernel
                if span % stride:
                    pads[i + 2] += stride - span % stride
        oh = (h + pads[0] + pads[2] - kernel) // stride + 1
        ow = (w + pads[1] + pads[3] - kernel) // stride + 1
        extra = {"count_include_pad": int(include_pad)} if op == "AveragePool" else {}
        return self.node(op, [x], (n, c, oh, ow), kernel_shape=[kernel, kernel],
                         strides=[stride, stride], pads=pads, **extra)

    def add(self, x: str, y: str) -> str:
        return self.node("Add", [x, y], self.shapes[x])

    def concat(self, xs: list[str], axis: int = 1) -> str:
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        return self.node("Concat", xs, tuple(shape), axis=axis)

    def classifier(self, x: str, classes: int) -> str:
        """Global average pool, flatten and a fully connected layer."""
        n, c = self.shapes[x][:2]
        g = self.node("GlobalAveragePool", [x], (n, c, 1, 1))
        return self.dense(self.node("Flatten", [g], (n, c)), self.ch(classes), relu=False)

    def dense(self, x: str, units: int, relu: bool = True) -> str:
        n, k = self.shapes[x]
        w = self.weight("fc", (units, k), k, 2.0 if relu else 1.0)
        b = self.const("fcb", self.rng.uniform(-0.1, 0.1, units).astype(np.float32))
        y = self.node("Gemm", [x, w, b], (n, units), transB=1)
        return self.node("Relu", [y], (n, units)) if relu else y

    def model(self, outputs: list[str], graph_name: str) -> Any:
        h = self.onnx.helper
        outs = [h.make_tensor_value_info(o, self.onnx.TensorProto.FLOAT, list(self.shapes[o]))
                for o in outputs]
        graph = h.make_graph(self.nodes, graph_name, self.inputs, outs, self.inits)
        model = h.make_model(graph, opset_imports=[h.make_opsetid("", OPSET)],
                             producer_name="accy.experiments.onnx_models")
        model.ir_version = 8
        return model


def _pads(h: int, w: int, kh: int, kw: int, stride: int, pad: int | tuple[int, int] | str
          ) -> list[int]:
    """ONNX pads [top, left, bottom, right]: a number or (rows, columns) on both sides, or
    "same" (TensorFlow's SAME: output ceil(size / stride), the odd pixel at the end)."""
    if pad == "same":
        out = []
        for size, k in ((h, kh), (w, kw)):
            total = max((-(-size // stride) - 1) * stride + k - size, 0)
            out.append((total // 2, total - total // 2))
        return [out[0][0], out[1][0], out[0][1], out[1][1]]
    ph, pw = (pad, pad) if isinstance(pad, int) else pad
    return [ph, pw, ph, pw]


# ---- the seven --------------------------------------------------------------------------------


def _bert(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    s, d, heads = seq or 64, g.ch(1024), max(16 // g.slim, 1)
    dk = d // heads
    ff = 4 * d
    x = g.input("x", (batch, s, d))

    def linear(v: str, k: int, n: int, gain: float = 1.0) -> str:
        w = g.weight("w", (k, n), k, gain)
        b = g.const("b", g.rng.uniform(-0.1, 0.1, n).astype(np.float32))
        y = g.node("MatMul", [v, w], g.shapes[v][:-1] + (n,))
        return g.node("Add", [y, b], g.shapes[y])

    def layer_norm(v: str) -> str:
        shape, stat = g.shapes[v], g.shapes[v][:-1] + (1,)
        mean = g.node("ReduceMean", [v], stat, axes=[-1], keepdims=1)
        centred = g.node("Sub", [v, mean], shape)
        two = g.const("two", np.float32(2.0))
        var = g.node("ReduceMean", [g.node("Pow", [centred, two], shape)], stat, axes=[-1],
                     keepdims=1)
        eps = g.const("eps", np.float32(1e-12))
        std = g.node("Sqrt", [g.node("Add", [var, eps], stat)], stat)
        normed = g.node("Div", [centred, std], shape)
        gamma = g.const("gamma", g.rng.uniform(0.8, 1.2, shape[-1]).astype(np.float32))
        beta = g.const("beta", g.rng.uniform(-0.1, 0.1, shape[-1]).astype(np.float32))
        return g.node("Add", [g.node("Mul", [normed, gamma], shape), beta], shape)

    split_shape = g.const("heads", np.array([batch, s, heads, dk], np.int64))
    q, k, v = (g.node("Reshape", [linear(x, d, d), split_shape], (batch, s, heads, dk))
               for _ in range(3))
    qt = g.node("Transpose", [q], (batch, heads, s, dk), perm=[0, 2, 1, 3])
    kt = g.node("Transpose", [k], (batch, heads, dk, s), perm=[0, 2, 3, 1])
    vt = g.node("Transpose", [v], (batch, heads, s, dk), perm=[0, 2, 1, 3])
    scores = g.node("MatMul", [qt, kt], (batch, heads, s, s))
    scaled = g.node("Div", [scores, g.const("scale", np.float32(math.sqrt(dk)))],
                    (batch, heads, s, s))
    probs = g.node("Softmax", [scaled], (batch, heads, s, s), axis=-1)
    ctx = g.node("MatMul", [probs, vt], (batch, heads, s, dk))
    ctx = g.node("Transpose", [ctx], (batch, s, heads, dk), perm=[0, 2, 1, 3])
    ctx = g.node("Reshape", [ctx, g.const("merge", np.array([batch, s, d], np.int64))],
                 (batch, s, d))
    h1 = layer_norm(g.add(linear(ctx, d, d), x))
    up = linear(h1, d, ff, 2.0)
    half = g.node("Mul", [up, g.const("half", np.float32(0.5))], g.shapes[up])
    erf = g.node("Erf", [g.node("Div", [up, g.const("sqrt2", np.float32(math.sqrt(2)))],
                                g.shapes[up])], g.shapes[up])
    gelu = g.node("Mul", [half, g.node("Add", [erf, g.const("one", np.float32(1.0))],
                                       g.shapes[up])], g.shapes[up])
    return [layer_norm(g.add(linear(gelu, ff, d), h1))]


def _nasrnn(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    hidden, steps = g.ch(512), g.reps(5)
    xs = [g.input(f"x{i}", (batch, hidden)) for i in range(steps)]
    state = g.const("state", g.rng.uniform(-1, 1, (batch, hidden)).astype(np.float32))
    shape = (batch, hidden)

    def f(op: str, *ins: str) -> str:
        return g.node(op, list(ins), shape)

    for x in xs:
        t = []
        for _ in range(8):  # combine: x @ w1 + h @ w2
            a = g.node("MatMul", [x, g.weight("wx", (hidden, hidden), hidden, 1.0)], shape)
            b = g.node("MatMul", [state, g.weight("wh", (hidden, hidden), hidden, 1.0)], shape)
            t.append(f("Add", a, b))
        m0 = f("Add", f("Relu", t[0]), f("Sigmoid", t[3]))
        m1 = f("Add", f("Sigmoid", t[1]), f("Tanh", t[2]))
        m2 = f("Mul", f("Sigmoid", t[4]), f("Tanh", t[5]))
        m3 = f("Mul", f("Sigmoid", t[6]), f("Relu", t[7]))
        m4 = f("Add", f("Sigmoid", m1), f("Tanh", m2))
        m5 = f("Mul", f("Tanh", m0), f("Tanh", m3))
        state = f("Tanh", f("Mul", f("Tanh", m4), f("Tanh", m5)))
    return [state]


def _nasneta(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    side = image or 56
    x = g.input("x", (batch, g.ch(128), side, side))
    x = g.pool("MaxPool", x, 1, 1)  # TASO's script starts with a 1x1 max pool

    def squeeze(v: str, c: int) -> str:
        return g.conv(v, c, 1, pad="same")

    def fit(cur: str, v: str) -> str:
        if g.shapes[v][2] == g.shapes[cur][2]:
            return squeeze(v, g.shapes[cur][1])
        return g.conv(v, g.shapes[cur][1], 3, stride=2, pad="same")

    def sep(v: str, c: int, k: int, stride: int = 1) -> str:
        t = g.conv(v, c, k, stride=stride, pad="same", groups=c, relu=False)
        return g.conv(t, c, 1, pad="same", relu=False)

    def avg(v: str, stride: int = 1) -> str:
        return g.pool("AveragePool", v, 3, stride, pad="same")

    def normal(prev: str, cur: str, c: int) -> str:
        cur = squeeze(cur, c)
        prev = fit(cur, prev)
        ts = [sep(cur, c, 3), cur, sep(prev, c, 3), sep(cur, c, 3), avg(cur), prev,
              avg(prev), avg(prev), sep(prev, c, 3), sep(prev, c, 3)]
        return g.concat([g.add(ts[2 * i], ts[2 * i + 1]) for i in range(5)])

    def reduction(prev: str, cur: str, c: int) -> str:
        cur = squeeze(cur, c)
        prev = fit(cur, prev)
        o0 = g.add(sep(prev, c, 7, 2), sep(cur, c, 5, 2))
        o1 = g.add(g.pool("MaxPool", cur, 3, 2, pad="same"), sep(prev, c, 7, 2))
        o2 = g.add(avg(cur, 2), sep(prev, c, 5, 2))
        o3 = g.add(g.pool("MaxPool", cur, 3, 2, pad="same"), sep(o0, c, 3))
        o4 = g.add(avg(o0), o1)
        return g.concat([o0, o1, o2, o3, o4])

    c = g.ch(128)
    for _ in range(g.reps(3)):
        prev = cur = x
        for _ in range(g.reps(5)):
            prev, cur = cur, normal(prev, cur, c)
        c *= 2
        x = reduction(prev, cur, c)
    return [x]


def _resnext50(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    side = image or 224
    groups = max(32 // g.slim, 1)
    x = g.input("x", (batch, 3, side, side))
    t = g.conv(x, g.ch(64), 7, stride=2, pad=3, bn=True)
    t = g.pool("MaxPool", t, 3, 2, pad=1)
    for width, blocks, stride in ((128, 3, 1), (256, 4, 2), (512, 6, 2), (1024, 3, 2)):
        w, out = g.ch(width), g.ch(2 * width)
        for i in range(g.reps(blocks)):
            s = stride if i == 0 else 1
            y = g.conv(t, w, 1, bn=True)
            y = g.conv(y, w, 3, stride=s, pad=1, groups=groups, bn=True)
            y = g.conv(y, out, 1, bn=True, relu=False)
            short = t if s == 1 and g.shapes[t][1] == out else g.conv(
                t, out, 1, stride=s, bn=True, relu=False)
            t = g.node("Relu", [g.add(y, short)], g.shapes[y])
    return [g.classifier(t, 1000)]


def _squeezenet(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    side = image or 224
    x = g.input("x", (batch, 3, side, side))

    def fire(v: str, s: int, e1: int, e3: int) -> str:
        sq = g.conv(v, g.ch(s), 1, bias=True)
        return g.concat([g.conv(sq, g.ch(e1), 1, bias=True),
                         g.conv(sq, g.ch(e3), 3, pad=1, bias=True)])

    t = g.conv(x, g.ch(64), 3, stride=2, bias=True)
    t = g.pool("MaxPool", t, 3, 2, ceil=True)
    t = fire(fire(t, 16, 64, 64), 16, 64, 64)
    t = g.pool("MaxPool", t, 3, 2, ceil=True)
    t = fire(fire(t, 32, 128, 128), 32, 128, 128)
    t = g.pool("MaxPool", t, 3, 2, ceil=True)
    for s, e in ((48, 192), (48, 192), (64, 256), (64, 256))[:g.reps(4)]:
        t = fire(t, s, e, e)
    t = g.conv(t, g.ch(1000), 1, bias=True)
    n, c = g.shapes[t][:2]
    pooled = g.node("GlobalAveragePool", [t], (n, c, 1, 1))
    return [g.node("Flatten", [pooled], (n, c))]


def _vgg19(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    side = image or 224
    t = g.input("x", (batch, 3, side, side))
    for c, n in ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4)):
        for _ in range(g.reps(n)):
            t = g.conv(t, g.ch(c), 3, pad=1, bias=True)
        t = g.pool("MaxPool", t, 2, 2)
    n, c, h, w = g.shapes[t]
    t = g.node("Flatten", [t], (n, c * h * w))
    t = g.dense(g.dense(t, g.ch(4096)), g.ch(4096))
    return [g.dense(t, g.ch(1000), relu=False)]


def _inception_v3(g: _Graph, batch: int, image: int | None, seq: int | None) -> list[str]:
    side = image or 299
    ch = g.ch

    def conv(v: str, c: int, k: int | tuple[int, int], stride: int = 1,
             pad: int | tuple[int, int] = 0) -> str:
        return g.conv(v, ch(c), k, stride=stride, pad=pad, bn=True, eps=1e-3)

    def avg(v: str) -> str:
        return g.pool("AveragePool", v, 3, 1, pad=1, include_pad=True)

    def block_a(v: str, pool: int) -> str:
        b5 = conv(conv(v, 48, 1), 64, 5, pad=2)
        b3 = conv(conv(conv(v, 64, 1), 96, 3, pad=1), 96, 3, pad=1)
        return g.concat([conv(v, 64, 1), b5, b3, conv(avg(v), pool, 1)])

    def block_b(v: str) -> str:
        b3 = conv(conv(conv(v, 64, 1), 96, 3, pad=1), 96, 3, stride=2)
        return g.concat([conv(v, 384, 3, stride=2), b3, g.pool("MaxPool", v, 3, 2)])

    def block_c(v: str, c7: int) -> str:
        b7 = conv(conv(conv(v, c7, 1), c7, (1, 7), pad=(0, 3)), 192, (7, 1), pad=(3, 0))
        d = conv(v, c7, 1)
        for c, k, p in ((c7, (7, 1), (3, 0)), (c7, (1, 7), (0, 3)), (c7, (7, 1), (3, 0)),
                        (192, (1, 7), (0, 3))):
            d = conv(d, c, k, pad=p)
        return g.concat([conv(v, 192, 1), b7, d, conv(avg(v), 192, 1)])

    def block_d(v: str) -> str:
        b3 = conv(conv(v, 192, 1), 320, 3, stride=2)
        b7 = conv(conv(conv(v, 192, 1), 192, (1, 7), pad=(0, 3)), 192, (7, 1), pad=(3, 0))
        return g.concat([b3, conv(b7, 192, 3, stride=2), g.pool("MaxPool", v, 3, 2)])

    def block_e(v: str) -> str:
        b3 = conv(v, 384, 1)
        d = conv(conv(v, 448, 1), 384, 3, pad=1)
        return g.concat([conv(v, 320, 1), conv(b3, 384, (1, 3), pad=(0, 1)),
                         conv(b3, 384, (3, 1), pad=(1, 0)), conv(d, 384, (1, 3), pad=(0, 1)),
                         conv(d, 384, (3, 1), pad=(1, 0)), conv(avg(v), 192, 1)])

    t = g.input("x", (batch, 3, side, side))
    t = conv(conv(conv(t, 32, 3, stride=2), 32, 3), 64, 3, pad=1)
    t = conv(conv(g.pool("MaxPool", t, 3, 2), 80, 1), 192, 3)
    t = g.pool("MaxPool", t, 3, 2)
    for pool in (32, 64, 64)[:g.reps(3)]:
        t = block_a(t, pool)
    t = block_b(t)
    for c7 in (128, 160, 160, 192)[:g.reps(4)]:
        t = block_c(t, c7)
    t = block_d(t)
    for _ in range(g.reps(2)):
        t = block_e(t)
    return [g.classifier(t, 1000)]


@dataclass(frozen=True)
class ModelSpec:
    """One benchmark model: its builder, a line saying what it is, and the smallest image
    side its layers accept (None: the model takes no image)."""

    name: str
    description: str
    make: Callable[[_Graph, int, int | None, int | None], list[str]]
    min_image: int | None


MODELS: dict[str, ModelSpec] = {m.name: m for m in (
    ModelSpec("bert", "BERT layer, seq 64, hidden 1024, 16 heads", _bert, None),
    ModelSpec("nasrnn", "NasRNN, 5 cells, hidden 512", _nasrnn, None),
    ModelSpec("nasneta", "NasNet-A, 3x(5 normal + 1 reduction) cells, 56x56x128 in",
              _nasneta, 8),
    ModelSpec("resnext50", "ResNeXt-50 32x4d, 224x224", _resnext50, 32),
    ModelSpec("squeezenet", "SqueezeNet 1.1, 224x224", _squeezenet, 17),
    ModelSpec("vgg19", "VGG-19, 224x224", _vgg19, 32),
    ModelSpec("inception_v3", "Inception-v3, 299x299", _inception_v3, 75),
)}

PAPER_BATCH: dict[str, int] = {name: 1 for name in MODELS} | {"inception_v3": 32}
"""The batch of TASO's script for each model (the graphs Tensat imports)."""


def build(name: str, *, batch: int = 1, image: int | None = None, slim: int = 1,
          seq: int | None = None, depth: int | None = None, seed: int = 0) -> Any:
    """The ONNX model ``name`` (one of :data:`MODELS`) at ``batch``; ``image`` (the spatial
    side of a convolutional model; default its published size), ``slim`` (divide channel
    counts and widths), ``seq`` (BERT's sequence length, default 64) and ``depth`` (caps
    every run of repeated blocks: bottlenecks, cells, modules, convolutions per stage, NasRNN
    steps, NasNet-A's stages, SqueezeNet's last fire modules) make smaller variants. The
    weights are random from ``seed``; the model passes ``onnx.checker``."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; one of {', '.join(MODELS)}")
    spec = MODELS[name]
    for what, v in (("batch", batch), ("slim", slim), ("seq", seq or 1), ("image", image or 1),
                    ("depth", depth or 1)):
        if not isinstance(v, int) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")
    if image is not None and spec.min_image is None:
        raise ValueError(f"{name} takes no image; leave image unset")
    if image is not None and image < spec.min_image:
        raise ValueError(f"{name} needs an image side of at least {spec.min_image}, got {image}")
    if seq is not None and name != "bert":
        raise ValueError("seq is BERT's sequence length; leave it unset for " + name)
    g = _Graph(seed, slim, depth)
    outputs = spec.make(g, batch, image, seq)
    model = g.model(outputs, name)
    g.onnx.checker.check_model(model)
    return model


def inputs(model: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Random standard-normal float32 inputs for ``model``'s graph inputs, by name."""
    rng = np.random.default_rng(seed + 1_000_003)
    out = {}
    for inp in model.graph.input:
        shape = tuple(d.dim_value for d in inp.type.tensor_type.shape.dim)
        out[inp.name] = rng.standard_normal(shape, dtype=np.float32)
    return out
