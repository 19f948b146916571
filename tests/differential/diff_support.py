"""Helpers of the differential suite: example budgets, a tally, known-bug exclusions."""

from __future__ import annotations

from collections import Counter

from hypothesis import settings

from accy.ir.ops import Op
from accy.testing import CheckResult

TALLY: Counter[str] = Counter()  # check -> programs, "<check> unsupported: <why>" -> count

# Ops whose kernels or lowerings mishandle nan/inf today: each has an xfail(strict) test in
# test_differential_regressions.py. The nan/inf tests leave them out until the bug is fixed
# (then the regression test XPASSes, fails, and this entry and the xfail marker go together).
NONFINITE_BUG_OPS: tuple[Op, ...] = ()


def examples(share: float) -> settings:
    """Settings running ``share`` times the profile's ``max_examples`` (at least 5)."""
    return settings(max_examples=max(5, int(share * settings.default.max_examples)))


def record(check: str, result: CheckResult) -> None:
    """Count one checked program (and why, when it was unsupported)."""
    TALLY[check] += 1
    if result.status == "unsupported":
        TALLY[f"{check}: unsupported: {result.detail.split(': ')[-1][:60]}"] += 1
