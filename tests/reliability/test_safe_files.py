"""Private folders and atomic writes (accy.files), and the ICD vendor directory written with them:
no symbolic link is followed, no folder another user can write to is used."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from accy import files
from accy.backends.opencl import icd
from accy.files import UnsafePathError, atomic_write, private_dir

LIB = icd.NVIDIA_LIBRARY
ENTRIES = (("nvidia.icd", LIB + "\n"),)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_created_folders_are_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        made = private_dir(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(old)
    assert made == tmp_path / "a" / "b" / "c"
    assert [mode(p) for p in (made.parent.parent, made.parent, made)] == [0o700] * 3
    assert private_dir(made) == made  # an existing safe folder is accepted as it is


def test_symlinked_folder_is_refused(tmp_path: Path) -> None:
    real = private_dir(tmp_path / "real")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(UnsafePathError, match="symbolic link"):
        private_dir(tmp_path / "link")


@pytest.mark.parametrize("bits", [0o770, 0o707, 0o777])
def test_folder_writable_by_others_is_refused(tmp_path: Path, bits: int) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(bits)
    with pytest.raises(UnsafePathError, match="writable by other users"):
        private_dir(folder)
    assert mode(folder) == bits  # refused, not silently repaired


def test_foreign_owned_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = private_dir(tmp_path / "theirs")
    monkeypatch.setattr(os, "getuid", lambda: os.lstat(folder).st_uid + 1)  # someone else's
    with pytest.raises(UnsafePathError, match="belongs to uid"):
        private_dir(folder)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs root")
def test_folder_chowned_to_another_user_is_refused(tmp_path: Path) -> None:
    folder = private_dir(tmp_path / "theirs")
    os.chown(folder, 4321, 4321)
    with pytest.raises(UnsafePathError, match="uid 4321"):
        private_dir(folder)


def test_a_file_is_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(UnsafePathError, match="not a folder"):
        private_dir(tmp_path / "f")


def test_atomic_write_str_and_bytes_with_mode(tmp_path: Path) -> None:
    assert atomic_write(tmp_path / "t", "héllo\n") == tmp_path / "t"
    assert (tmp_path / "t").read_text() == "héllo\n" and mode(tmp_path / "t") == 0o600
    atomic_write(tmp_path / "b", b"\x00\x01", mode=0o644)
    assert (tmp_path / "b").read_bytes() == b"\x00\x01" and mode(tmp_path / "b") == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "t"]  # no temporaries left


def test_link_planted_at_the_target_is_replaced_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    folder = private_dir(tmp_path / "d")
    (folder / "out").symlink_to(victim)
    atomic_write(folder / "out", "new")
    assert victim.read_text() == "precious"
    assert not (folder / "out").is_symlink() and (folder / "out").read_text() == "new"


def test_link_planted_at_the_old_predictable_temp_name_is_not_followed(tmp_path: Path) -> None:
    """The writer used to write ``.<name>.<pid>.tmp``; now the name is mkstemp's."""
    victim = tmp_path / "victim"
    victim.write_text("precious")
    folder = private_dir(tmp_path / "d")
    planted = folder / f".nvidia.icd.{os.getpid()}.tmp"
    planted.symlink_to(victim)
    atomic_write(folder / "nvidia.icd", "lib\n")
    assert victim.read_text() == "precious" and planted.is_symlink()
    assert (folder / "nvidia.icd").read_text() == "lib\n"


def test_write_is_atomic_and_synced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f"
    target.write_text("old")
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))

    def crash(src: object, dst: object) -> None:
        raise OSError("disk gone")

    with monkeypatch.context() as m:
        m.setattr(os, "replace", crash)
        with pytest.raises(OSError, match="disk gone"):
            atomic_write(target, "new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f"]
    assert synced  # the data was flushed to disk before the rename
    atomic_write(target, "new")
    assert target.read_text() == "new"


def test_private_dir_rejects_an_open_mode() -> None:
    with pytest.raises(ValueError):
        files.private_dir("/nonexistent/x", mode=0o777)


# ---- the ICD vendor directory ---------------------------------------------------------------


def test_vendor_dir_folders_are_private(tmp_path: Path) -> None:
    folder = icd.write_vendor_dir(ENTRIES, tmp_path / "cache")
    assert [mode(p) for p in (tmp_path / "cache", folder.parent, folder)] == [0o700] * 3
    assert (folder / "nvidia.icd").read_text() == LIB + "\n"


def test_symlinked_vendor_digest_dir_is_never_written_through(tmp_path: Path) -> None:
    """Explicit root: a clear refusal, nothing written, OCL_ICD_VENDORS left unset."""
    elsewhere = private_dir(tmp_path / "attacker")
    folder = icd.write_vendor_dir(ENTRIES, tmp_path / "cache")
    for p in folder.iterdir():
        p.unlink()
    folder.rmdir()
    folder.symlink_to(elsewhere)
    env: dict[str, str] = {}
    d = icd.register_nvidia_icd(env, tmp_path / "none", lambda: LIB, root=tmp_path / "cache")
    assert not d.register and "symbolic link" in d.reason
    assert icd.VENDORS_ENV not in env and list(elsewhere.iterdir()) == []


def test_unsafe_cache_falls_back_to_a_safe_temp_folder(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A symlinked cache folder: the per-user temp folder is used instead, the link is not."""
    elsewhere = private_dir(tmp_path / "attacker")
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "accy").symlink_to(elsewhere)
    monkeypatch.setattr(icd, "fallback_root", lambda: tmp_path / "tmp" / "accy-me")
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    with pytest.warns(icd.IcdRegistrationWarning):
        d = icd.register_nvidia_icd(env, tmp_path / "none", lambda: LIB)
    assert d.register and Path(env[icd.VENDORS_ENV]).is_relative_to(tmp_path / "tmp" / "accy-me")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("problem", ["group-writable", "foreign"])
def test_unsafe_fallback_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           problem: str) -> None:
    """Neither the cache (a link) nor the temp folder (open, or someone else's) is safe:
    nothing is registered, so OCL_ICD_VENDORS never points into a folder others control."""
    (tmp_path / "xdg").mkdir()
    (tmp_path / "xdg" / "accy").symlink_to(tmp_path)
    fallback = tmp_path / "accy-0"
    fallback.mkdir()
    if problem == "group-writable":
        fallback.chmod(0o775)
    else:
        uid = os.lstat(fallback).st_uid
        monkeypatch.setattr(os, "getuid", lambda: uid + 1)
    monkeypatch.setattr(icd, "fallback_root", lambda: fallback)
    env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
    d = icd.register_nvidia_icd(env, tmp_path / "none", lambda: LIB)
    assert not d.register and "could not write a vendor directory" in d.reason
    assert str(fallback) in d.reason and icd.VENDORS_ENV not in env
    assert list(fallback.iterdir()) == []


def test_existing_file_is_kept_only_when_it_is_a_regular_file_with_the_text(
        tmp_path: Path) -> None:
    folder = icd.write_vendor_dir(ENTRIES, tmp_path)
    victim = tmp_path / "victim"
    victim.write_text(LIB + "\n")  # the same text, but behind a link: replaced by a real file
    (folder / "nvidia.icd").unlink()
    (folder / "nvidia.icd").symlink_to(victim)
    assert icd.write_vendor_dir(ENTRIES, tmp_path) == folder
    assert not (folder / "nvidia.icd").is_symlink()
    assert (folder / "nvidia.icd").read_text() == LIB + "\n"


def test_cache_root_ignores_a_relative_xdg_cache_home() -> None:
    home = Path(os.path.expanduser("~"))
    assert icd.cache_root({"XDG_CACHE_HOME": "rel/cache"}) == home / ".cache" / "accy"
    assert icd.cache_root({}) == home / ".cache" / "accy"
