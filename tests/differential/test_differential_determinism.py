"""Preparing a program twice, here or in a fresh process, gives the same stamps and sources."""

from __future__ import annotations

from diff_support import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from accy.testing import check_determinism, programs


@examples(0.5)
@given(programs(functions=(1, 2)))
def test_preparing_twice_is_identical(program) -> None:
    check_determinism(program, fresh_process=False)


@settings(max_examples=1)
@given(st.lists(programs(max_nodes=8), min_size=16, max_size=16))
def test_a_fresh_process_with_another_hash_seed_agrees(batch) -> None:
    check_determinism(batch, fresh_process=True)
