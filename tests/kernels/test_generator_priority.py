"""Kernelization's generator order is generators.PRIORITY, an explicit tuple: outside
generators follow in registration order, the loop nest is the fallback, and a name in the
tuple that nothing registered is a clear error."""

from __future__ import annotations

import pytest

from accy.kernels import generators
from accy.kernels.generators import BUILT_IN, PRIORITY, Generator, ranked


def test_ranked_is_the_priority_tuple() -> None:
    assert [g.name for g in ranked()] == list(PRIORITY)
    assert set(generators.GENERATORS) == set(PRIORITY) | {"loop-nest"}
    assert len(BUILT_IN) == len(set(BUILT_IN))


def _never(group, target) -> bool:
    return False


def test_outside_generators_come_after_in_registration_order(monkeypatch) -> None:
    monkeypatch.setattr(generators, "GENERATORS", dict(generators.GENERATORS))
    for name in ("zeta", "alpha"):
        generators.register_generator(Generator(name, "test", _never, lambda *a: ()))
    assert [g.name for g in ranked()] == [*PRIORITY, "zeta", "alpha"]
    with pytest.raises(ValueError, match="'alpha' is already registered"):
        generators.register_generator(Generator("alpha", "again", _never, lambda *a: ()))


def test_a_priority_name_nothing_registered_is_an_error(monkeypatch) -> None:
    monkeypatch.setattr(generators, "PRIORITY", (*PRIORITY, "warp-specialised"))
    with pytest.raises(LookupError, match="in PRIORITY but not registered: warp-specialised"):
        ranked()


@pytest.mark.parametrize("module", BUILT_IN)
def test_every_generator_module_can_be_imported_first(module: str) -> None:
    # reduction imports flat, whose registration loaded every built-in module, rowfused among
    # them, which needs names reduction had not defined yet: ImportError in a fresh process
    import subprocess
    import sys

    code = (f"import accy.kernels.{module}\n"
            "from accy.kernels.generators import PRIORITY, ranked\n"
            "assert [g.name for g in ranked()] == list(PRIORITY)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
