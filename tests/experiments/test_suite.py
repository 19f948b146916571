"""The benchmark suite: every program builds at every size, prepares, runs and matches
``accy.interpret`` at the ci size; inputs are seeded; the baselines compute the same."""

from __future__ import annotations

import numpy as np
import pytest

import accy
from accy.experiments import baselines
from accy.experiments.measure import max_rel_error
from accy.experiments.suite import SIZES, SUITE, benchmark, benchmarks, describe
from accy.ir.interpret import interpret
from accy.testing import assert_close

NAMES = list(SUITE)


def test_suite_has_the_workloads_of_the_issue() -> None:
    assert NAMES == ["mlp_gelu", "attention", "layernorm", "softmax_xent", "embedding",
                     "tensor_network", "nasrnn", "matrix_chain"]
    assert set(baselines.REFERENCES) == set(NAMES)


@pytest.mark.parametrize("size", SIZES)
def test_every_program_builds_at_every_size(size: str) -> None:
    rows = describe(size)
    assert [r["program"] for r in rows] == NAMES
    for r in rows:
        assert r["ops"] >= 1 and len(r["fingerprint"]) == 32
    ci = {r["program"]: r for r in describe("ci")}
    if size != "ci":  # other sizes are other programs
        assert all(ci[r["program"]]["fingerprint"] != r["fingerprint"] for r in rows)


def test_inputs_are_seeded_and_in_range() -> None:
    for bench in SUITE.values():
        a, b = bench.inputs("ci", 0), bench.inputs("ci", 0)
        c = bench.inputs("ci", 1)
        params = bench.program("ci").function().params
        assert len(a) == len(params)
        for x, y, p in zip(a, b, params, strict=True):
            assert x.shape == p.type.shape and x.dtype == p.type.dtype.numpy
            np.testing.assert_array_equal(x, y)
        assert any(not np.array_equal(x, z) for x, z in zip(a, c, strict=True))
        for i, bound in bench.index_bounds(bench.dims("ci")).items():
            assert 0 <= a[i].min() and a[i].max() < bound


def test_lookup_errors_list_valid_names() -> None:
    with pytest.raises(KeyError, match="valid: mlp_gelu"):
        benchmark("resnet")
    with pytest.raises(KeyError, match="sizes: ci, paper, full"):
        SUITE["attention"].dims("huge")
    assert [b.name for b in benchmarks("layernorm,embedding")] == ["layernorm", "embedding"]
    assert len(benchmarks("all")) == len(SUITE)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_baseline_matches_the_interpreter(name: str) -> None:
    bench = SUITE[name]
    inputs = bench.inputs("ci", 3)
    want = interpret(bench.program("ci"), inputs)
    got = baselines.reference(name, baselines.NumpyOps(), bench.dims("ci"), inputs)()
    assert max_rel_error(got, want) < 1e-5
    wide = baselines.expected(name, bench.dims("ci"), inputs)
    assert max_rel_error(wide, interpret(bench.program("ci"), inputs, precision="float64")) < 1e-6


@pytest.mark.parametrize("name", NAMES)
def test_program_prepares_runs_and_matches_the_interpreter(name: str, device) -> None:
    bench = SUITE[name]
    program = bench.program("ci")
    inputs = bench.inputs("ci", 0)
    job = accy.prepare(program, device=None)
    got = job.run(*inputs, device=device)
    assert_close(got, interpret(program, inputs), program, inputs)
