"""The kernel-diff gate script: deterministic output, check and update against a snapshot;
the plans of bench_gpu's default set for a saved H100 profile.

Kernels change often while the backend is built, so this test compares the generated text with
itself (twice in a row must be identical) and with snapshots it writes; only the script's
``--check`` compares against the stored ``experiments/kernels.snapshot.txt``.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def kernel_diff(experiment_script):
    return experiment_script("kernel_diff")


@pytest.fixture(scope="module")
def text(kernel_diff) -> str:
    return kernel_diff.generate()


def test_generation_is_deterministic(kernel_diff, text: str) -> None:
    assert kernel_diff.generate() == text


def test_every_program_has_a_section(kernel_diff, text: str) -> None:
    sections = [line for line in text.splitlines() if line.startswith("=== ")]
    kernels = len(kernel_diff.PROGRAMS) + len(kernel_diff.TENSOR_CORE_PROGRAMS)
    assert [s.split(":")[0][4:] for s in sections[:kernels]] == [
        n for n, _ in kernel_diff.PROGRAMS] + [
        f"{n} ({p})" for n, _, p in kernel_diff.TENSOR_CORE_PROGRAMS]
    names = {"seed-add", "reduction", "softmax", "matmul", "gather-scatter", "cross-entropy",
             "broadcast-chain"}
    assert names <= {n for n, _ in kernel_diff.PROGRAMS}
    assert "__kernel void" in text


def test_the_tensor_core_kernels_are_in_the_snapshot(kernel_diff, text: str) -> None:
    """Each policy's GEMM is built by its tensor-core generator for the written-down profile:
    TF32 and f16 mma.sync in inline PTX, fed by cp.async."""
    gemms = text.split(f"# {len(kernel_diff.TENSOR_CORE_PROGRAMS)} programs for target")[1]
    assert "!!!" not in gemms
    for shape in ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
                  "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", "cp.async"):
        assert shape in gemms


def test_the_default_sets_plans_for_a_saved_h100_profile(kernel_diff, text: str,
                                                         monkeypatch) -> None:
    """Every bench_gpu program planned for papers/data/h100_profile.json, as a line a kernel
    (no source), wgmma's TMA kernels among them: the same text without a CUDA driver (the
    tensor maps planned offline) and the offline flag off after."""
    before, plans = text.split(" programs of bench_gpu's default set planned for")
    heads = [line for line in plans.splitlines() if line.startswith("=== ")]
    assert len(heads) == int(before.rsplit("# ", 1)[1]) >= 20
    assert "!!!" not in plans and "__kernel" not in plans
    assert "=== gemm_between_f16 (f16, M=1000 N=1030 K=520): wgmma-f16 1" in plans
    monkeypatch.setattr(kernel_diff.tma, "_libcuda", lambda: None)
    assert "\n".join(kernel_diff.plans()) in text and not kernel_diff.tma.OFFLINE


def test_check_passes_on_its_own_snapshot_and_shows_a_diff_otherwise(
        kernel_diff, text: str, tmp_path: Path) -> None:
    snap = tmp_path / "kernels.snapshot.txt"
    snap.write_text(text)
    assert kernel_diff.check(snap, text) == (True, "")
    changed = text.replace("get_global_id(0)", "get_global_id(1)", 1)
    snap.write_text(changed)
    same, diff = kernel_diff.check(snap, text)
    assert not same
    assert diff.startswith(f"--- {snap}\n+++ generated\n")
    assert "-" in diff and "+" in diff and "get_global_id(1)" in diff
    assert not kernel_diff.check(tmp_path / "missing.txt", text)[0]


def test_main_update_then_check(kernel_diff, text: str, tmp_path: Path, capsys) -> None:
    snap = tmp_path / "snap.txt"
    assert kernel_diff.main(["--update", str(snap)]) == 0
    assert snap.read_text() == text
    assert kernel_diff.main(["--check", str(snap)]) == 0
    snap.write_text(text + "stale line\n")
    capsys.readouterr()
    assert kernel_diff.main(["--check", str(snap)]) == 1
    out = capsys.readouterr().out
    assert "-stale line" in out and "--update" in out
    assert kernel_diff.main([]) == 0
    assert capsys.readouterr().out == text
