"""Folders a runtime owns outside its temp dir (``procs.owned_dir``) go with it."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tools import procs


def aged(path: Path) -> Path:
    old = time.time() - 2 * procs.STALE_GRACE_SECONDS
    os.utime(path, (old, old))
    return path


def test_owned_folders_of_gone_runtimes_are_swept_and_live_ones_kept(tmp_path):
    mine = procs.owned_dir(tmp_path, "x-")
    assert (mine / procs.OWNER_FILE).read_text() == str(procs.runtime_dir())
    gone = tmp_path / "x-gone"
    gone.mkdir()
    (gone / procs.OWNER_FILE).write_text(str(tmp_path / "ga-run-1-nobody"))
    unowned = tmp_path / "x-unowned"
    unowned.mkdir()
    fresh = tmp_path / "x-fresh"  # being made right now: its owner file is on its way
    fresh.mkdir()
    other = tmp_path / "y-other"
    other.mkdir()
    for path in (mine, gone, unowned, other):
        aged(path)
    procs.sweep_owned(tmp_path, "x-")
    assert mine.is_dir() and fresh.is_dir() and other.is_dir()
    assert not gone.exists() and not unowned.exists()


def test_a_stale_runtime_dir_takes_its_owned_folders_along(tmp_path):
    stale = tmp_path / f"{procs.DIR_PREFIX}1-stale"
    (stale / procs.OWNED_DIR).mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / procs.OWNER_FILE).write_text(str(stale))
    (stale / procs.OWNED_DIR / "elsewhere").write_text(str(outside))
    not_its = tmp_path / "not-its"  # names another owner: never removed on this word alone
    not_its.mkdir()
    (not_its / procs.OWNER_FILE).write_text(str(tmp_path / "someone-else"))
    (stale / procs.OWNED_DIR / "not-its").write_text(str(not_its))
    aged(stale)
    procs.sweep_stale(tmp_path)
    assert not stale.exists() and not outside.exists() and not_its.is_dir()
