"""The executor interface: results sorted by key whatever the completion order, retries,
failures reported (a task that raises, a task that kills its process, a task that hangs past
its timeout), and the same sweep on a local Dask cluster giving the same results as the
local executor."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from accy.experiments import ablation, contraction
from accy.experiments.executor import LocalExecutor, Task, make_executor, sort_key
from accy.experiments.runner import SweepOptions, deterministic

PROBE = "accy.experiments.executor:probe"


def probes(n: int, **params: object) -> list[Task]:
    # later tasks finish first: completion order is the reverse of the key order
    return [Task(("p", i), PROBE, {"value": i, "sleep": 0.05 * (n - i), **params})
            for i in range(n)]


def test_sort_key_orders_ints_before_strings() -> None:
    keys = [("b", 10), ("a", 9), ("a", "x"), ("a", 2)]
    assert sorted(keys, key=sort_key) == [("a", 2), ("a", 9), ("a", "x"), ("b", 10)]


@pytest.mark.parametrize("workers", [0, 2])
def test_results_are_sorted_by_key_whatever_the_completion_order(workers: int) -> None:
    tasks = probes(5)
    with LocalExecutor(workers, retries=0) as ex:
        results = ex.map(list(reversed(tasks)))
    assert [r.key for r in results] == [t.key for t in tasks]
    assert all(r.ok and r.attempts == 1 for r in results)
    assert [r.value["square"] for r in results] == [i * i for i in range(5)]


def test_duplicate_keys_are_an_error() -> None:
    with pytest.raises(ValueError, match="two tasks have the key"):
        LocalExecutor(0).map([Task((1,), PROBE, {"value": 1})] * 2)


def test_failures_are_retried_then_reported_never_lost(tmp_path: Path) -> None:
    tasks = [Task(("a", i), PROBE, {"value": i}) for i in range(4)]
    tasks += [Task(("b", "raises"), PROBE, {"value": 5, "fail": "raise"}),
              Task(("b", "exits"), PROBE, {"value": 6, "fail": "exit"}),
              Task(("b", "exits-once"), PROBE,
                   {"value": 7, "fail": f"exit-once:{tmp_path / 'marker'}"}),
              Task(("b", "raises-once"), PROBE,
                   {"value": 8, "fail": f"raise-once:{tmp_path / 'marker2'}"})]
    with LocalExecutor(2, retries=1) as ex:
        results = {r.key: r for r in ex.map(tasks)}
    assert len(results) == len(tasks)
    assert all(results[("a", i)].ok and results[("a", i)].attempts == 1 for i in range(4))
    raised, exited = results[("b", "raises")], results[("b", "exits")]
    assert raised.status == "failed" and raised.attempts == 2
    assert "probe 5 was asked to fail" in raised.error
    # a dead process is charged to the task it ran, and to no other
    assert exited.status == "crashed" and exited.attempts == 2
    assert "worker process died (exit code 3)" in exited.error
    assert results[("b", "exits-once")].ok and results[("b", "exits-once")].attempts == 2
    assert results[("b", "raises-once")].ok and results[("b", "raises-once")].attempts == 2
    assert exited.failure() == {"key": ["b", "exits"], "status": "crashed",
                                "params": {"value": 6, "fail": "exit"},
                                "error": exited.error, "attempts": 2, "worker": exited.worker}


# A hung task sleeps an hour: the sweep returning at all shows it was killed. The bound on the
# elapsed time is far from both (a loaded machine may be slow; an hour is never reached).
HANG_S, RETURNS_WITHIN_S = 3600, 600


def test_a_hung_task_is_killed_at_its_timeout_and_reported() -> None:
    hung = Task(("h", "sleeps"), PROBE, {"value": 9, "sleep": HANG_S})
    start = time.monotonic()
    with LocalExecutor(2, retries=2, timeout=10.0) as ex:
        results = {r.key: r for r in ex.map([*probes(3), hung])}
        # the pool goes on with a fresh process in place of the killed one
        assert all(r.ok for r in ex.map(probes(3)))
    assert time.monotonic() - start < RETURNS_WITHIN_S
    assert all(results[("p", i)].ok for i in range(3))
    record = results[("h", "sleeps")].failure()
    assert record["status"] == "timeout" and record["attempts"] == 1  # a hang is not retried
    assert record["params"] == {"value": 9, "sleep": HANG_S}  # what it ran: configuration, seed
    assert "timed out after 10 s" in record["error"]


def test_bad_executor_options_are_errors() -> None:
    with pytest.raises(ValueError, match="a timeout needs worker processes"):
        LocalExecutor(0, timeout=5)
    with pytest.raises(ValueError, match="timeout must be a positive number"):
        LocalExecutor(1, timeout=0)
    with pytest.raises(ValueError, match="retries must be >= 0, got -1"):
        LocalExecutor(1, retries=-1)


def test_cli_rejects_bad_timeout_and_retries(capsys) -> None:
    from accy.cli import main

    for bad, message in ((["--timeout", "0"], "--timeout: must be a positive number"),
                         (["--retries", "-1"], "--retries: must be >= 0, got -1")):
        with pytest.raises(SystemExit) as exit_info:
            main(["experiment", "ablation", *bad])
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert main(["experiment", "ablation", "--workers", "0", "--timeout", "5"]) == 2
    assert "--timeout needs worker processes" in capsys.readouterr().err


def test_unknown_executor_is_an_error() -> None:
    with pytest.raises(ValueError, match="valid: local, dask"):
        make_executor("ray")


# ---- Dask ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_executor():
    pytest.importorskip("distributed")
    import dask

    from accy.experiments.dask_executor import DaskExecutor

    # Dask reschedules a task whose worker died once more, then fails it (KilledWorker); the
    # executor's own retry counts that as one attempt
    with dask.config.set({"distributed.scheduler.allowed-failures": 1,
                          "distributed.logging.distributed": "critical"}):
        ex = DaskExecutor(None, workers=2, retries=1)
        yield ex
        ex.close()


def sweep_options() -> SweepOptions:
    return SweepOptions(suite="ci", programs=("attention", "embedding"), seeds=(0, 1),
                        run=False, show_progress=False)


def test_dask_failures_are_retried_then_reported(dask_executor, tmp_path: Path) -> None:
    raising = probes(3) + [Task(("q", "raises"), PROBE, {"value": 5, "fail": "raise"})]
    results = {r.key: r for r in dask_executor.map(raising)}
    assert list(results) == sorted(results, key=sort_key) and len(results) == len(raising)
    assert all(results[("p", i)].ok for i in range(3))
    assert results[("q", "raises")].status == "failed"
    assert results[("q", "raises")].attempts == 2
    assert "probe 5 was asked to fail" in results[("q", "raises")].error
    crashing = probes(3) + [
        Task(("q", "exits"), PROBE, {"value": 6, "fail": "exit"}),
        Task(("q", "exits-once"), PROBE, {"value": 7, "fail": f"exit-once:{tmp_path / 'm'}"})]
    results = {r.key: r for r in dask_executor.map(crashing)}
    assert len(results) == len(crashing)
    assert results[("q", "exits")].status == "crashed"
    assert "worker lost: KilledWorker" in results[("q", "exits")].error
    assert results[("q", "exits-once")].ok


def test_dask_hung_task_is_cancelled_at_its_timeout_and_reported(dask_executor) -> None:
    hung = Task(("h", "sleeps"), PROBE, {"value": 9, "sleep": HANG_S})
    dask_executor.timeout = 10.0
    dask_executor.restart_s = 10.0  # (a nanny still settling an earlier crash: test_executor)
    try:
        start = time.monotonic()
        results = {r.key: r for r in dask_executor.map([*probes(3), hung])}
        assert time.monotonic() - start < RETURNS_WITHIN_S
        # the restarted worker takes tasks again
        assert all(r.ok for r in dask_executor.map(probes(4)))
    finally:
        dask_executor.timeout = None
        dask_executor.restart_s = type(dask_executor).restart_s
    assert all(results[("p", i)].ok for i in range(3))
    record = results[("h", "sleeps")].failure()
    # the hung worker was restarted: a new process at a new address
    assert record["worker"] not in dask_executor.client.scheduler_info()["workers"]
    assert record["status"] == "timeout" and record["attempts"] == 1
    assert record["params"] == {"value": 9, "sleep": HANG_S}
    assert "timed out after 10 s" in record["error"]


def test_same_sweep_on_dask_gives_the_same_results(dask_executor) -> None:
    # with a (never reached) timeout, so the polling paths run too
    options = sweep_options()
    kwargs = {"rulesets": ("einsum",), "per_rule": True}
    dask_executor.timeout = 600.0
    try:
        with LocalExecutor(2, retries=0, timeout=600.0) as ex:
            local = ablation.run(options, executor=ex, **kwargs)
        remote = ablation.run(options, executor=dask_executor, **kwargs)
        assert local["failed"] == remote["failed"] == []
        assert len(local["rows"]) > 8
        assert [deterministic(r) for r in local["rows"]] == [deterministic(r)
                                                             for r in remote["rows"]]
        assert remote["executor"]["executor"] == "dask"
        assert local["executor"]["timeout"] == remote["executor"]["timeout"] == 600.0
        # and the contraction study, whose rows hold paths and costs
        small = SweepOptions(suite="ci", seeds=(0,), show_progress=False)
        with LocalExecutor(2, retries=0) as ex:
            runs = [contraction.run(small, families=("chain", "ring"), sizes=[4, 6],
                                    executor=e) for e in (ex, dask_executor)]
    finally:
        dask_executor.timeout = None
    assert [deterministic(r) for r in runs[0]["rows"]] == [deterministic(r)
                                                           for r in runs[1]["rows"]]


def test_a_task_the_pool_loses_is_charged_a_crash_not_waited_for(monkeypatch) -> None:
    # pebble can miss a worker's death when the process dies before the pool has read that its
    # task started (noxdafox/pebble#153); here it misses every death, so the future of a task
    # whose process exits stays pending forever unless the executor's watchdog notices
    from pebble.pool.process import PoolManager
    monkeypatch.setattr(PoolManager, "handle_worker_expiration", lambda self, expiration: None)
    tasks = [*probes(3), Task(("b", "exits"), PROBE, {"value": 6, "fail": "exit"})]
    with LocalExecutor(2, retries=1) as ex:
        ex.lost_after_s = 1.0
        results = {r.key: r for r in ex.map(tasks)}
        assert all(r.ok for r in ex.map(probes(2)))  # the replaced pool goes on
    assert all(results[("p", i)].ok for i in range(3))
    exited = results[("b", "exits")]
    assert exited.status == "crashed" and exited.attempts == 2
    assert "the pool lost its task" in exited.error
