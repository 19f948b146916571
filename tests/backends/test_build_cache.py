"""Issue #15: a job's kernels built as few joined programs, and the on-disk build cache.

Whether a build was found in a cache is judged by counting compiles and loads
(``Runtime.stats``), never by time. Every runtime here has a ``cache_dir`` of its own
(``tmp_path``) or none, so no test depends on the user's cache or on another test's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import accy
from accy.backends.opencl import batching, build_cache
from accy.backends.opencl.render import render
from accy.errors import KernelBuildError

f32, f64 = accy.f32, accy.f64


@accy.function
def many(a: f32[256], b: f32[256]):
    """Eight kernels with distinct sources (the last two results share one)."""
    t = a + b
    outs = []
    for _ in range(4):
        outs.append(t - 1.0)
        t = t * t
    return (*outs, t)


@accy.function
def doubles(a: f64[64], b: f64[64]):
    return a * b + 1.0, a - b


def sources_of(job: accy.PreparedJob) -> list[str]:
    return [job.kernel_source(i) for i in range(job.kernel_count)]


def runtime_on(device, cache_dir) -> object:
    from accy.backends.opencl import runtime as rt

    return rt.Runtime(device.device, cache_dir=cache_dir)


# joining sources (pure) -----------------------------------------------------------------


def test_rendered_sources_join_with_each_prelude_line_once() -> None:
    sources = sources_of(accy.prepare(many)) + sources_of(accy.prepare(doubles))
    groups = batching.batches(sources)
    assert [s for g in groups for s in g] == sources
    assert len(groups) < len(sources)  # two jobs: an entry name of one may recur in the other
    for group in groups:
        joined = batching.join(group)
        lines = joined.splitlines()
        assert lines.count("#pragma OPENCL FP_CONTRACT OFF") == 1
        assert lines.count("#pragma OPENCL EXTENSION cl_khr_fp64 : enable") <= 1
        assert all(line.startswith("#pragma") for line in lines[:lines.index(
            next(line for line in lines if not line.startswith("#pragma")))])
        for source in group:  # every kernel body is there, whole
            assert source[source.index("__kernel"):] in joined
    assert any("cl_khr_fp64" in batching.join(g) and len(g) > 1 for g in groups)


def test_sources_that_cannot_share_a_program_are_kept_apart() -> None:
    k = "__kernel void {0}(__global float *x) {{ x[0] = {1}; }}\n"
    same_entry = [k.format("f", 1), k.format("f", 2)]
    assert batching.batches(same_entry) == [[same_entry[0]], [same_entry[1]]]
    contract = ["#pragma OPENCL FP_CONTRACT OFF\n" + k.format("f", 1), k.format("g", 2)]
    assert batching.batches(contract) == [[contract[0]], [contract[1]]]
    helper = "static inline float h(float x) {{ return x + {0}; }}\n"
    clash = [helper.format(1) + k.format("f", "h(1)"), helper.format(2) + k.format("g", "h(1)")]
    assert len(batching.batches(clash)) == 2
    shared = [helper.format(1) + k.format("f", "h(1)"), helper.format(1) + k.format("g", "h(2)")]
    (group,) = batching.batches(shared)
    assert batching.join(group).count("static inline") == 1
    odd = ["#define N 4\n" + k.format("f", "N"), k.format("g", 1)]  # not reasoned about: alone
    assert batching.batches(odd) == [[odd[0]], [odd[1]]]


def test_batches_are_bounded() -> None:
    k = "__kernel void k{0}(__global float *x) {{ x[0] = {0}; }}\n"
    sources = [k.format(i) for i in range(10)]
    assert [len(g) for g in batching.batches(sources, max_kernels=4)] == [4, 4, 2]
    size = len(sources[0])
    assert [len(g) for g in batching.batches(sources, max_bytes=3 * size)] == [3, 3, 3, 1]


# building joined programs -----------------------------------------------------------------


def test_a_job_builds_as_one_program_and_computes_the_same(device) -> None:
    job = accy.prepare(many)
    joined, alone = runtime_on(device, False), runtime_on(device, False)
    assert job.kernel_count == 8
    exe = job.executable(device=joined)
    assert joined.stats.compiled == 1 and joined.stats.compiled_sources == 8
    alone.build_many(sources_of(job), batch=False)
    assert alone.stats.compiled == 8
    reference = job.executable(device=alone)
    assert alone.stats.compiled == 8  # the executable found every program built
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(256).astype(np.float32) for _ in range(2))
    for x, y in zip(exe(a, b), reference(a, b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_a_failing_batch_names_and_quotes_the_bad_kernel(device) -> None:
    runtime = runtime_on(device, False)
    good = sources_of(accy.prepare(many))[:3]
    bad = ("#pragma OPENCL FP_CONTRACT OFF\n__kernel void broken(__global float *x) {\n"
           "  x[0] = not_defined_here;\n}\n")
    with pytest.raises(KernelBuildError) as info:
        runtime.build_many([*good, bad])
    assert runtime.stats.failed_batches == 1
    # line numbers are the bad source's own, not the joined program's
    assert "   3 |   x[0] = not_defined_here;" in str(info.value)
    before = runtime.build_count()
    for source in good:  # the good sources were built alone on the way, and kept
        runtime.build(source)
    assert runtime.build_count() == before


# the disk cache ---------------------------------------------------------------------------


def test_a_fresh_runtime_loads_its_programs_from_the_disk_cache(device, tmp_path: Path
                                                                ) -> None:
    job = accy.prepare(many)
    first = runtime_on(device, tmp_path)
    want = job.executable(device=first)(np.ones(256, np.float32), np.ones(256, np.float32))
    assert (first.stats.compiled, first.stats.stored) == (1, 1)
    assert len(list(tmp_path.glob("*.clbin"))) == 1
    assert (tmp_path.stat().st_mode & 0o777) == 0o700
    second = runtime_on(device, tmp_path)  # another context: nothing in memory
    got = job.executable(device=second)(np.ones(256, np.float32), np.ones(256, np.float32))
    assert (second.stats.compiled, second.stats.loaded, second.stats.loaded_sources) == (0, 1, 8)
    for x, y in zip(want, got, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("damage", ["truncated", "garbage binary", "foreign key"])
def test_a_damaged_entry_is_rebuilt_never_fatal(device, tmp_path: Path, damage: str) -> None:
    source = sources_of(accy.prepare(many))[0]
    runtime_on(device, tmp_path).build(source)
    (entry,) = tmp_path.glob("*.clbin")
    data = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage binary":  # a well-formed entry whose binary the driver refuses
        key = entry.name.removesuffix(build_cache.SUFFIX)
        build_cache.DiskCache(tmp_path, 1 << 30).store(key, b"\x7fELF not really a binary")
    else:
        entry.write_bytes(data.replace(entry.name[:16].encode(), b"0" * 16, 1))
    again = runtime_on(device, tmp_path)
    again.build(source)
    assert (again.stats.compiled, again.stats.loaded, again.stats.stored) == (1, 0, 1)
    third = runtime_on(device, tmp_path)  # the rebuilt entry is good again
    third.build(source)
    assert (third.stats.compiled, third.stats.loaded) == (0, 1)


def test_cache_is_bounded_least_recently_used_first(tmp_path: Path) -> None:
    cache = build_cache.DiskCache(tmp_path / "c", max_bytes=10_000)
    for i in range(4):
        cache.store(f"{i:064x}", bytes(3000))
        os.utime(cache.root / f"{i:064x}.clbin", (1000 + i, 1000 + i))
    assert cache.load(f"{0:064x}") is not None  # a hit makes entry 0 the most recent
    assert cache.trim() == 1
    left = [i for i in range(4) if (cache.root / f"{i:064x}.clbin").exists()]
    assert left == [0, 2, 3]
    assert cache.size() <= 10_000


def test_environment_switches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"ACCY_BUILD_CACHE_DIR": str(tmp_path / "k")}
    assert build_cache.from_environment(False, env).root == tmp_path / "k"
    assert build_cache.from_environment(False, {**env, "ACCY_BUILD_CACHE": "0"}) is None
    # PoCL keeps its own kernel cache: accy's is off there unless asked for, or PoCL's is off
    assert build_cache.from_environment(True, env) is None
    assert build_cache.from_environment(True, {**env, "ACCY_BUILD_CACHE": "1"}) is not None
    assert build_cache.from_environment(True, {**env, "POCL_KERNEL_CACHE": "0"}) is not None
    sized = build_cache.from_environment(False, {**env, "ACCY_BUILD_CACHE_MIB": "2"})
    assert sized.max_bytes == 2 << 20
    xdg = build_cache.from_environment(False, {"XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert xdg.root == tmp_path / "xdg" / "accy" / "kernels"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert build_cache.from_environment(False, {"ACCY_BUILD_CACHE_DIR": str(shared)}) is None
    assert "build cache is off" in str(caught[0].message)


def test_a_second_process_finds_the_kernels_on_disk(device, tmp_path: Path) -> None:
    """Two processes prepare and run the same program; the second compiles nothing."""
    script = textwrap.dedent("""
        import json, sys
        import numpy as np
        import accy
        from accy.backends.opencl.runtime import Runtime, select_device

        @accy.function
        def prog(a: accy.f32[64], b: accy.f32[64]):
            return (a + b) * b, a - b, accy.maximum(a, b * 2.0)

        runtime = Runtime(select_device().device, cache_dir=sys.argv[1])
        (out, *_) = accy.prepare(prog).run(np.ones(64, np.float32), np.ones(64, np.float32),
                                           device=runtime)
        s = runtime.stats
        print(json.dumps([s.compiled, s.loaded, float(out[0])]))
    """)
    env = dict(os.environ, PYTHONPATH=str(Path(accy.__file__).parents[1]))
    runs = [subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True,
                           capture_output=True, text=True, timeout=300) for _ in range(2)]
    first, second = (json.loads(r.stdout.strip().splitlines()[-1]) for r in runs)
    assert first[:2] == [1, 0] and second[:2] == [0, 1]
    assert first[2] == second[2] == 2.0


def test_rendered_f64_sources_join(device) -> None:
    if not device.info.fp64:
        pytest.skip("no fp64 on this device")
    job = accy.prepare(doubles, device=os.environ.get("ACCY_DEVICE", "pocl"))
    runtime = runtime_on(device, False)
    runtime.build_many([render(k) for k in job.kernels])
    assert runtime.stats.compiled == 1


_CONCURRENT = textwrap.dedent("""
    import json
    import numpy as np
    import accy
    from accy.backends.opencl.runtime import Runtime, select_device

    @accy.function
    def prog(a: accy.f32[64], b: accy.f32[64]):
        return (a + b) * b, a - b, accy.maximum(a, b * 2.0)

    runtime = Runtime(select_device().device)  # no cache_dir: the environment's cache
    outs = accy.prepare(prog).run(np.ones(64, np.float32), np.full(64, 3.0, np.float32),
                                  device=runtime)
    s = runtime.stats
    print(json.dumps([s.compiled, s.loaded, [float(o[0]) for o in outs]]))
""")


def _processes(env: dict[str, str], count: int, pocl_caches: Path) -> list[list]:
    """``count`` processes running ``_CONCURRENT`` at once; their JSON lines.

    Each process gets its own PoCL kernel cache (a new folder under ``pocl_caches``): PoCL's
    cache is not safe for processes compiling the same program at once into a cold folder
    (pocl/pocl#430, #1480; a CI run's process died of SIGSEGV there), and accy's cache, which
    these tests are about, is."""
    pocl_caches.mkdir(exist_ok=True)
    first = len(list(pocl_caches.iterdir()))
    procs = [subprocess.Popen([sys.executable, "-c", _CONCURRENT], text=True,
                              env=dict(env, POCL_CACHE_DIR=str(pocl_caches / str(first + i))),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(count)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        assert p.returncode == 0, stderr
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def test_concurrent_processes_share_the_cache_under_xdg(device, tmp_path: Path) -> None:
    """Three processes fill one cache (``$XDG_CACHE_HOME/accy/kernels``) at once: each
    computes the right values, the folder holds whole entries only, and a later process
    compiles nothing."""
    env = dict(os.environ, PYTHONPATH=str(Path(accy.__file__).parents[1]),
               XDG_CACHE_HOME=str(tmp_path / "xdg"), ACCY_BUILD_CACHE="on")
    env.pop("ACCY_BUILD_CACHE_DIR", None)
    env.pop("ACCY_BUILD_CACHE_MIB", None)
    want = [12.0, -2.0, 6.0]
    for compiled, loaded, values in _processes(env, 3, tmp_path / "pocl"):
        assert values == want and compiled + loaded == 1
    folder = tmp_path / "xdg" / "accy" / "kernels"
    entries = list(folder.glob("*" + build_cache.SUFFIX))  # the program's, the probe's
    assert entries and not list(folder.glob("*.tmp"))
    cache = build_cache.DiskCache(folder, 1 << 30)
    assert all(cache.load(e.name.removesuffix(build_cache.SUFFIX)) is not None
               for e in entries)
    (later,) = _processes(env, 1, tmp_path / "pocl")
    assert later == [0, 1, want]


def test_processes_keep_the_cache_within_its_size_bound(device, tmp_path: Path) -> None:
    """A bound smaller than one program: every process still runs, and the folder stays
    within the bound (each store trims)."""
    folder = tmp_path / "kernels"
    env = dict(os.environ, PYTHONPATH=str(Path(accy.__file__).parents[1]),
               ACCY_BUILD_CACHE_DIR=str(folder), ACCY_BUILD_CACHE="on",
               ACCY_BUILD_CACHE_MIB="0.001")
    for compiled, loaded, values in _processes(env, 2, tmp_path / "pocl"):
        assert values == [12.0, -2.0, 6.0] and (compiled, loaded) == (1, 0)
    assert build_cache.DiskCache(folder, 1024).size() <= 1024
