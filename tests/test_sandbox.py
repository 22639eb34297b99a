"""The sandbox (SPEC §11) through the real `ga` and a real kernel mechanism: every test of
code_run's confinement runs under Landlock and under bubblewrap (``$GA_SANDBOX_MECHANISM``)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from llm_server import Reply, llm_server, write_config
from test_landlock import MECHANISMS, OPTIONAL
from test_signals import pids_with, wait_until

from tools import landlock
from tools.sandbox import MECHANISM_ENV, bwrap_works

__all__ = ["llm_server"]
ROOT = Path(__file__).resolve().parent.parent
RUN_SECONDS = 60  # sanity bound for one ga run
DENIED = ("Permission denied", "Read-only file system")  # Landlock, bubblewrap


@pytest.fixture(params=MECHANISMS)
def mechanism(request, monkeypatch) -> str:
    monkeypatch.setenv(MECHANISM_ENV, request.param)
    return request.param


@pytest.fixture
def places(tmp_path, home) -> dict[str, Path]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("old\n")
    (outside / "doomed.txt").write_text("old\n")
    return {"work": Path.cwd(), "home": home, "outside": outside}


def code(script: str, kind: str = "bash", **args) -> dict:
    return {"name": "code_run", "args": {"type": kind, "script": script, **args}}


def ga(tmp_path: Path, steps: list, *options: str, cwd: Path | None = None,
       env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """Run the real ga once (``--json``): the process and its tool results in order."""
    model = tmp_path / f"model-{uuid.uuid4().hex[:6]}.yaml"
    model.write_text(yaml.safe_dump(steps))
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "--json", "-m",
                           f"scripted:{model}", *options, "go"],
                          cwd=cwd or Path.cwd(), env={**os.environ, **(env or {})},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=RUN_SECONDS)
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    return proc, [e["data"] for e in events if e["type"] == "tool_result"]


def turn(*calls: dict) -> list[dict]:
    return [{"text": "<summary>act</summary>", "tool_calls": list(calls)}, {"text": "done"}]


OUTSIDE_BASH = """cd {outside}
echo new > made.txt; echo changed > keep.txt; rm doomed.txt; mkdir newdir; ln -s keep.txt link
[ -e made.txt ]"""
OUTSIDE_PYTHON = """import os, shutil
os.chdir({outside!r})
for what, act in [("create", lambda: open("made2.txt", "w")),
                  ("change", lambda: open("keep.txt", "a").write("x")),
                  ("delete", lambda: os.remove("doomed.txt")),
                  ("rename", lambda: os.rename("keep.txt", "moved.txt"))]:
    try:
        act()
        print(what, "done")
    except OSError as e:
        print(what, "refused:", e.strerror)
"""
INSIDE = """echo in > inside.txt && echo mem > {memory}/note.md && echo tmp > "$TMPDIR/t" \
&& echo root > {root}/r.txt && echo "tmp=$TMPDIR" && cat "$TMPDIR/t" """


def test_workspace_write_confines_code_to_the_workspace_memory_temp_and_roots(
        mechanism, places, tmp_path):
    home, outside = places["home"], places["outside"]
    root = tmp_path / "extra"
    root.mkdir()
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump({"agent": {"writable_roots": [str(root)]}}))
    proc, results = ga(tmp_path, turn(
        code(OUTSIDE_BASH.format(outside=outside)),
        code(OUTSIDE_PYTHON.format(outside=str(outside)), "python"),
        code(INSIDE.format(memory=home / "memory", root=root))))
    assert proc.returncode == 0, proc.stderr
    bash, python, inside = results
    assert bash["exit_code"] != 0 and any(d in bash["stdout"] for d in DENIED)
    assert sorted(p.name for p in outside.iterdir()) == ["doomed.txt", "keep.txt"]
    assert (outside / "keep.txt").read_text() == "old\n"
    for what in ("create", "change", "delete", "rename"):
        assert f"{what} refused:" in python["stdout"], python
    note = bash["sandbox"]  # the model is told why, and where it may write
    assert "workspace-write" in note and str(Path.cwd()) in note and str(root) in note
    assert inside["exit_code"] == 0, inside
    assert (Path.cwd() / "inside.txt").exists() and (home / "memory" / "note.md").exists()
    assert (root / "r.txt").exists()
    tmpdir = inside["stdout"].split("tmp=", 1)[1].split()[0]
    assert "ga-run-" in tmpdir and Path(tmpdir) != Path("/tmp")


def test_read_only_code_writes_only_its_temp_folder_and_no_file_tool_writes(
        mechanism, places, tmp_path):
    proc, results = ga(tmp_path, turn(
        code('echo x > "$TMPDIR/t" && cat "$TMPDIR/t" && echo y > here.txt'),
        {"name": "file_write", "args": {"path": "w.txt", "content": "x"}},
        {"name": "file_patch", "args": {"path": "p.txt", "old_content": "a",
                                        "new_content": "b"}}), "--sandbox", "read-only")
    assert proc.returncode == 0, proc.stderr
    ran, write, patch = results
    assert ran["stdout"].startswith("x\n") and ran["exit_code"] != 0
    assert "read-only" in ran["sandbox"]
    for refused in (write, patch):
        assert "refused: sandbox read-only" in refused["msg"]
    assert not (Path.cwd() / "here.txt").exists() and not (Path.cwd() / "w.txt").exists()


@pytest.mark.parametrize("options", [("--yolo",), ("--sandbox", "full-access")])
def test_full_access_and_yolo_write_anywhere_as_before(places, tmp_path, options):
    outside = places["outside"]
    proc, results = ga(tmp_path, turn(
        code(f"echo new > {outside}/made.txt"),
        {"name": "file_write", "args": {"path": str(outside / "w.txt"), "content": "x"}}),
        *options)
    assert proc.returncode == 0, proc.stderr
    assert (outside / "made.txt").read_text() == "new\n" and (outside / "w.txt").exists()
    assert "sandbox" not in results[0]


PLANTED = """try:
    open({target!r}, "w").write("escaped")
    print("{name} wrote outside")
except OSError:
    print("{name} ran confined")
"""


def test_modules_planted_for_python_start_up_run_confined_or_not_at_all(
        mechanism, places, tmp_path):
    home, outside = places["home"], places["outside"]
    site = PLANTED.format(target=str(outside / "site.txt"), name="sitecustomize")
    module = PLANTED.format(target=str(outside / "ctypes.txt"), name="ctypes.py")
    proc, results = ga(tmp_path, turn(
        {"name": "file_write", "args": {"path": str(home / "memory" / "sitecustomize.py"),
                                        "content": site}},  # the memory folder: on PYTHONPATH
        {"name": "file_write", "args": {"path": "ctypes.py", "content": module}},
        code("import ctypes\nprint('ctypes from', ctypes.__file__)", "python")))
    assert proc.returncode == 0, proc.stderr
    out = results[2]["stdout"]
    assert "sitecustomize ran confined" in out and "wrote outside" not in out, out
    assert "ctypes.py ran" not in out and f"ctypes from {Path.cwd()}" not in out, out
    assert sorted(p.name for p in outside.iterdir()) == ["doomed.txt", "keep.txt"]


SIGNALS = """import os, signal, subprocess
ga = int(os.environ["GA_TIE_DIR"].split("ga-run-")[1].split("-")[0])
for name, pid in (("ga", ga), ("other", {victim})):
    try:
        os.kill(pid, signal.SIGTERM)
        print(name, "signalled")
    except OSError as e:
        print(name, "refused:", e.strerror)
own = subprocess.Popen(["sleep", "60"])
own.send_signal(signal.SIGTERM)
print("own child ended by", -own.wait())
"""


def test_confined_code_cannot_signal_ga_or_other_processes_only_its_own(
        mechanism, places, tmp_path):
    victim = subprocess.Popen(["sleep", "300"])
    try:
        proc, results = ga(tmp_path, turn(code(SIGNALS.format(victim=victim.pid), "python")))
        assert proc.returncode == 0, proc.stderr  # ga was not stopped
        out = results[0]["stdout"]
        assert "ga refused:" in out and "other refused:" in out, out
        assert f"own child ended by {int(signal.SIGTERM)}" in out
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()


CONNECT = """import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=5).close()
    print("connected")
except OSError as e:
    print("no connection:", e.strerror)
"""


@pytest.mark.parametrize("network", [True, False])
def test_network_false_cuts_code_off_while_the_model_still_answers(
        mechanism, llm_server, home, tmp_path, network):
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                               "api_key": "k"})
    data = yaml.safe_load(Path(config).read_text())
    Path(config).write_text(yaml.safe_dump({**data, "agent": {"network": network}}))
    llm_server.queue(Reply(tool_calls=[("code_run", json.dumps(
        {"type": "python", "script": CONNECT.format(port=port)}))]), Reply(text="all done"))
    try:
        proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", "p", "go"],
                              capture_output=True, text=True, timeout=RUN_SECONDS,
                              stdin=subprocess.DEVNULL)
    finally:
        listener.close()
    assert proc.returncode == 0 and "all done" in proc.stdout, proc.stderr
    (sent,) = [m["content"] for m in llm_server.bodies()[-1]["messages"] if m["role"] == "tool"]
    assert ("connected" in sent) == network and ("no connection" in sent) != network, sent


UDP = """import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"out", ("127.0.0.1", {port}))
except OSError as e:
    print("not sent:", e.strerror)
"""


@pytest.mark.skipif(OPTIONAL and not bwrap_works(network=False),
                    reason="needs bubblewrap: apt-get install bubblewrap")
@pytest.mark.parametrize("network", [True, False])
def test_network_false_cuts_udp_as_well_by_choosing_bubblewrap(places, home, tmp_path,
                                                               network):
    (home / "config.yaml").write_text(yaml.safe_dump({"agent": {"network": network}}))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sink:
        sink.bind(("127.0.0.1", 0))
        sink.setblocking(False)
        proc, _ = ga(tmp_path, turn(code(UDP.format(port=sink.getsockname()[1]), "python")),
                     env={MECHANISM_ENV: ""})  # the mechanism ga chooses
        assert proc.returncode == 0, proc.stderr
        try:
            arrived = sink.recv(16) == b"out"  # loopback delivers within sendto
        except BlockingIOError:
            arrived = False
    assert arrived == network


@pytest.mark.skipif(OPTIONAL and landlock.abi() < landlock.NET_ABI,
                    reason="needs Landlock ABI 4 (Linux >= 6.7)")
def test_network_false_under_landlock_says_once_that_only_tcp_is_blocked(
        places, home, tmp_path, monkeypatch):
    monkeypatch.setenv(MECHANISM_ENV, "landlock")
    (home / "config.yaml").write_text(yaml.safe_dump({"agent": {"network": False}}))
    proc, results = ga(tmp_path, turn(code("echo hi")))
    assert proc.returncode == 0 and results[0]["stdout"] == "hi\n", proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "blocks only TCP" in line]
    assert len(warnings) == 1 and warnings[0].startswith("ga: warning:"), proc.stderr
    check = subprocess.run([sys.executable, str(ROOT / "ga.py"), "config", "check"],
                           capture_output=True, text=True, timeout=RUN_SECONDS)
    assert "warning: network: false blocks only TCP under Landlock" in check.stdout


BACKGROUND = """(exec -a {mark} sleep 300) &
echo started"""
WAIT_FOR_GO = "while [ ! -e go ]; do sleep 0.05; done"


def test_background_processes_live_until_ga_ends_or_under_bwrap_end_with_their_command(
        mechanism, places, tmp_path):
    mark = f"ga-sandbox-bg-{uuid.uuid4().hex}"
    model = tmp_path / "bg.yaml"
    model.write_text(yaml.safe_dump([
        {"text": "<summary>start</summary>", "tool_calls": [code(BACKGROUND.format(mark=mark))]},
        {"text": "<summary>wait</summary>", "tool_calls": [code(WAIT_FOR_GO)]},
        {"text": "done"}]))
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "--json", "-m",
                             f"scripted:{model}", "go"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        started = json.loads(next(line for line in proc.stdout if '"tool_result"' in line))
        wait_until(lambda: proc.poll() is not None or bool(pids_with("while [ ! -e go ]")),
                   RUN_SECONDS, "the second code_run is running")
        if mechanism == "bwrap":  # gone with its command, while ga still runs
            wait_until(lambda: not pids_with(mark), RUN_SECONDS, "the background process ended")
        else:
            assert pids_with(mark), "the background process ended before ga"
        (Path.cwd() / "go").touch()
        proc.communicate(timeout=RUN_SECONDS)
    finally:
        proc.kill()
        proc.wait()
    assert ("background" in started["data"]) == (mechanism == "bwrap"), started
    wait_until(lambda: not pids_with(mark), RUN_SECONDS, "the background process ended")


def test_file_tools_refuse_writes_outside_the_workspace_on_the_real_path(places, tmp_path):
    work, outside = places["work"], places["outside"]
    (work / "escape").symlink_to(outside / "keep.txt")
    (work / "mine.txt").write_text("a\n")
    proc, results = ga(tmp_path, turn(
        {"name": "file_write", "args": {"path": "../outside/x.txt", "content": "x"}},
        {"name": "file_write", "args": {"path": str(outside / "y.txt"), "content": "x"}},
        {"name": "file_write", "args": {"path": "escape", "content": "x"}},
        {"name": "file_patch", "args": {"path": "escape", "old_content": "old",
                                        "new_content": "new"}},
        {"name": "file_write", "args": {"path": "sub/../ok.txt", "content": "x"}},
        {"name": "file_patch", "args": {"path": "mine.txt", "old_content": "a",
                                        "new_content": "b"}}))
    assert proc.returncode == 0, proc.stderr
    *refused, wrote, patched = results
    for result in refused:
        assert result["status"] == "error" and "refused: sandbox workspace-write" in result["msg"]
        assert str(outside) in result["msg"], result
    assert sorted(p.name for p in outside.iterdir()) == ["doomed.txt", "keep.txt"]
    assert (outside / "keep.txt").read_text() == "old\n"
    assert wrote["status"] == "success" and patched["status"] == "success"
    assert (work / "mine.txt").read_text() == "b\n" and (work / "ok.txt").exists()


def open_paths(pid: int) -> set[str]:
    """What process ``pid`` has open (the targets of its descriptors)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            found.add(os.readlink(fd))
        except OSError:
            continue  # closed meanwhile
    return found


def test_a_folder_swapped_for_a_symlink_while_a_write_waits_is_not_followed(places, tmp_path):
    work, outside = places["work"], places["outside"]
    folder = work / "d"
    folder.mkdir()
    model = tmp_path / "swap.yaml"
    model.write_text(yaml.safe_dump(turn(
        {"name": "file_write", "args": {"path": "d/keep.txt", "content": "planted\n"}})))
    held = os.open(folder, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)  # as a background process of the model's could
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "--json", "-m",
                             f"scripted:{model}", "go"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: str(folder) in open_paths(proc.pid), RUN_SECONDS,
                   "ga waits for the folder's lock")
        folder.rename(work / "d_old")
        folder.symlink_to(outside)
        os.close(held)
        held = None
        out, err = proc.communicate(timeout=RUN_SECONDS)
    finally:
        proc.kill()
        proc.wait()
        if held is not None:
            os.close(held)
    assert proc.returncode == 0, err
    assert (outside / "keep.txt").read_text() == "old\n"
    assert (work / "d_old" / "keep.txt").read_text() == "planted\n"  # where it was checked


HOLD_LOCK = """python3 -c 'import fcntl, os, time
fd = os.open(".", os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
open("locked", "w").close()
time.sleep(300)' </dev/null >/dev/null 2>&1 &
echo "holder=$!"
while [ ! -e locked ]; do sleep 0.05; done"""


def test_a_folder_lock_kept_by_a_background_process_ends_the_wait_with_a_clear_error(
        mechanism, places, tmp_path):
    proc, results = ga(tmp_path, turn(
        code(HOLD_LOCK), {"name": "file_write", "args": {"path": "a.txt", "content": "x"}}))
    assert proc.returncode == 0, proc.stderr  # the run went on
    held, write = results
    if mechanism == "bwrap":  # the holder ended with its command: nothing holds the lock
        assert write["status"] == "success", write
        return
    holder = held["stdout"].split("holder=")[1].split()[0]
    assert write["status"] == "error" and f"locked by process {holder} (python3)" in write["msg"]
    assert "end it or let it finish" in write["msg"] and not (Path.cwd() / "a.txt").exists()


def test_without_a_mechanism_one_warning_at_start_and_in_config_check(tmp_path, monkeypatch):
    monkeypatch.setenv(MECHANISM_ENV, "none")
    proc, results = ga(tmp_path, turn(code("echo hi")))
    assert proc.returncode == 0 and results[0]["stdout"] == "hi\n"
    warnings = [line for line in proc.stderr.splitlines() if "no sandbox mechanism" in line]
    assert len(warnings) == 1 and warnings[0].startswith("ga: warning:")
    check = subprocess.run([sys.executable, str(ROOT / "ga.py"), "config", "check"],
                           capture_output=True, text=True, timeout=RUN_SECONDS)
    assert "warning: no sandbox mechanism" in check.stdout
    assert "sandbox: workspace-write (none)" in check.stdout


def test_a_forced_mechanism_that_is_unknown_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv(MECHANISM_ENV, "jail")
    proc, _ = ga(tmp_path, turn(code("echo hi")))
    assert proc.returncode == 2
    assert "GA_SANDBOX_MECHANISM" in proc.stderr and "Traceback" not in proc.stderr


def test_a_background_subagent_from_confined_code_is_refused_not_left_untied(
        mechanism, places, tmp_path):
    home = places["home"]
    (home / "config.yaml").write_text(yaml.safe_dump({"agent": {"writable_roots": [str(home)]}}))
    inner = tmp_path / "inner.yaml"
    inner.write_text(yaml.safe_dump([{"text": "inner done"}]))
    launch = f"{sys.executable} {ROOT / 'ga.py'} -m scripted:{inner} --task sub --input go --bg"
    proc, results = ga(tmp_path, turn(code(launch)))
    assert proc.returncode == 0, proc.stderr
    out = results[0]["stdout"]
    assert results[0]["exit_code"] == 1 and "cannot be tied to the agent" in out, out
    assert "without --bg" in out
    assert not pids_with(str(Path.cwd() / "sub")) and not pids_with("--task sub")


def named(mark: str) -> list[int]:
    """Live processes whose name (argv[0], set with ``exec -a``) starts with ``mark``."""
    found = []
    for pid in pids_with(mark):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(mark.encode()):
                found.append(pid)
        except OSError:
            continue  # gone meanwhile
    return found


def test_a_timeout_ends_the_whole_confined_tree(mechanism, places, tmp_path):
    mark = f"ga-sandbox-timeout-{uuid.uuid4().hex}"
    script = f"(exec -a {mark}-bg sleep 300) & exec -a {mark} sleep 300"
    proc, results = ga(tmp_path, turn(code(script, timeout=1)))
    assert proc.returncode == 0 and results[0]["status"] == "timeout", results
    wait_until(lambda: not named(mark), RUN_SECONDS, "the confined processes ended")


def test_confined_children_end_with_a_killed_ga(mechanism, places, tmp_path):
    mark = f"ga-sandbox-kill-{uuid.uuid4().hex}"
    model = tmp_path / "kill.yaml"
    model.write_text(yaml.safe_dump(turn(code(
        f"(exec -a {mark}-bg sleep 300) & exec -a {mark} sleep 300", timeout=600))))
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "-m", f"scripted:{model}",
                             "go"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: len(named(mark)) == 2, RUN_SECONDS, "the code is running")
        proc.kill()
        proc.wait(RUN_SECONDS)
        wait_until(lambda: not named(mark), RUN_SECONDS, "the confined processes ended")
    finally:
        proc.kill()
        proc.wait()


def test_a_workspace_holding_gas_own_code_is_warned_about(tmp_path):
    done = [{"text": "<summary>nothing to do</summary>done"}]
    proc, _ = ga(tmp_path, done, "-C", str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert f"ga's own code ({ROOT.resolve()}) is inside {ROOT.resolve()}" in proc.stderr
    for options in ((), ("-C", str(ROOT), "--sandbox", "full-access")):
        proc, _ = ga(tmp_path, done, *options)
        assert proc.returncode == 0 and "ga's own code" not in proc.stderr, proc.stderr
