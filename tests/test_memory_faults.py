"""The memory store under faults: a full disk, a killed writer, concurrent writers."""

from __future__ import annotations

import errno
import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from genutil import drain

from frontends.cli import main
from ga import GenericAgent, GenericAgentHandler
from llmcore.scripted import ScriptedClient
from memory.lint import STALE_TEMP_SECONDS, lint_store
from memory.store import MemoryStore

REPO = Path(__file__).resolve().parent.parent
TMPFS_SIZE = "2m"
WRITERS = 12
ROUNDS = 5  # appends per writer


@pytest.fixture
def tiny_disk(tmp_path):
    """A 2 MB tmpfs, mounted for the test (root only) and unmounted after it."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs",
                           str(mount)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def fill(folder: Path) -> None:
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65_536)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_reading_memory_on_a_full_disk_goes_on_and_reports_once(tiny_disk, caplog):
    agent = GenericAgent(ScriptedClient([]), home=tiny_disk)
    agent.system_prompt()  # seeds the memory, as the first task does
    handler = GenericAgentHandler(agent, agent.cwd)
    fill(tiny_disk)
    l2 = str(agent.memory.l2_path)
    for _ in range(2):
        with caplog.at_level(logging.WARNING, logger="ga.memory"):
            _, outcome = drain(handler.dispatch("file_read", {"path": l2},
                                                SimpleNamespace(content="", thinking=""), 0, 1))
        assert outcome.data.startswith("[FILE] ")
        assert "[Global Memory - L2]" in outcome.data
    warnings = [r.getMessage() for r in caplog.records if r.name == "ga.memory"]
    assert len(warnings) == 1
    assert "cannot update memory access stats" in warnings[0]
    assert "No space left on device" in warnings[0]
    assert not [p.name for p in agent.memory.dir.iterdir() if p.name.endswith(".tmp")]


def test_an_unwritable_stats_file_does_not_stop_a_read(home, caplog):
    store = MemoryStore(home)
    store.seed()
    store.stats_path.mkdir()  # whatever the cause, the stats write fails
    with caplog.at_level(logging.WARNING, logger="ga.memory"):
        store.record_access(store.l2_path)
        store.record_access(store.l2_path)
    assert [r.name for r in caplog.records].count("ga.memory") == 1
    assert "going on without them" in caplog.records[0].getMessage()


def test_access_stats_leave_no_lock_file(home):
    store = MemoryStore(home)
    store.seed()
    before = {p.name for p in store.dir.iterdir()}
    store.record_access(store.l2_path)
    assert {p.name for p in store.dir.iterdir()} - before == {"file_access_stats.json"}


def kill_a_stats_writer(home: Path) -> None:
    """Run ``record_access`` in a child that is killed (SIGKILL) just before its rename."""
    code = textwrap.dedent(f"""
        import os, signal
        from memory.store import MemoryStore
        os.replace = lambda *a, **kw: os.kill(os.getpid(), signal.SIGKILL)
        store = MemoryStore({str(home)!r})
        store.record_access(store.l2_path)
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True)
    assert done.returncode == -9, done.stderr


def test_lint_reports_and_fixes_temp_files_left_by_a_killed_writer(home, capsys):
    store = MemoryStore(home)
    store.seed()
    kill_a_stats_writer(home)
    (left,) = store.dir.glob(".file_access_stats.json.*.tmp")
    old = time.time() - STALE_TEMP_SECONDS - 1
    os.utime(left, (old, old))
    l4_left = store.l4_dir / ".index.txt.0a1b2c3d.tmp"
    l4_left.parent.mkdir(parents=True, exist_ok=True)
    l4_left.write_text("half")
    os.utime(l4_left, (old, old))
    fresh = store.dir / ".global_mem.txt.9f8e7d6c.tmp"  # a writer still at work
    fresh.write_text("in progress")
    found = [(p.path, p.fixed) for p in lint_store(store)]
    assert found == [(left, False), (l4_left, False)]
    assert main(["memory", "lint", "--fix", "--home", str(home)]) == 0
    assert "temp file left by an interrupted write" in capsys.readouterr().out
    assert not left.exists() and not l4_left.exists() and fresh.exists()
    assert lint_store(store) == []


def test_concurrent_memory_appends_from_12_processes_keep_every_entry(home):
    MemoryStore(home).seed()
    code = textwrap.dedent(f"""
        import sys
        from memory.store import MemoryStore
        store = MemoryStore({str(home)!r})
        for i in range({ROUNDS}):
            store.append("global_mem.txt", f"fact {{sys.argv[1]}}.{{i}}")
    """)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(w)], env=env)
             for w in range(WRITERS)]
    assert [p.wait() for p in procs] == [0] * WRITERS
    text = MemoryStore(home).global_mem()
    assert all(f"fact {w}.{i}\n" in text for w in range(WRITERS) for i in range(ROUNDS))
