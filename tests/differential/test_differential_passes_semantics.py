"""Every pass of accy-default that changes a program keeps what ``interpret`` computes."""

from __future__ import annotations

from diff_support import NONFINITE_BUG_OPS, examples, record
from hypothesis import given

from accy.testing import ALL_OPS, check_passes, programs_with_inputs


@examples(2.0)
@given(programs_with_inputs(ops=ALL_OPS, functions=(1, 3), max_nodes=8))
def test_every_pass_keeps_the_meaning(case) -> None:
    record("passes", check_passes(*case))


@examples(1.0)
@given(programs_with_inputs(
    ops=[o for o in ALL_OPS if o not in NONFINITE_BUG_OPS],
    allow_nan=True, max_nodes=5))
def test_every_pass_keeps_the_meaning_with_nan_and_infinity(case) -> None:
    record("passes nan/inf", check_passes(*case))


@examples(0.5)
@given(programs_with_inputs(max_nodes=4, max_rank=4, max_dim=6))
def test_every_pass_keeps_the_meaning_of_larger_tensors(case) -> None:
    record("passes larger tensors", check_passes(*case))
