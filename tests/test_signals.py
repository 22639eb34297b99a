"""Signals and orphans (SPEC §7): whatever ends `ga`, the processes it started end with it.

Real `ga` processes run a scripted model whose code_run starts long sleeps named by a
marker in their argv (`exec -a MARK`); the tests signal `ga` and look the marker up in /proc.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from tools import procs

ROOT = Path(__file__).resolve().parent.parent
GA = str(ROOT / "ga.py")
CHILDREN_GONE_SECONDS = 5.0  # a sanity bound: what ga started is gone soon after ga stops
# a subagent's code goes in two hops: the outer watchdog stops the inner ga (a whole Python
# process that must shut down), whose own watchdog then ends its code
NESTED_GONE_SECONDS = 2 * CHILDREN_GONE_SECONDS
START_SECONDS = 30.0  # sanity bound: ga starts and its code is running
EXIT_SECONDS = 15.0  # sanity bound: a signalled ga exits
POLL_SECONDS = 0.01

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(),
                                reason="finds processes through /proc (Linux)")


def pids_with(text: str) -> list[int]:
    """Live processes whose argv contains ``text`` (zombies have no argv)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in argv:
            found.append(int(entry.name))
    return found


def wait_until(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(POLL_SECONDS)


@pytest.fixture
def mark():
    """A unique argv marker; every process still carrying it is killed at teardown."""
    text = f"ga-sigtest-{uuid.uuid4().hex}"
    yield text
    for pid in pids_with(text):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def tmpdir_env(tmp_path) -> Path:
    path = tmp_path / "tmp"
    path.mkdir()
    return path


def write_model(tmp_path: Path, steps: list, name: str = "model.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(steps))
    return f"scripted:{path}"


def code_step(script: str, type: str = "bash") -> dict:
    return {"text": "<summary>run</summary>running", "tool_calls": [
        {"name": "code_run", "args": {"type": type, "script": script, "timeout": 600}}]}


def start_ga(tmp_path: Path, home: Path, tmpdir: Path, steps: list, *prefix: str,
             extra: tuple[str, ...] = ()) -> subprocess.Popen:
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en",
           "TMPDIR": str(tmpdir)}
    argv = [*prefix, sys.executable, GA, "-m", write_model(tmp_path, steps), *extra, "go"]
    return subprocess.Popen(argv, env=env, cwd=Path.cwd(), stdin=subprocess.DEVNULL,
                            stdout=open(tmp_path / "out.txt", "w"),  # noqa: SIM115
                            stderr=open(tmp_path / "err.txt", "w"))  # noqa: SIM115


def finish(proc: subprocess.Popen) -> int:
    try:
        return proc.wait(EXIT_SECONDS)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def parent_and_grandchild(mark: str) -> str:
    """Bash code: a python parent (marked) whose own child is a marked sleep."""
    grand = f"import subprocess; subprocess.run(['bash', '-c', 'exec -a {mark} sleep 300'])"
    return f'exec -a {mark}-parent {sys.executable} -c "{grand}"'


def runtime_dirs(tmpdir: Path) -> list[Path]:
    return list(tmpdir.glob(f"{procs.DIR_PREFIX}*"))


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -signal.SIGKILL),
                                       (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_stopped_ga_leaves_no_child_nor_grandchild(tmp_path, home, tmpdir_env, mark, sig, code):
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(parent_and_grandchild(mark))])
    wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "the code is running")
    os.kill(proc.pid, sig)
    wait_until(lambda: not pids_with(mark), CHILDREN_GONE_SECONDS, "children gone")
    assert finish(proc) == code
    wait_until(lambda: not runtime_dirs(tmpdir_env), EXIT_SECONDS, "temp dir removed")
    if sig != signal.SIGKILL:
        name = signal.Signals(sig).name
        assert f"({name})" in (tmp_path / "err.txt").read_text()
        journal = next((home / "sessions").glob("*.jsonl")).read_text()
        assert '"result": "ABORTED"' in journal  # the end reached the journal before exit


@pytest.mark.parametrize("sig, words", [(signal.SIGTERM, "terminated (SIGTERM)"),
                                        (signal.SIGHUP, "hung up (SIGHUP)")])
def test_a_signalled_session_shows_how_it_ended(tmp_path, home, tmpdir_env, mark, capsys,
                                                sig, words):
    from frontends.cli import main

    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(f"exec -a {mark} sleep 300")],
                    extra=("--json",))
    wait_until(lambda: pids_with(mark), START_SECONDS, "the code is running")
    os.kill(proc.pid, sig)
    finish(proc)
    end = json.loads((tmp_path / "out.txt").read_text().splitlines()[-1])
    assert end["type"] == "task_end" and end["reason"] == words  # the --json stream's end
    (journal,) = (home / "sessions").glob("*.jsonl")
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [r.get("reason") for r in records if r["type"] == "task_end"] == [words]
    assert main(["--home", str(home), "sessions", "show", journal.stem]) == 0
    shown = capsys.readouterr().out
    assert f"■ {words}" in shown and "interrupted" not in shown


def test_sigint_works_with_an_inherited_blocked_mask(tmp_path, home, tmpdir_env, mark):
    block = ("import os, signal, sys; signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}); "
             "os.execv(sys.executable, sys.argv[1:])")
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(f"exec -a {mark} sleep 300")],
                    sys.executable, "-c", block)
    wait_until(lambda: pids_with(mark), START_SECONDS, "the code is running")
    blocked = Path(f"/proc/{proc.pid}/status").read_text().split("SigBlk:")[1].split()[0]
    assert not int(blocked, 16) & (1 << (signal.SIGINT - 1))
    os.kill(proc.pid, signal.SIGINT)
    assert finish(proc) == 130
    wait_until(lambda: not pids_with(mark), CHILDREN_GONE_SECONDS, "children gone")
    assert "interrupted" in (tmp_path / "err.txt").read_text()


def test_setsid_service_outlives_ga_but_a_plain_background_job_does_not(
        tmp_path, home, tmpdir_env, mark):
    code = (f"setsid bash -c 'exec -a {mark}-service sleep 300' >/dev/null 2>&1 </dev/null &\n"
            f"(exec -a {mark}-job sleep 300) >/dev/null 2>&1 &\n"
            "echo started")
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(code), {"text": "served"}])
    assert finish(proc) == 0
    wait_until(lambda: not runtime_dirs(tmpdir_env), EXIT_SECONDS, "the watchdog is done")
    wait_until(lambda: not pids_with(f"{mark}-job"), CHILDREN_GONE_SECONDS, "job gone")
    assert pids_with(f"{mark}-service"), "the setsid service should keep running"


def test_a_job_in_its_own_group_ends_with_a_killed_ga(tmp_path, home, tmpdir_env, mark):
    half = len(mark) // 2  # the shell's own argv must not hold the mark
    grouped = f'(set -m; exec -a "{mark[:half]}""{mark[half:]}-grouped" sleep 300 &)'
    steps = [code_step(grouped), code_step(f"exec -a {mark}-held sleep 300")]
    proc = start_ga(tmp_path, home, tmpdir_env, steps)
    try:
        wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "both jobs running")
        (job,) = pids_with(f"{mark}-grouped")
        assert os.getpgid(job) == job != os.getsid(job)  # left the group, not the session
    finally:
        proc.kill()
        finish(proc)
    wait_until(lambda: not pids_with(mark), CHILDREN_GONE_SECONDS, "both jobs gone")


def test_no_code_files_left_by_a_killed_ga_after_the_next_start(
        tmp_path, home, tmpdir_env, mark):
    script = f"import subprocess\nsubprocess.run(['bash', '-c', 'exec -a {mark} sleep 300'])\n"
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(script, type="python")])
    wait_until(lambda: pids_with(mark), START_SECONDS, "the code is running")
    assert list(tmpdir_env.rglob("ga_code_*.py"))
    (stale,) = runtime_dirs(tmpdir_env)
    for pid in pids_with(str(stale)):  # the watchdog: a total loss leaves the dir behind
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    finish(proc)
    old = time.time() - 2 * procs.STALE_GRACE_SECONDS
    os.utime(stale, (old, old))
    again = start_ga(tmp_path, home, tmpdir_env, [code_step("echo again"), {"text": "ok"}])
    assert finish(again) == 0
    wait_until(lambda: not runtime_dirs(tmpdir_env), EXIT_SECONDS, "temp dirs removed")
    assert not list(tmpdir_env.rglob("ga_code_*.py"))


def test_a_run_sweeps_stale_runtime_dirs_at_start_without_running_code(tmp_path, home,
                                                                        tmpdir_env):
    stale = tmpdir_env / f"{procs.DIR_PREFIX}999999-gone"
    (stale / procs.TIED_DIR).mkdir(parents=True)
    (stale / procs.LOCK_NAME).touch()  # nobody holds it: its runtime is gone
    old = time.time() - 2 * procs.STALE_GRACE_SECONDS
    os.utime(stale, (old, old))
    assert finish(start_ga(tmp_path, home, tmpdir_env, [{"text": "no code to run"}])) == 0
    assert not stale.exists()


def test_a_live_runtimes_dir_is_not_swept(tmp_path):
    mine = procs.runtime_dir()
    old = time.time() - 2 * procs.STALE_GRACE_SECONDS
    os.utime(mine, (old, old))
    procs.sweep_stale(mine.parent)
    assert mine.is_dir()


def test_bg_subagent_ends_with_the_agent_that_launched_it(tmp_path, home, tmpdir_env, mark):
    inner = write_model(tmp_path, [code_step(f"exec -a {mark}-inner sleep 300")], "inner.yaml")
    launch = (f"{sys.executable} {GA} -m {inner} --task {tmp_path / 'sub'} --input go --bg\n"
              f"exec -a {mark}-outer sleep 300")
    proc = start_ga(tmp_path, home, tmpdir_env, [code_step(launch)],
                    extra=("--sandbox", "full-access"))  # the subagent writes its home
    wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "both agents' code running")
    os.kill(proc.pid, signal.SIGKILL)
    wait_until(lambda: not pids_with(mark), NESTED_GONE_SECONDS, "both agents' code gone")
    wait_until(lambda: not pids_with(str(tmp_path / "sub")), EXIT_SECONDS, "subagent gone")
    wait_until(lambda: not runtime_dirs(tmpdir_env), EXIT_SECONDS, "temp dirs removed")


def test_terminal_hangup_ends_the_repl_and_its_running_code(tmp_path, home, tmpdir_env, mark):
    import pexpect

    ticking = f"echo started; exec -a {mark} bash -c 'while :; do echo tick; sleep 0.002; done'"
    model = write_model(tmp_path, [code_step(ticking)])  # output keeps reaching the terminal
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en",
           "TMPDIR": str(tmpdir_env)}
    child = pexpect.spawn(sys.executable, [GA, "-m", model], env=env, cwd=os.getcwd(),
                          encoding="utf-8", timeout=START_SECONDS, dimensions=(30, 160))
    child.expect("ga> ")
    child.sendline("run the long job")
    child.expect("started")
    wait_until(lambda: pids_with(mark), START_SECONDS, "the code is running")
    os.close(child.child_fd)  # the terminal goes away: the kernel sends SIGHUP
    child.child_fd = -1
    _, status = os.waitpid(child.pid, 0)
    child.closed = child.terminated = True
    assert os.waitstatus_to_exitcode(status) == 129
    wait_until(lambda: not pids_with(mark), CHILDREN_GONE_SECONDS, "children gone")


def test_a_console_write_failing_with_eio_ends_ga_as_its_hangup(tmp_path, home, mark):
    """A hung-up terminal fails writes before the kernel's SIGHUP arrives: the first failed
    write ends the task as that SIGHUP would (code killed, end journaled), and the SIGHUP
    that follows changes nothing."""
    import errno

    from frontends import signals
    from frontends.journal import Journal
    from frontends.runner import Session
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    agent = GenericAgent(ScriptedClient([code_step(f"exec -a {mark} sleep 300")]), home=home)
    session = Session(agent, home, Journal(home, agent))

    def render(event: dict) -> None:
        if event["type"] == "tool_call":
            wait_until(lambda: pids_with(mark), START_SECONDS, "the code is running")
            raise OSError(errno.EIO, "Input/output error")

    reached = []
    with signals.handled():
        with pytest.raises(signals.Terminated) as stopped:
            session.run("run the long job", render)
        os.kill(os.getpid(), signal.SIGHUP)  # the kernel's own, arriving late
        for _ in range(1000):  # the handler runs between these steps: the exit is not cut
            reached.append(1)
    assert stopped.value.exit_code == 129 and len(reached) == 1000
    wait_until(lambda: not pids_with(mark), CHILDREN_GONE_SECONDS, "children gone")
    ends = [json.loads(line) for line in session.journal.path.read_text().splitlines()
            if '"task_end"' in line]
    assert [end["reason"] for end in ends] == ["hung up (SIGHUP)"]


def test_a_finished_run_is_forgotten_but_its_background_job_stays_tied(mark):
    from genutil import drain

    from tools.code_run import code_run

    _, done = drain(code_run("echo $$", type="bash"))
    assert int(done["stdout"]) not in procs.tied_groups()
    _, left = drain(code_run(f"(exec -a {mark} sleep 300) >/dev/null 2>&1 & echo $$",
                             type="bash"))
    assert int(left["stdout"]) in procs.tied_groups()  # ended with the runtime, not before


def test_watchdog_ends_announced_groups_and_spares_a_reused_id(tmp_path, mark):
    run_dir = tmp_path / "run"
    (run_dir / procs.TIED_DIR).mkdir(parents=True)
    ours, other = (subprocess.Popen(["bash", "-c", f"exec -a {mark}-{name} sleep 300"],
                                    start_new_session=True) for name in ("ours", "other"))
    wait_until(lambda: len(pids_with(mark)) == 2, START_SECONDS, "both started")
    (run_dir / procs.TIED_DIR / str(other.pid)).write_text("1")  # started at another time
    watchdog = subprocess.Popen([sys.executable, "-I", "-S", procs.__file__, str(run_dir)],
                                stdin=subprocess.PIPE)
    watchdog.stdin.write(f"+{ours.pid}\n".encode())
    watchdog.stdin.close()  # the runtime is gone
    assert watchdog.wait(EXIT_SECONDS) == 0
    assert ours.wait(EXIT_SECONDS) == -signal.SIGTERM
    assert other.poll() is None
    assert not run_dir.exists()
    other.kill()
    other.wait()


def test_a_child_outlives_the_short_lived_thread_that_started_it():
    import threading

    from genutil import drain

    from tools.code_run import code_run

    gen = code_run("echo started; sleep 0.2; echo still-here", type="bash", timeout=30)
    starter = threading.Thread(target=lambda: next(gen))  # starts the child, then ends
    starter.start()
    starter.join()
    _, result = drain(gen)
    assert result["status"] == "success" and "still-here" in result["stdout"]


def test_a_signal_inside_a_held_block_is_raised_when_the_block_ends():
    from frontends import signals

    reached = []
    with signals.handled(), pytest.raises(signals.Terminated, match="SIGTERM"):
        with signals.held():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # the handler runs between these steps
                reached.append(1)
    assert len(reached) == 1000


class HungUpTerminal(io.StringIO):
    """A terminal whose writes fail with EIO once it has hung up."""

    hung_up = False

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.hung_up:
            raise OSError(errno.EIO, "Input/output error")
        return super().write(text)


@pytest.mark.parametrize("start", [lambda render: render._start_spinner("running code_run…"),
                                   lambda render: render({"type": "text", "delta": "partial"})],
                         ids=["spinner", "live reply"])
def test_a_display_that_fails_to_start_on_a_hung_up_terminal_is_not_stopped(start):
    """The REPL's spinner or live reply failing to start (EIO) must not leave a display
    that the stop on the way out cannot stop (IndexError in rich: exit 1, not 129)."""
    from frontends.console import LiveRenderer

    term = HungUpTerminal()
    render = LiveRenderer(out=term)
    render.console.force_terminal = True
    term.hung_up = True
    with pytest.raises(OSError):
        start(render)
    term.hung_up = False  # the terminal now goes nowhere (ga points it at /dev/null)
    render.close()  # nothing half-started is left to stop
