"""wgmma-f16's selection with A copied by TMA as well (accy/kernels/wgmma_ss.py), planned
without a GPU for a Hopper profile whose static local memory holds the stages: which form
(128x256 or 128x128 tiles) a product takes, at what rate, with how many stages, where K is
split and over which tiles, and where B is transposed first. The kernels themselves (their
markers, tensor maps and emulated runs) are tested in test_wgmma_tma.py."""

from __future__ import annotations

import re

import pytest
from test_mma_generator import matmul
from test_mma_generator import prepared as prepare
from test_mma_pipeline import matmul16
from test_wgmma_tma import ROOMY_H200

from accy.kernels import mma_plan, wgmma, wgmma_ss


@pytest.mark.parametrize("m, n, k, wide", [
    (4096, 4096, 4096, True),  # 128x256 tiles: 0.2035 ms against 0.2219 on 128x128 ones
    (4096, 4096, 1024, False),  # 128x128, two a unit: 0.0680 against 0.0715
    (1024, 1024, 1024, False),  # 128x128 (64 of them, 32 of 128x256): 0.0117 against 0.0183
])
def test_selection_scores_the_forms_of_the_kernel_with_a_copied(pipe, used, encodes, m, n, k,
                                                                wide):
    """Measured on the H200 (papers/kernels.md, "Twentieth session"); 128x128 tiles in three
    stages (two work-groups a compute unit: twice the slots in the waves' balance)."""
    job = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe)
    src = job.kernel_source(0)
    assert used(job) == {"wgmma-f16": 1} and job.kernels[0].geometry.local_size == (256,)
    assert ("@@SSTEP256" in src) == wide and ("@@SSTEP128" in src) == (not wide)
    walking = m == 4096  # more tiles than work-groups the units hold (1024 of 128x128)
    assert ("c_stage" in src) == walking
    if not wide:  # a step's three boxes: two steps ahead, then the K loop's one (walking) or
        assert src.count("@@TMA2") == 3 * (2 + (1 if walking else 2))  # its two


def test_tiles_alone_on_their_units_score_their_lone_rate(pipe, used, encodes, monkeypatch):
    """768x1536x1024: 72 tiles of 128x128 (two work-groups a unit) on 132 units, one alone on
    each, score ``LONE`` of their rate: above the mma kernels' 216 split work-groups and 36
    tiles of 128x256. On the H100 they ran 1.92x faster than the mma kernels' split
    (papers/kernels.md, "Forty-fourth session"); scored by the slots they fill (a half, as
    ``LONE`` 0.5 scores them), the mma kernels took the product."""
    def prepared():
        return prepare(matmul16(768, 1536, 1024), "ieee", ROOMY_H200, pipe)

    job = prepared()  # one kernel of 128x128 tiles
    assert set(used(job)) == {"wgmma-f16"} and job.kernel_count == 1
    assert "@@SSTEP128" in job.kernel_source(0)
    monkeypatch.setattr(wgmma, "LONE", 0.5)
    job = prepared()  # K split, the partial sums a second kernel
    assert set(used(job)) == {"mma-f16"} and job.kernel_count == 2


def test_f16_tilings_of_many_waves_are_scored_as_full_waves(pipe, encodes, monkeypatch):
    """7220x3396x4096: 57 x 14 = 798 tiles of 128x256 (6.05 waves of one a unit) against 1596
    of 128x128 filling their 7 waves of two a unit better. By the waves' balance 128x128
    wins; scored as full waves (at least ``MANY_WAVES``) 128x256 does, measured the faster
    (papers/kernels.md, "Thirty-seventh session"). Under that the balance still decides."""
    def wide(m: int, n: int, k: int) -> bool:  # (the product: after B's copy, where N = 3396)
        job = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe)
        src = job.kernel_source(job.kernel_count - 1)
        assert ("@@SSTEP256" in src) != ("@@SSTEP128" in src)
        return "@@SSTEP256" in src

    assert wide(7220, 3396, 4096) and wide(6144, 6200, 2048)
    assert not wide(4096, 4160, 4096)  # 4.1 waves of 128x256
    assert not wide(4096, 4096, 1024)  # full waves both: 128x128's rate up to K 1024
    monkeypatch.setattr(wgmma_ss, "MANY_WAVES", 1 << 30)
    assert not wide(7220, 3396, 4096) and not wide(6144, 6200, 2048)


@pytest.mark.parametrize("m, n, k, chunk_k", [
    (256, 256, 65536, 2048),  # 4 tiles of 128x128 on 132 units: 33 chunks, one a unit
    (1024, 1024, 8192, 4096),  # 64 of 128x128: 2 chunks
    (1024, 1024, 1024, None),  # K not past SPLIT_K: two chunks measured slower than one
    (2048, 2048, 2048, None),  # 128 tiles of 128x128: most units busy
])
def test_k_split_where_tiles_leave_most_units_idle_over_a_long_k(pipe, encodes, monkeypatch,
                                                                 m, n, k, chunk_k):
    """H100 ("Thirty-fourth session"): 256x256x65536 0.50x -> 0.63x of torch.compile,
    1024x1024x8192 0.30x -> 0.60x; 1024^3 in two chunks 0.38x -> 0.24x. Split, the 128x128
    tiles take six stages, one work-group a unit ("Thirty-eighth": 10-11% faster than three,
    two a unit, at 256x256x65536 and 512x512x32768), K split for that one; with
    ``SPLIT_STAGES`` 0 the tilings of before, with twice the chunks."""
    job = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe)
    assert job.generators() == {"wgmma-f16": 1}
    src = job.kernel_source(0)
    assert (f"k0 = (chunk * {chunk_k}L)" in src if chunk_k else "chunk" not in src)
    assert job.kernel_count == (2 if chunk_k else 1)
    if chunk_k:
        assert "tma_bar[24]" in src  # two barriers a stage
        monkeypatch.setattr(wgmma_ss, "SPLIT_STAGES", 0)
        src = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe).kernel_source(0)
        assert "tma_bar[24]" not in src and f"k0 = (chunk * {chunk_k // 2}L)" in src


@pytest.mark.parametrize("stages, bars", [(0, 12), (4, 16), (6, 24)])
def test_tiles_alone_on_their_units_take_lone_stages(pipe, encodes, monkeypatch, stages, bars):
    """``LONE_STAGES``: 128x128 tiles unsplit, no more work-groups than units (1024^3: 64),
    take that many stages (0: the form's three); tiles walked two a unit (4096x4096x1024) and
    split ones (their own ``SPLIT_STAGES``) keep theirs."""
    monkeypatch.setattr(wgmma_ss, "LONE_STAGES", stages)

    def barriers(m, n, k):
        src = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe).kernel_source(0)
        assert "@@SSTEP128" in src
        return next(int(b) for b in re.findall(r"tma_bar\[(\d+)\]", src))

    assert barriers(1024, 1024, 1024) == bars
    assert barriers(4096, 4096, 1024) == 12 and barriers(1024, 1024, 8192) == 24


@pytest.mark.parametrize("m, n, k, f16, gen", [
    (320, 320, 20480, True, "wgmma-f16"),  # 128x128 tiles pad M x N by 1.44; K split
    (700, 200, 16384, True, "wgmma-f16"),  # 1.40
    (300, 3000, 3000, True, "wgmma-f16"),  # 128x256 tiles: 1.31
    (64, 4096, 4096, True, "wgmma-f16"),  # 2.0
    (160, 160, 65536, True, "mma-f16"),  # 256x256 pad 2.56: past PADDED
    (424, 264, 28576, False, "wgmma-3xtf32"),  # 256x128 tiles: 1.76
])
def test_tiles_padding_past_the_mma_bound_are_scored_by_their_useful_share(
        pipe, encodes, monkeypatch, m, n, k, f16, gen):
    """Products of a few hundred rows take wgmma's 128/256-row tiles though they pad past
    ``MAX_PADDING`` (320x320 pads 128x128 tiles 1.44), which refused them before; measured
    faster (papers/kernels.md, "Thirty-ninth session")."""
    prog, precision, mma = ((matmul16(m, n, k), "ieee", "mma-f16") if f16 else
                            (matmul(m, n, k), "3xtf32", "mma-3xtf32"))
    assert set(prepare(prog, precision, ROOMY_H200, pipe).generators()) == {gen}
    monkeypatch.setattr(wgmma, "PADDED", mma_plan.MAX_PADDING)
    assert set(prepare(prog, precision, ROOMY_H200, pipe).generators()) == {mma}


def test_b_is_transposed_first_only_for_products_of_many_rows(pipe, used, encodes,
                                                              monkeypatch):
    """B rows of 1030 halves fit no tensor map: 1000 x 1030 x 4096 transposes B first for
    wgmma_ss; 200 x 1030 x 4096 (under ``TRANSPOSE_MIN_M`` rows, which read B about once)
    runs on mma-f16 as stored, measured faster below 256 rows (papers/kernels.md,
    "Forty-fourth session"); with no bound it is transposed too."""
    def transposed(m: int) -> bool:
        job = prepare(matmul16(m, 1030, 4096), "ieee", ROOMY_H200, pipe)
        first = [a.name for a in job.kernels[0].args][-1] == wgmma_ss.TRANSPOSED_B
        assert set(used(job)) == {"wgmma-f16" if first else "mma-f16"}
        return first

    assert transposed(1000) and not transposed(200)
    monkeypatch.setattr(wgmma_ss, "TRANSPOSE_MIN_M", 0)
    assert transposed(200)


def test_a_short_f16_k_splits_only_where_128x128_tiles_leave_half_the_units_idle(
        pipe, encodes, monkeypatch):
    """Over a K of at most ``SPLIT_K_F16``: 608 x 2464 x 1968 (100 tiles of 128x128 on 132
    units) runs unsplit on 128x128 tiles, where 128x256 tiles split in two had been chosen
    (measured 1.31x faster unsplit); 300 x 1000 x 2000 (24 of them) still splits, as does any
    K past the bound; without it the first splits too (papers/kernels.md, "Forty-fifth
    session")."""
    def split(m: int, n: int, k: int) -> bool:
        job = prepare(matmul16(m, n, k), "ieee", ROOMY_H200, pipe)
        assert set(job.generators()) == {"wgmma-f16"}
        return job.kernels[0].entry.endswith("_partials")

    assert not split(608, 2464, 1968) and split(300, 1000, 2000) and split(608, 2464, 8192)
    monkeypatch.setattr(wgmma_ss, "SPLIT_K_F16", 1024)
    assert split(608, 2464, 1968)


def test_k_split_behind_a_k_major_b_takes_128x128_tiles(pipe, encodes, monkeypatch):
    """828 x 870 x 2464 splits K. Behind a K-major B (stored N x K, or transposed first: rows
    of 870 halves fit no tensor map) it takes 98 work-groups of 128x128 tiles (49 split in
    two), not 112 of 128x256 (28 split in four), which ran 1.1-3.2x slower there
    (papers/kernels.md, "Forty-seventh session"), unless ``SPLIT_WIDE_KMAJOR``; B along N as
    stored (872 columns) takes the wide split either way."""
    def groups(n: int, bt: bool) -> int:
        job = prepare(matmul16(828, n, 2464, b_transposed=bt), "ieee", ROOMY_H200, pipe)
        partials = [g for g in job.kernels if g.entry.endswith("_partials")]
        assert set(job.generators()) == {"wgmma-f16"} and len(partials) == 1
        return partials[0].geometry.global_size[0] // 256

    assert (groups(870, True), groups(870, False), groups(872, False)) == (98, 98, 112)
    monkeypatch.setattr(wgmma_ss, "SPLIT_WIDE_KMAJOR", True)
    assert (groups(870, True), groups(870, False), groups(872, False)) == (112, 112, 112)
