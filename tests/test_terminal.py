"""Untrusted text reaches no terminal raw (SPEC §4), tried through a real pseudo-terminal:
escape sequences in model text, command output, file contents and file names are shown
escaped, in live output, tool lines, the final answer and ``ga sessions show``; and a
diagnostic never lands on the line of a streamed answer."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pexpect
import pytest
import yaml

from frontends.cli import setup_logging
from frontends.console import TextRenderer
from frontends.terminal import inert, inert_data, json_line

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 60
CLEAR = "\x1b[2J"  # clears the screen
TITLE = "\x1b]0;pwned\x07"  # sets the window title
CLIPBOARD = "\x1b]52;c;aGk=\x07"  # writes the clipboard
CSI8 = "\u009b2J"  # the 8-bit form of CLEAR
RAW = (b"\x1b[2J", b"\x1b]", b"\x07", b"\xc2\x9b", b"\x08")  # none may reach the terminal
EVIL_NAME = "notes\x1b[2J.txt"


def env_for(home: Path) -> dict:
    return {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}


@pytest.fixture
def model(tmp_path) -> str:
    """A model whose text, tool output, file contents and file name carry escapes."""
    (tmp_path / EVIL_NAME).write_text(f"line one {CLEAR}{CLIPBOARD}\nline two\x08\x08\x08XX\n")
    steps = [
        {"text": f"<summary>look{TITLE}</summary>Reading {CLEAR}now{CSI8}",
         "tool_calls": [
             {"name": "file_read", "args": {"path": EVIL_NAME}},
             {"name": "code_run", "args": {"type": "bash", "script": (
                 "printf 'out \\033[2J \\033]52;c;aGk=\\007 \\302\\2332J done\\n'")}}]},
        {"text": f"All done {CLEAR}{TITLE}{CSI8} end"}]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(steps))
    return f"scripted:{path}"


def on_a_terminal(argv: list[str], home: Path, cwd: Path) -> bytes:
    """What a terminal would get from ``ga ARGV`` (stdout and stderr both on it)."""
    child = pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), *argv], env=env_for(home),
                          cwd=str(cwd), timeout=TIMEOUT, dimensions=(40, 200))
    shown = child.read()
    child.close()
    assert child.exitstatus == 0, shown
    return shown


def assert_inert(shown: bytes) -> str:
    for raw in RAW:
        assert raw not in shown, (raw, shown)
    return shown.decode("utf-8")


@pytest.mark.parametrize("flags", [[], ["-v"]])
def test_escape_sequences_reach_the_terminal_escaped(tmp_path, home, model, flags):
    shown = assert_inert(on_a_terminal(["-m", model, *flags, "look"], home, tmp_path))
    assert "Reading \\x1b[2Jnow\\x9b2J" in shown  # the live reply
    assert "notes\\x1b[2J.txt" in shown  # the tool line
    assert "out \\x1b[2J \\x1b]52;c;aGk=\\x07 \\x9b2J done" in shown  # command output
    assert "All done \\x1b[2J\\x1b]0;pwned\\x07\\x9b2J end" in shown  # the answer
    if flags:  # the file's contents in the result panel
        assert "line one \\x1b[2J\\x1b]52;c;aGk=\\x07" in shown and "\\x08\\x08\\x08XX" in shown
    (journal,) = (home / "sessions").glob("*.jsonl")
    assert CLEAR in journal.read_text(encoding="utf-8") or "\\u001b[2J" in journal.read_text()
    session = assert_inert(on_a_terminal(["sessions", "show", "-v", journal.stem], home,
                                         tmp_path))
    assert "Reading \\x1b[2Jnow" in session and "All done \\x1b[2J" in session
    assert '"notes\\\\x1b[2J.txt"' in session  # the call's arguments, as JSON
    assert "line one \\x1b[2J" in session
    journal.unlink()


def test_piped_output_carries_no_escape_either(tmp_path, home, model):
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", model, "look"],
                          cwd=tmp_path, env=env_for(home), capture_output=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    for stream in (proc.stdout, proc.stderr):
        assert b"\x1b" not in stream and b"\x07" not in stream and b"\xc2\x9b" not in stream
    assert proc.stdout.decode() == "All done \\x1b[2J\\x1b]0;pwned\\x07\\x9b2J end\n"


def test_json_lines_escape_every_control_character(tmp_path, home, model):
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", model, "--json", "look"],
                          cwd=tmp_path, env=env_for(home), capture_output=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and b"\xc2\x9b" not in proc.stdout
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert events[-1]["text"] == f"All done {CLEAR}{TITLE}{CSI8} end"  # the data is intact


def test_inert_escapes_controls_and_keeps_text():
    assert inert(f"a{CLEAR}b\r\nc\td\x7f{CSI8}\u00e9") == "a\\x1b[2Jb\nc\td\\x7f\\x9b2J\u00e9"
    assert inert(inert(CLEAR)) == inert(CLEAR)
    assert inert_data({CLEAR: [TITLE, 3]}) == {"\\x1b[2J": ["\\x1b]0;pwned\\x07", 3]}
    assert json_line(json.dumps(CSI8, ensure_ascii=False)) == '"\\u009b2J"'


RLO, LRI, PDI = "\u202e", "\u2066", "\u2069"  # bidi override and isolate: reorder text


def test_bidi_controls_reach_the_terminal_escaped(tmp_path, home):
    steps = [{"text": "<summary>look</summary>", "tool_calls": [
        {"name": "code_run", "args": {"type": "bash",
                                      "script": "printf 'out \\342\\200\\256gnp.exe\\n'"}}]},
        {"text": f"Safe: {RLO}txt.exe and {LRI}rm -rf ~{PDI}"}]
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(steps))
    shown = on_a_terminal(["-m", f"scripted:{path}", "look"], home, tmp_path)
    for char in (RLO, LRI, PDI):
        assert char.encode() not in shown
    text = shown.decode("utf-8")
    assert "out \\u202egnp.exe" in text  # command output
    assert "Safe: \\u202etxt.exe and \\u2066rm -rf ~\\u2069" in text  # the answer
    assert inert("\u200dword\u00e9") == "\u200dword\u00e9"  # a joiner in an emoji stays
    assert json_line(json.dumps(RLO, ensure_ascii=False)) == '"\\u202e"'


# ---- a diagnostic never shares the line of a streamed answer -----------------------------
@pytest.fixture
def unarchivable(home, tmp_path) -> str:
    """A home whose L4 archive cannot be written, and a model whose answer ends unended."""
    (home / "memory").mkdir(parents=True)
    (home / "memory" / "L4_raw_sessions").write_text("a file where the archive folder goes")
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump([{"text": "done all"}]))
    return f"scripted:{path}"


def test_a_diagnostic_after_a_streamed_answer_starts_its_own_line(tmp_path, home,
                                                                   unarchivable):
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", unarchivable, "go"],
                          cwd=tmp_path, env=env_for(home), capture_output=True, text=True,
                          timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "archiving the session in L4 failed" in proc.stderr and "done all\n" in proc.stderr
    assert not re.search(r"[^\n]ga: ", proc.stderr)  # the failure comes first or on its line
    shown = on_a_terminal(["-m", unarchivable, "go"], home, tmp_path).decode()
    assert "done all\r\n" in shown and not re.search(r"[^\n]ga: ", shown)


def test_a_log_line_from_another_thread_ends_the_line_left_open(capsys):
    restore = setup_logging(verbose=False)
    try:
        render = TextRenderer(out=sys.stderr)
        render({"type": "text", "delta": "done all"})
        worker = threading.Thread(target=logging.getLogger("ga.memory").warning,
                                  args=("archiving the session in L4 failed",))
        worker.start()
        worker.join()
        render({"type": "task_end", "result": "CURRENT_TASK_DONE", "text": "done all"})
    finally:
        restore()
    assert capsys.readouterr().err == "done all\nga: archiving the session in L4 failed\n"


# ---- listings and the REPL ---------------------------------------------------------------
def test_session_listings_and_exports_show_escapes_escaped(tmp_path, home, capsys):
    from frontends.cli import main

    model = tmp_path / "m.yaml"
    model.write_text(yaml.safe_dump([{"text": f"ok {CSI8}"}]))
    assert main(["-m", f"scripted:{model}", f"look {CLEAR}{TITLE} here"]) == 0
    capsys.readouterr()
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert "look \\x1b[2J\\x1b]0;pwned\\x07 here" in out and "\x1b" not in out
    assert main(["sessions", "--json"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and json.loads(out)["first_prompt"] == f"look {CLEAR}{TITLE} here"
    (journal,) = (home / "sessions").glob("*.jsonl")
    assert main(["sessions", "export", journal.stem]) == 0
    out = capsys.readouterr().out
    assert "\u009b" not in out and CSI8 in json.dumps(json.loads(out), ensure_ascii=False)


def test_the_repl_shows_escapes_escaped(tmp_path, home):
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump([{"text": "noted"}]))
    assert subprocess.run([sys.executable, str(ROOT / "ga.py"), "-m", f"scripted:{first}",
                           f"earlier {CLEAR} task"], cwd=tmp_path, env=env_for(home),
                          capture_output=True, timeout=TIMEOUT,
                          stdin=subprocess.DEVNULL).returncode == 0
    repl = tmp_path / "repl.yaml"
    repl.write_text(yaml.safe_dump([{"text": f"Live {CLEAR}{TITLE} reply{CSI8} end"}]))
    child = pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), "-m", f"scripted:{repl}"],
                          env=env_for(home), cwd=str(tmp_path), timeout=TIMEOUT,
                          dimensions=(30, 160))
    child.logfile_read = shown = io.BytesIO()
    child.expect(b"ga> ")
    child.sendline(b"/resume")
    child.expect(b"session> ")
    child.sendline(b"")
    child.expect(b"ga> ")
    child.sendline(b"go")
    child.expect(b"tokens: ")  # the status line after the reply
    child.expect(b"ga> ")
    child.sendline(b"/exit")
    child.expect(pexpect.EOF)
    child.close()
    text = assert_inert(shown.getvalue())
    assert "earlier \\x1b[2J task" in text and "Live \\x1b[2J\\x1b]0;pwned\\x07 reply" in text
