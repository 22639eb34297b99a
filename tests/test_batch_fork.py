"""The local pool's workers are forked from one warm process (``frontends.batch_fork``).

Real processes throughout: the forker imports the runtime once, each worker is its child,
leads its own session tied to this runtime, and its exit status reaches the pool.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest

from frontends.batch_fork import CAN_FORK, LOST, Starter
from frontends.batch_pool import PRELOAD
from tools.procs import tied_groups

EXIT_SECONDS = 30.0  # sanity bound: a worker at the end of its input exits

pytestmark = pytest.mark.skipif(not (CAN_FORK and Path("/proc/self/stat").exists()),
                                reason="forks, and reads parents from /proc (Linux)")

ENTRY = "frontends.batch_pool:worker_main"
HELLO = {"type": "hello", "common": {}, "rpm": False}


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def starter(tmp_path):
    with open(tmp_path / "batch.log", "ab") as log:
        made = Starter(ENTRY, list(PRELOAD), log)
        yield made
        made.close()


def greet(worker) -> None:
    worker.stdin.write(json.dumps(HELLO).encode() + b"\n")
    worker.stdin.flush()


def test_workers_are_children_of_one_forker_each_leading_a_tied_session(starter):
    first, second = starter.start(), starter.start()
    forker = starter.forker.pid
    assert parent_of(first.pid) == parent_of(second.pid) == forker != os.getpid()
    for worker in (first, second):
        assert os.getsid(worker.pid) == worker.pid  # Ctrl-C at a terminal reaches the driver only
        assert worker.pid in tied_groups()  # SIGKILL of the driver ends it
        greet(worker)
        worker.stdin.close()  # the end of its input: an idle worker exits
        assert worker.wait(EXIT_SECONDS) == 0


def test_a_killed_worker_reports_the_signal_that_ended_it(starter):
    worker = starter.start()
    greet(worker)
    os.kill(worker.pid, signal.SIGKILL)
    assert worker.wait(EXIT_SECONDS) == -signal.SIGKILL
    assert worker.stdout.read() == b""  # its end of the protocol is closed
    assert starter.forker.poll() is None  # the forker goes on for the next worker
    again = starter.start()
    greet(again)
    again.stdin.close()
    assert again.wait(EXIT_SECONDS) == 0


def test_a_forker_that_cannot_start_leaves_each_worker_to_start_on_its_own(tmp_path, caplog):
    with open(tmp_path / "batch.log", "ab") as log:
        starter = Starter(ENTRY, [*PRELOAD, "no_such_module_for_the_forker"], log)
        with caplog.at_level(logging.WARNING, logger="ga.batch"):
            worker = starter.start()
        try:
            assert parent_of(worker.pid) == os.getpid()  # spawned by the driver itself
            assert "each worker starts on its own" in caplog.text
            greet(worker)
            worker.stdin.close()
            assert worker.wait(EXIT_SECONDS) == 0
        finally:
            starter.close()
    assert "no_such_module_for_the_forker" in (tmp_path / "batch.log").read_text()


def test_a_forker_that_dies_leaves_its_workers_running_and_is_replaced(starter):
    worker = starter.start()
    first = starter.forker
    first.kill()
    first.wait()
    greet(worker)  # the worker is healthy: it still serves the driver
    assert alive(worker.pid)
    again = starter.start()
    assert starter.forker.pid != first.pid and parent_of(again.pid) == starter.forker.pid
    greet(again)
    for each in (worker, again):
        each.stdin.close()
    assert again.wait(EXIT_SECONDS) == 0
    assert worker.wait(EXIT_SECONDS) == LOST  # seen to end; its status went with the forker
