"""The pass manager: runs a pipeline stage by stage, verifies, times and records.

Instrumentation hooks (before/after each pass, on failure) carry ``print-ir-after-all``, the
timing report and statistics; the manager itself only counts and times.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from accy.errors import AccyError, PassFailure
from accy.ir.program import Stage
from accy.passes.analysis import AnalysisCache
from accy.passes.base import Pass
from accy.passes.spec import Pipeline
from accy.product import Product


@dataclass(frozen=True)
class PassRecord:
    spec: str
    elapsed_ns: int
    analysis_hits: int
    analysis_misses: int
    fingerprint: str  # of the product after the pass
    stats: tuple[tuple[str, Any], ...] = ()


class Instrument:
    """Hooks called around every pass; subclass and override what you need."""

    def before_pass(self, p: Pass, product: Product) -> None: ...

    def after_pass(self, p: Pass, product: Product, record: PassRecord) -> None: ...

    def on_failure(self, p: Pass, product: Product, error: BaseException) -> None: ...


@dataclass(frozen=True)
class StageRecord:
    """What happened in one stage: time, pass runs, analysis cache use, resulting fingerprint."""

    stage: Stage
    elapsed_ns: int
    pass_runs: int
    analysis_hits: int
    analysis_misses: int
    fingerprint: str
    passes: tuple[PassRecord, ...]

    @property
    def stamp(self) -> tuple[str, str]:
        return self.stage.value, self.fingerprint


@dataclass
class PassContext:
    """What a running pass may use: the analysis cache, a place for statistics, and the
    pipeline it runs in (a pass whose choice depends on a later pass's option reads it there:
    fusion-planning merges attention where kernelization's precision takes the fused kernel)."""

    cache: AnalysisCache = field(default_factory=AnalysisCache)
    stats: dict[str, Any] = field(default_factory=dict)
    pipeline: Pipeline | None = None

    def option_of(self, pass_name: str, option: str, default: Any) -> Any:
        """``option`` of the pipeline's pass ``pass_name`` (its first), else ``default``."""
        passes = self.pipeline.passes if self.pipeline is not None else ()
        return next((getattr(p, option) for p in passes if p.name == pass_name), default)

    def analysis(self, name: str, product: Product) -> Any:
        return self.cache.get(name, product)

    def stat(self, key: str, value: Any) -> None:
        """Record a statistic of the running pass (shown in records and `--statistics`)."""
        self.stats[key] = value


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a while (back on after, if it was on).

    Passes allocate many small objects that live until the stage ends (nodes, kernel IR,
    plans), so the collector's full passes over every live object ran again and again and took
    about half of preparation (issue #15); reference counting still frees what is not in a
    cycle, and the collector's next automatic run, after the stage, collects the rest."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class PassManager:
    """Runs a :class:`Pipeline` over a product, one stage after another."""

    def __init__(self, pipeline: Pipeline, verify_each: bool = True,
                 instruments: Sequence[Instrument] = ()) -> None:
        self.pipeline = pipeline
        self.verify_each = verify_each
        self.instruments = list(instruments)
        self.cache = AnalysisCache()

    def run(self, product: Product, until: Stage = Stage.target
            ) -> tuple[Product, list[StageRecord]]:
        """Advance ``product`` stage by stage up to ``until``; the last product and the records."""
        records = []
        for after, record in self.run_stages(product, until):
            product = after
            records.append(record)
        return product, records

    def run_stages(self, product: Product, until: Stage = Stage.target
                   ) -> Iterator[tuple[Product, StageRecord]]:
        """Yield the product and record of each stage after ``product.stage`` up to ``until``."""
        self._check_order(product)
        for stage in [s for s in Stage if product.stage.index < s.index <= until.index]:
            product, record = self._run_stage(stage, product)
            yield product, record

    def _check_order(self, product: Product) -> None:
        passes = self.pipeline.passes
        late = [p for p in passes if p.stage.index <= product.stage.index]
        if late:
            raise PassFailure(f"pass {late[0].spec()} belongs to stage {late[0].stage.value} but "
                              f"the product is already at stage {product.stage.value}")
        for p, q in zip(passes, passes[1:], strict=False):
            if q.stage.index < p.stage.index:
                raise PassFailure(f"pipeline runs {q.spec()} (stage {q.stage.value}) after "
                                  f"{p.spec()} (stage {p.stage.value}); order passes by stage")

    def _run_stage(self, stage: Stage, product: Product) -> tuple[Product, StageRecord]:
        with gc_paused():
            return self._run_stage_passes(stage, product)

    def _run_stage_passes(self, stage: Stage, product: Product
                          ) -> tuple[Product, StageRecord]:
        start = time.perf_counter_ns()
        hits0, misses0 = self.cache.hits, self.cache.misses
        pass_records = []
        for p in (p for p in self.pipeline.passes if p.stage is stage):
            product, rec = self._run_pass(p, product.replace(stage=stage))
            pass_records.append(rec)
        product = product.replace(stage=stage)
        if self.verify_each:
            product.verify()
        return product, StageRecord(
            stage=stage,
            elapsed_ns=time.perf_counter_ns() - start,
            pass_runs=len(pass_records),
            analysis_hits=self.cache.hits - hits0,
            analysis_misses=self.cache.misses - misses0,
            fingerprint=product.fingerprint(),
            passes=tuple(pass_records),
        )

    def _run_pass(self, p: Pass, product: Product) -> tuple[Product, PassRecord]:
        ctx = PassContext(cache=self.cache, pipeline=self.pipeline)
        hits0, misses0 = self.cache.hits, self.cache.misses
        for ins in self.instruments:
            ins.before_pass(p, product)
        start = time.perf_counter_ns()
        try:
            result = p.run(ctx, product)
            if self.verify_each:
                result.verify()
        except Exception as e:
            for ins in self.instruments:
                ins.on_failure(p, product, e)
            if isinstance(e, PassFailure):
                raise
            what = str(e) if isinstance(e, AccyError) else f"{type(e).__name__}: {e}"
            raise PassFailure(f"pass {p.spec()} failed: {what}") from e
        elapsed = time.perf_counter_ns() - start
        self.cache.carry_over(product, result, p.preserves)
        record = PassRecord(
            spec=p.spec(), elapsed_ns=elapsed,
            analysis_hits=self.cache.hits - hits0, analysis_misses=self.cache.misses - misses0,
            fingerprint=result.fingerprint(), stats=tuple(ctx.stats.items()),
        )
        for ins in self.instruments:
            ins.after_pass(p, result, record)
        return result, record
