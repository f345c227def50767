"""``atomic_open``: what replaces a file, and what it keeps of the old one."""

from __future__ import annotations

import os

import pytest

from trajval_ops.atomic import atomic_open


def test_a_symlinked_output_is_written_through_its_link(tmp_path):
    """The link was replaced by a regular file, its target left stale: a pool.jsonl linked to
    pool_v3.jsonl read new at one name and old at the other."""
    target = tmp_path / "pool_v3.jsonl"
    target.write_text("old\n")
    link = tmp_path / "pool.jsonl"
    link.symlink_to(target.name)
    with atomic_open(link) as out:
        out.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n" and link.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool.jsonl", "pool_v3.jsonl"]  # no temporary left


def test_an_existing_file_keeps_its_permissions_and_a_new_one_gets_the_usual(tmp_path):
    private = tmp_path / "private.json"
    private.write_text("{}")
    private.chmod(0o600)
    with atomic_open(private) as out:
        out.write("{}\n")
    assert private.stat().st_mode & 0o777 == 0o600
    umask = os.umask(0)
    os.umask(umask)
    with atomic_open(tmp_path / "new.json") as out:
        out.write("{}\n")
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("mode", ["a", "r", "x", "w+"])
def test_a_mode_that_would_not_write_a_whole_file_is_refused(tmp_path, mode):
    """Mode 'a' silently replaced the old content with only the appended text."""
    kept = tmp_path / "kept.txt"
    kept.write_text("KEEP ME\n")
    with pytest.raises(ValueError, match="mode 'w' or 'wb'"):
        with atomic_open(kept, mode):
            pass
    assert kept.read_text() == "KEEP ME\n"


def test_the_new_file_reaches_the_disk_before_it_replaces_the_old_one(tmp_path, monkeypatch):
    """A power loss after the rename must not leave an empty file: its data is synced first,
    then the folder's entry."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", "folder" if os.path.isdir(f"/proc/self/fd/{fd}") else os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    with atomic_open(tmp_path / "out.json") as handle:
        handle.write("{}")
    (kind, synced), (_, replaced), last = events
    assert (kind, synced) == ("fsync", replaced) and last == ("fsync", "folder")
    assert (tmp_path / "out.json").read_text() == "{}"
