"""code_run: real child processes; streaming, truncation, decoding, timeouts, process groups."""

from __future__ import annotations

import os
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest
from genutil import drain

from tools import ToolError
from tools.code_run import MAX_LIVE_CHARS, code_run, last_code_block

GONE_WAIT_SECONDS = 10  # sanity bound while waiting for a killed process to disappear


run = drain  # (live chunks, result dict)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    if stat.exists():  # a zombie awaiting a reaper is dead too
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _wait_gone(pid: int) -> bool:
    deadline = time.monotonic() + GONE_WAIT_SECONDS
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _read_pid(path: Path) -> int:
    deadline = time.monotonic() + GONE_WAIT_SECONDS
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError("child never wrote its pid")


GRANDCHILD = """
import subprocess, sys, time
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open({pidfile!r}, "w").write(str(p.pid))
print("started", flush=True)
time.sleep(300)
"""


def test_python_run_merges_stderr():
    chunks, result = run(code_run("import sys\nprint('out')\nprint('err', file=sys.stderr)"))
    assert result["status"] == "success"
    assert result["exit_code"] == 0
    assert "out" in result["stdout"] and "err" in result["stdout"]
    assert "out" in "".join(chunks)


def test_bash_run_in_cwd(tmp_path):
    _, result = run(code_run("echo hi from $(basename $PWD)", type="bash", cwd=tmp_path))
    assert result["status"] == "success"
    assert result["stdout"] == f"hi from {tmp_path.name}\n"


def test_nonzero_exit_is_error():
    _, result = run(code_run("import sys; print('bye'); sys.exit(3)"))
    assert result["status"] == "error"
    assert result["exit_code"] == 3
    assert "bye" in result["stdout"]


def test_unknown_type_and_powershell_off_windows():
    with pytest.raises(ToolError, match="unknown code type"):
        run(code_run("x", type="cobol"))
    if os.name != "nt":
        with pytest.raises(ToolError, match="Windows"):
            run(code_run("Get-Date", type="powershell"))


def test_output_streams_live(tmp_path):
    go = tmp_path / "go"
    code = (
        "import os, time\nprint('ready')\n"
        f"for _ in range(200):\n    if os.path.exists({str(go)!r}):\n        break\n"
        "    time.sleep(0.05)\n"
        f"print('done' if os.path.exists({str(go)!r}) else 'gave up')\n"
    )
    gen = code_run(code, timeout=30)
    first = next(gen)
    assert "ready" in first
    go.touch()
    chunks, result = run(gen)
    assert "done" in result["stdout"]
    assert "gave up" not in result["stdout"]


def test_undecodable_and_split_multibyte_output():
    code = (
        "import sys, time, os\n"
        "sys.stdout.buffer.write(b'A\\xff\\xfeB'); sys.stdout.flush()\n"
        "e = 'é'.encode()\n"
        "sys.stdout.buffer.write(e[:1]); sys.stdout.flush(); time.sleep(0.2)\n"
        "sys.stdout.buffer.write(e[1:] + b'Z'); sys.stdout.flush()\n"
        "sys.stdout.buffer.write(os.urandom(20000)); sys.stdout.flush()\n"
    )
    chunks, result = run(code_run(code))
    assert result["status"] == "success"
    assert result["stdout"].startswith("A\ufffd\ufffdBéZ")
    assert "".join(chunks).startswith("A\ufffd\ufffdBéZ")


def test_ten_megabytes_kept_bounded():
    code = "import sys\nsys.stdout.write('HEAD' + 'x' * 10_000_000 + 'TAIL')\n"
    tracemalloc.start()
    try:
        chunks, result = run(code_run(code, max_output=5_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    out = result["stdout"]
    assert result["status"] == "success"
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert "chars omitted" in out
    assert len(out) <= 5_000
    assert peak < 5_000_000
    live = "".join(chunks)
    assert len(live) < MAX_LIVE_CHARS + 500
    assert "capped" in live


def test_timeout_kills_grandchild(tmp_path):
    pidfile = tmp_path / "pid"
    _, result = run(code_run(GRANDCHILD.format(pidfile=str(pidfile)), timeout=1))
    assert result["status"] == "timeout"
    assert "started" in result["stdout"]
    assert _wait_gone(_read_pid(pidfile))


def test_timeout_kills_a_job_that_left_the_group(tmp_path):
    pidfile = tmp_path / "pid"
    code = (f"(set -m; sleep 300 >/dev/null 2>&1 & echo $! > {pidfile})\n"
            "echo started\nsleep 300")
    _, result = run(code_run(code, type="bash", timeout=1))
    assert result["status"] == "timeout" and "started" in result["stdout"]
    assert _wait_gone(_read_pid(pidfile))


def test_abort_event_kills_group(tmp_path):
    pidfile = tmp_path / "pid"
    abort = threading.Event()
    gen = code_run(GRANDCHILD.format(pidfile=str(pidfile)), timeout=20, abort=abort)
    seen = ""
    while "started" not in seen:
        seen += next(gen)
    abort.set()
    _, result = run(gen)
    assert result["status"] == "aborted"
    assert _wait_gone(_read_pid(pidfile))


def test_closing_the_generator_kills_group(tmp_path):
    pidfile = tmp_path / "pid"
    gen = code_run(GRANDCHILD.format(pidfile=str(pidfile)), timeout=20)
    seen = ""
    while "started" not in seen:
        seen += next(gen)
    gen.close()
    assert _wait_gone(_read_pid(pidfile))


def test_stdin_is_devnull():
    read_end, write_end = os.pipe()  # a stdin that never delivers anything
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        _, result = run(code_run("input()", timeout=10))
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert result["status"] == "error"
    assert "EOFError" in result["stdout"]


def test_child_gets_utf8_environment(monkeypatch):
    monkeypatch.delenv("PYTHONIOENCODING", raising=False)
    monkeypatch.delenv("LC_ALL", raising=False)
    code = "import os, sys\nprint(os.environ['PYTHONIOENCODING'], sys.flags.utf8_mode, 'ü')"
    _, result = run(code_run(code))
    assert result["stdout"] == "utf-8 1 ü\n"


def test_temp_script_removed():
    _, result = run(code_run("print(__file__)"))
    script = Path(result["stdout"].strip())
    assert script.name.endswith(".py")
    assert not script.exists()


def test_timeout_is_clamped():
    with pytest.raises(ToolError, match="timeout"):
        run(code_run("print(1)", timeout="soon"))
    _, result = run(code_run("print(1)", timeout=0))
    assert result["status"] == "success"


def test_last_code_block():
    reply = (
        "First:\n```python\nprint(1)\n```\nthen\n```bash\necho a\n```\n"
        "and\n```py\nprint(2)\nprint(3)\n```\ndone"
    )
    assert last_code_block(reply, "python") == "print(2)\nprint(3)"
    assert last_code_block(reply, "bash") == "echo a"
    assert last_code_block("```sh\nls -l\n```", "bash") == "ls -l"
    assert last_code_block("no code here", "python") is None
    assert last_code_block("```js\nx()\n```", "python") is None


def test_last_code_block_ignores_inline_fences():
    reply = "Use ``` for fences.\n```python\ns = 'a ``` b'\n```\n"
    assert last_code_block(reply, "python") == "s = 'a ``` b'"


def test_sys_executable_used():
    _, result = run(code_run("import sys; print(sys.executable)"))
    assert Path(result["stdout"].strip()).resolve() == Path(sys.executable).resolve()


def test_background_child_holding_the_pipe_does_not_block(tmp_path):
    pidfile = tmp_path / "bg.pid"
    code = f"sleep 60 & echo $! > {pidfile}; echo main done"
    _, result = run(code_run(code, type="bash", timeout=20))
    os.kill(_read_pid(pidfile), 9)
    assert result["status"] == "success"
    assert "main done" in result["stdout"]
