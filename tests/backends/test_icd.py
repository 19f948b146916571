"""Registering an NVIDIA OpenCL driver that has no ICD file: the decision, with no NVIDIA here."""

from __future__ import annotations

import ctypes
import os
import warnings
from pathlib import Path

import pytest

from accy.backends.opencl import icd

LIB = icd.NVIDIA_LIBRARY


def never() -> str | None:
    raise AssertionError("the library must not be looked for in this case")


def vendors(tmp_path: Path, **files: str) -> Path:
    folder = tmp_path / "vendors"
    folder.mkdir()
    for name, text in files.items():
        (folder / f"{name}.icd").write_text(text)
    return folder


def test_user_setting_is_never_overridden(tmp_path: Path) -> None:
    env = {icd.VENDORS_ENV: "/opt/my/vendors"}
    d = icd.decide(env, vendors(tmp_path), never)
    assert not d.register and "set by the user" in d.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not icd.register_nvidia_icd(env, tmp_path / "vendors", never).register
    assert env == {icd.VENDORS_ENV: "/opt/my/vendors"}


@pytest.mark.parametrize("text", [LIB + "\n", "/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1",
                                  "libnvidia-opencl.so.580.159.03\n"])
def test_existing_nvidia_icd_file_means_nothing_to_do(tmp_path: Path, text: str) -> None:
    tried: list[str] = []
    d = icd.decide({}, vendors(tmp_path, pocl="libpocl.so.2\n", nv=text), never,
                   lambda name: tried.append(name) or True)
    assert not d.register and "nv.icd names the NVIDIA driver" in d.reason
    assert tried == [text.strip()]  # only the NVIDIA library is tried


def test_icd_filenames_naming_nvidia_does_not_count(tmp_path: Path) -> None:
    """The H200 case: OCL_ICD_FILENAMES names libraries that load, which pyopencl's ICD loader
    ignores: only a vendor directory makes the platform appear."""
    env = {"OCL_ICD_FILENAMES": "libpocl.so.2:libnvidia-opencl.so.1"}
    d = icd.decide(env, vendors(tmp_path, pocl="libpocl.so.2\n"), lambda: WORKING,
                   lambda name: True)
    assert d.register and d.entries == (("pocl.icd", "libpocl.so.2\n"),
                                        ("nvidia.icd", WORKING + "\n"))
    assert "OCL_ICD_FILENAMES names it, but pyopencl's ICD loader ignores" in d.reason


BROKEN = "/usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.550.54.15"
WORKING = f"/usr/lib64/{LIB}"


def test_icd_filenames_naming_a_library_that_does_not_load_is_registered(
        tmp_path: Path) -> None:
    """The H200 case: OCL_ICD_FILENAMES names a driver path that is not there."""
    env = {"OCL_ICD_FILENAMES": BROKEN}
    system = vendors(tmp_path, pocl="libpocl.so.2\n")
    with pytest.warns(icd.IcdRegistrationWarning) as caught:
        d = icd.register_nvidia_icd(env, system, lambda: WORKING, root=tmp_path / "cache",
                                    loads=lambda name: name == WORKING)
    assert d.register and d.entries[-1] == ("nvidia.icd", WORKING + "\n")
    message = str(caught[0].message)
    assert "OCL_ICD_FILENAMES names it" in message
    assert WORKING in message and f"OCL_ICD_VENDORS={env[icd.VENDORS_ENV]}" in message
    assert (Path(env[icd.VENDORS_ENV]) / "nvidia.icd").read_text() == WORKING + "\n"
    assert env["OCL_ICD_FILENAMES"] == BROKEN  # left alone: loaders skip what fails to load


def test_icd_file_naming_a_library_that_does_not_load_is_registered(tmp_path: Path) -> None:
    system = vendors(tmp_path, nvidia=BROKEN + "\n")
    d = icd.decide({}, system, lambda: WORKING, lambda name: False)
    assert d.register and d.entries == (("nvidia.icd", BROKEN + "\n"),
                                        ("accy-nvidia.icd", WORKING + "\n"))
    assert f"{system / 'nvidia.icd'} ({BROKEN}), which does not load" in d.reason


def test_broken_names_and_no_working_copy_says_both(tmp_path: Path) -> None:
    env = {"OCL_ICD_FILENAMES": BROKEN}
    d = icd.decide(env, vendors(tmp_path, nv=BROKEN), lambda: None, lambda name: False)
    assert not d.register and "not installed" in d.reason
    assert f"({BROKEN}), which does not load" in d.reason


def test_no_library_means_nothing_to_do(tmp_path: Path) -> None:
    d = icd.decide({}, vendors(tmp_path, pocl="libpocl.so.2\n"), lambda: None)
    assert not d.register and "not installed" in d.reason


def test_loadable_library_without_icd_is_registered(tmp_path: Path) -> None:
    folder = vendors(tmp_path, pocl="libpocl.so.2\n", intel="/opt/intel/libigdrcl.so\n")
    d = icd.decide({}, folder, lambda: LIB)
    assert d.register
    assert d.entries == (("intel.icd", "/opt/intel/libigdrcl.so\n"),
                         ("pocl.icd", "libpocl.so.2\n"), ("nvidia.icd", LIB + "\n"))


def test_registration_keeps_a_foreign_nvidia_icd_name(tmp_path: Path) -> None:
    d = icd.decide({}, vendors(tmp_path, nvidia="libsomething-else.so\n"), lambda: LIB)
    assert d.register and d.entries[-1] == ("accy-nvidia.icd", LIB + "\n")
    assert ("nvidia.icd", "libsomething-else.so\n") in d.entries


def test_missing_vendor_dir_registers_nvidia_alone(tmp_path: Path) -> None:
    d = icd.decide({}, tmp_path / "absent", lambda: LIB)
    assert d.register and d.entries == (("nvidia.icd", LIB + "\n"),)


def test_opencl_vendor_path_is_the_system_dir(tmp_path: Path) -> None:
    folder = vendors(tmp_path, nv=LIB)
    assert icd.system_vendor_dir({"OPENCL_VENDOR_PATH": str(folder)}) == folder
    assert icd.system_vendor_dir({}) == icd.SYSTEM_VENDORS


def test_register_writes_vendor_dir_sets_env_and_warns_once(tmp_path: Path) -> None:
    system = vendors(tmp_path, pocl="libpocl.so.2\n")
    env: dict[str, str] = {}
    with pytest.warns(icd.IcdRegistrationWarning, match="OCL_ICD_VENDORS=") as caught:
        d = icd.register_nvidia_icd(env, system, lambda: LIB, root=tmp_path / "cache")
    assert d.register and len(caught) == 1
    message = str(caught[0].message)
    assert LIB in message and str(system) in message and "nvidia.icd" in message
    made = Path(env[icd.VENDORS_ENV])
    assert made.is_relative_to(tmp_path / "cache")
    assert sorted(p.name for p in made.iterdir()) == ["nvidia.icd", "pocl.icd"]
    assert (made / "nvidia.icd").read_text() == LIB + "\n"
    assert (made / "pocl.icd").read_text() == "libpocl.so.2\n"
    assert sorted(p.name for p in system.iterdir()) == ["pocl.icd"]  # system dir untouched
    with warnings.catch_warnings():  # now the variable is set: nothing more, no warning
        warnings.simplefilter("error")
        again = icd.register_nvidia_icd(env, system, never, root=tmp_path / "cache")
    assert not again.register and env[icd.VENDORS_ENV] == str(made)


def test_vendor_dir_is_shared_by_equal_entries(tmp_path: Path) -> None:
    entries = (("pocl.icd", "libpocl.so.2\n"), ("nvidia.icd", LIB + "\n"))
    first = icd.write_vendor_dir(entries, tmp_path)
    assert icd.write_vendor_dir(entries, tmp_path) == first
    other = icd.write_vendor_dir(entries[1:], tmp_path)
    assert other != first and [p.name for p in other.iterdir()] == ["nvidia.icd"]


def test_cache_root_follows_xdg(tmp_path: Path) -> None:
    assert icd.cache_root({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "accy"
    assert not (tmp_path / "accy").exists()  # made (private) only when something is written
    assert icd.fallback_root().name == f"accy-{os.getuid()}"


LDCONFIG = f"""\
1200 libs found in cache `/etc/ld.so.cache'
\tlibnvidia-opencl.so.1 (libc6) => /usr/lib/i386-linux-gnu/{LIB}
\tlibnvidia-opencl.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/{LIB}
\tlibnvidia-opencl.so (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so
\tlibOpenCL.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libOpenCL.so.1
"""


def test_ldconfig_listing_is_parsed_for_the_exact_name() -> None:
    assert icd.ldconfig_paths(LIB, LDCONFIG) == [f"/usr/lib/i386-linux-gnu/{LIB}",
                                                 f"/usr/lib/x86_64-linux-gnu/{LIB}"]
    assert icd.ldconfig_paths(LIB, "") == []


def test_library_found_where_the_dynamic_linker_looks() -> None:
    """LD_LIBRARY_PATH, then the linker cache (a 32-bit copy fails to load), by absolute path."""
    tried: list[str] = []

    def loads(name: str) -> bool:
        tried.append(name)
        return name == f"/usr/lib/x86_64-linux-gnu/{LIB}"

    env = {"LD_LIBRARY_PATH": "/opt/a::/opt/b"}
    found = icd.find_nvidia_library(env, loads, lambda p: p != f"/opt/b/{LIB}", lambda: LDCONFIG)
    assert found == f"/usr/lib/x86_64-linux-gnu/{LIB}"
    assert tried == [f"/opt/a/{LIB}", f"/usr/lib/i386-linux-gnu/{LIB}", found]


def test_library_found_in_driver_folders_off_the_search_path() -> None:
    mounted = f"/usr/local/nvidia/lib64/{LIB}"
    assert icd.find_nvidia_library({}, lambda name: name == mounted, lambda p: True,
                                   lambda: "") == mounted


def test_bare_name_only_when_no_path_has_a_loading_copy() -> None:
    assert icd.find_nvidia_library({}, lambda name: name == LIB, lambda p: False,
                                   lambda: LDCONFIG) == LIB
    assert icd.find_nvidia_library({}, lambda name: False, lambda p: True, lambda: LDCONFIG) is None


def test_ldconfig_runs_here() -> None:
    listing = icd._ldconfig_listing()  # the real one: text, or "" where there is no ldconfig
    assert isinstance(listing, str)
    assert all(os.path.isabs(p) for p in icd.ldconfig_paths("libc.so.6", listing))


def test_registered_path_is_what_the_icd_file_names(tmp_path: Path) -> None:
    mounted = f"/usr/local/nvidia/lib64/{LIB}"
    env: dict[str, str] = {}
    with pytest.warns(icd.IcdRegistrationWarning, match=f"echo {mounted} >"):
        d = icd.register_nvidia_icd(env, tmp_path / "none", lambda: mounted, root=tmp_path)
    assert d.entries == (("nvidia.icd", mounted + "\n"),)
    assert (Path(env[icd.VENDORS_ENV]) / "nvidia.icd").read_text() == mounted + "\n"


def test_dlopen_failure_means_not_loadable(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", failing)
    assert icd.find_nvidia_library({"LD_LIBRARY_PATH": ""}, exists=lambda p: True,
                                   listing=lambda: LDCONFIG) is None


def test_registration_finds_the_library_by_itself(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """No injected locator: the library found through ldconfig (OCL_ICD_FILENAMES ignored)."""
    (tmp_path / "lib").mkdir()
    good = str(tmp_path / "lib" / LIB)
    Path(good).write_text("")
    opened: list[str] = []

    def cdll(name: str) -> object:
        opened.append(name)
        if name != good:
            raise OSError(f"{name}: cannot open shared object file")
        return object()

    monkeypatch.setattr(ctypes, "CDLL", cdll)
    monkeypatch.setattr(icd, "_ldconfig_listing",
                        lambda: LDCONFIG.replace(f"/usr/lib/x86_64-linux-gnu/{LIB}", good))
    env = {"OCL_ICD_FILENAMES": BROKEN}
    with pytest.warns(icd.IcdRegistrationWarning, match=f"echo {good} >"):
        d = icd.register_nvidia_icd(env, tmp_path / "none", root=tmp_path / "cache")
    assert d.register and d.entries == (("nvidia.icd", good + "\n"),)
    assert BROKEN not in opened and opened[-1] == good  # the variable is not tried


def test_runtime_registers_once_before_the_first_platform_query(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyopencl")
    from accy.backends.opencl import runtime as rt

    calls: list[str] = []
    monkeypatch.setattr(rt, "_ICD_CHECKED", False)
    monkeypatch.setattr(rt, "register_nvidia_icd", lambda: calls.append("icd"))
    monkeypatch.setattr(rt.cl, "get_platforms", lambda: calls.append("platforms") or [])
    assert rt._platforms() == [] and rt._platforms() == []
    assert calls == ["icd", "platforms", "platforms"]


def test_no_nvidia_device_error_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyopencl")
    from accy.backends.opencl import runtime as rt

    decision = icd.IcdDecision(False, f"{LIB} is not installed (no copy loads)")
    monkeypatch.setattr(rt, "_ICD_DECISION", decision)
    assert decision.reason in rt._no_match_message("nvidia", [])
    assert decision.reason not in rt._no_match_message("pocl", [])
