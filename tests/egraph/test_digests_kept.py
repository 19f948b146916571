"""``cost.digests_kept``: inside one preparation each large constant is hashed once for the
digest that names it in e-graphs, extraction and worker messages; nothing is held after."""

from __future__ import annotations

import hashlib
import types

import numpy as np
import pytest

import accy
from accy import f32
from accy.builder import trace
from accy.egraph import cost


@pytest.fixture
def hashed(monkeypatch):
    """Sizes of the bytes blake2b hashed (cost's module only)."""
    sizes: list[int] = []

    def counting(data=b"", **kw):
        sizes.append(len(data))
        return hashlib.blake2b(data, **kw)

    monkeypatch.setattr(cost, "hashlib", types.SimpleNamespace(blake2b=counting))
    return sizes


def test_each_object_is_hashed_once_inside_and_every_time_outside(hashed):
    data = np.random.default_rng(0).random(1 << 18).tobytes()  # 2 MiB
    twin = bytes(bytearray(data))  # equal bytes, another object
    digest = cost.bytes_digest(data)
    assert cost.bytes_digest(data) == digest and len(hashed) == 2  # outside: no cache
    hashed.clear()
    with cost.digests_kept():
        assert cost.bytes_digest(data) == cost.bytes_digest(data) == digest
        assert cost.bytes_digest(twin) == digest
        with cost.digests_kept():  # an inner use shares the outer cache
            assert cost.bytes_digest(data) == digest
        small = b"x" * 100
        assert cost.bytes_digest(small) == cost.bytes_digest(small)
    assert hashed == [len(data), len(twin), 100, 100]  # small ones are not kept
    assert cost._KEPT.digests is None  # nothing held after


def test_the_oldest_are_let_go_past_the_cap(hashed, monkeypatch):
    monkeypatch.setattr(cost, "_KEPT_MAX_BYTES", 3 << 20)
    blobs = [bytes([i]) * (2 << 20) for i in range(3)]
    with cost.digests_kept():
        for b in blobs:
            cost.bytes_digest(b)
        assert len(cost._KEPT.digests) == 1  # 4 MiB held would pass 3 MiB: one left
        cost.bytes_digest(blobs[2])
        cost.bytes_digest(blobs[0])
    assert hashed == [2 << 20] * 4


def test_prepare_hashes_a_weight_once(hashed):
    weight = np.random.default_rng(1).random((512, 1024)).astype(np.float32)  # 2 MiB

    def fn(x):
        y = x
        for _ in range(6):
            y = (y * 1.0) + (y * 0.5)
        return accy.transpose(accy.constant(weight), (1, 0)) @ y

    prog = trace(fn, f32[512, 4], name="f")
    job = accy.prepare(prog, "accy-contract,saturate{region-size=8},einsum-lowering")
    assert job.program is not None
    big = [n for n in hashed if n >= weight.nbytes]
    assert len(big) <= 1, hashed
