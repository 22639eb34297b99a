"""Cleans up after a launched browser when the runtime that launched it is gone.

Run as ``python -I -S watcher.py RUN_DIR`` with a pipe on stdin. The runtime writes the
browser's process group id as one line, then keeps the pipe open. End of file on stdin
means the runtime exited (or was killed, even with SIGKILL): the watcher kills the
browser's process group, waits until it is gone and removes RUN_DIR (temp profile,
the browser's TMPDIR and its log). It imports nothing of the package, so it starts fast.
"""

import os
import shutil
import signal
import sys
import time

GONE_WAIT_SECONDS = 5.0
GONE_POLL_SECONDS = 0.02


class Stop(Exception):
    pass


def _stop(signum, frame):
    raise Stop()


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies waiting to be reaped by
    init are dead: they run no code and hold no files)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue  # it ended while we looked
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return not os.path.isdir("/proc")


def kill_group(pgid: int) -> None:
    """SIGKILL process group ``pgid`` and wait (bounded) until none of it runs."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
    deadline = time.monotonic() + GONE_WAIT_SECONDS
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(GONE_POLL_SECONDS)


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    run_dir = sys.argv[1]
    pgid = 0
    try:
        line = sys.stdin.buffer.readline().strip()
        pgid = int(line) if line.isdigit() else 0
        sys.stdin.buffer.read()
    except Stop:
        sys.stderr.write("ga browser watcher: stopped; cleaning up\n")
    if pgid > 1:
        kill_group(pgid)
    shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
