"""Hypothesis profiles for the whole suite, chosen by ``HYPOTHESIS_PROFILE``.

* ``ci``: derandomized (the same examples every run), bounded so that tests/differential takes
  well under five minutes on a 2-core machine; no example database.
* ``dev`` (default without ``CI`` set): fewer examples, random, failures replayed from the
  example database in ``~/.cache/accy/hypothesis`` (outside the repository).
* ``fuzz``: long runs (``HYPOTHESIS_PROFILE=fuzz pytest tests/differential``).

``deadline=None`` everywhere: examples that compile OpenCL kernels vary a lot in time.
Tests scale their example counts from the profile's ``max_examples`` (see
``tests/differential/conftest.py``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

_DATABASE = DirectoryBasedExampleDatabase(Path.home() / ".cache" / "accy" / "hypothesis")
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("ci", derandomize=True, database=None, deadline=None,
                          max_examples=100, print_blob=True, suppress_health_check=_SLOW)
settings.register_profile("dev", deadline=None, max_examples=25, database=_DATABASE,
                          suppress_health_check=_SLOW)
settings.register_profile("fuzz", deadline=None, max_examples=5000, database=_DATABASE,
                          suppress_health_check=_SLOW)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE")
                      or ("ci" if os.environ.get("CI") else "dev"))

# `make test` runs the suite in pytest-xdist workers, one per core. PoCL's kernel cache is not
# safe for processes compiling the same program at once (accy/backends/opencl/build_cache.py):
# each worker keeps its own, beside the default one (set before PoCL is first loaded).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _WORKER:
    _POCL_CACHE = os.environ.get("POCL_CACHE_DIR") or str(Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pocl" / "kcache")
    os.environ["POCL_CACHE_DIR"] = f"{_POCL_CACHE}-{_WORKER}"


@pytest.fixture(scope="session", autouse=True)
def _private_build_cache(tmp_path_factory: pytest.TempPathFactory):
    """The on-disk build cache of the whole run (and of the processes it starts) is a fresh
    temporary folder: tests never read or fill the user's ``~/.cache/accy/kernels``. Tests of
    the cache itself give runtimes their own ``cache_dir``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCY_BUILD_CACHE_DIR", str(tmp_path_factory.mktemp("accy-build-cache")))
        yield


@pytest.fixture(scope="session")
def device():
    """The default OpenCL runtime (``ACCY_DEVICE`` or PoCL); the test is skipped when there is
    none (pyopencl missing, or no usable device)."""
    try:
        from accy.backends.opencl.runtime import select_device
        from accy.errors import DeviceError
    except ImportError as exc:  # pyopencl missing
        pytest.skip(f"no OpenCL: {exc}")
    try:
        return select_device()
    except DeviceError as exc:
        pytest.skip(f"no usable OpenCL device: {exc}")


@functools.cache
def _experiment_script(name: str):
    """``experiments/<name>.py`` imported as module ``name`` (once per session)."""
    path = Path(__file__).resolve().parents[1] / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def experiment_script():
    """Import a script of ``experiments/`` by name: ``experiment_script("bench_paths")``."""
    return _experiment_script


# the differential suite's count of programs checked per check (diff_support.TALLY), printed
# at the end of the run; under pytest-xdist each worker hands its count to the controller
_WORKERS_TALLY: Counter[str] = Counter()


def _tally() -> Counter[str]:
    support = sys.modules.get("diff_support")
    return Counter(support.TALLY) if support is not None else Counter()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if hasattr(session.config, "workeroutput"):  # a pytest-xdist worker
        session.config.workeroutput["differential_tally"] = dict(_tally())


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # the pytest-xdist controller
    _WORKERS_TALLY.update(getattr(node, "workeroutput", {}).get("differential_tally", {}))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tally = _tally() + _WORKERS_TALLY
    if tally:
        terminalreporter.section("differential programs")
        for key, count in sorted(tally.items()):
            terminalreporter.write_line(f"{count:6d}  {key}")
