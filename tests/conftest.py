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
