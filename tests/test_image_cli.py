"""Images on the command line (--image in each mode, REPL /image) and in the journal."""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path

import pexpect
import pytest
import yaml
from genutil import quit_repl
from llm_server import llm_server, write_config
from PIL import Image

from frontends.cli import main
from frontends.journal import load_session

__all__ = ["llm_server"]
ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 20


def png(path: Path, size=(40, 30), color=(200, 40, 40)) -> Path:
    Image.new("RGB", size, color).save(path, "PNG")
    return path


def script(tmp_path: Path, *texts: str) -> str:
    p = tmp_path / "script.yaml"
    p.write_text(yaml.safe_dump([{"text": t} for t in texts]))
    return f"scripted:{p}"


def only_journal(home: Path) -> Path:
    files = list((home / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return files[0]


def user_images(history: list) -> list[dict]:
    return [b for m in history if m["role"] == "user" for b in m["content"]
            if b["type"] == "image"]


def test_image_flag_goes_with_the_task_and_the_journal_stores_it_once(home, tmp_path, capsys):
    shot = png(Path("shot.png"))
    data_b64 = base64.b64encode(shot.read_bytes()).decode()
    code = main(["-m", script(tmp_path, "A red square."), "--image", "shot.png",
                 "--image", str(shot), "what is this?"])
    assert code == 0, capsys.readouterr().err
    journal = only_journal(home)
    text = journal.read_text()
    assert data_b64 not in text and text.count('"ref": "images/') >= 2
    stored = list((home / "images").iterdir())
    assert len(stored) == 1 and stored[0].suffix == ".png"
    assert stored[0].read_bytes() == shot.read_bytes()
    state = load_session(journal)
    pictures = user_images(state.history)
    assert [p["data"] for p in pictures] == [data_b64, data_b64]  # back for a resume


def test_an_image_file_read_by_a_tool_is_stored_once_and_comes_back_on_resume(home, tmp_path,
                                                                             capsys):
    png(Path("chart.png"), (300, 200), (20, 90, 200))
    read = {"text": "<summary>look</summary>", "tool_calls": [
        {"name": "file_read", "args": {"path": "chart.png"}}]}
    model = tmp_path / "tool.yaml"
    model.write_text(yaml.safe_dump([read, {"text": "A blue chart."}]))
    assert main(["-m", f"scripted:{model}", "what is in chart.png?"]) == 0
    journal = only_journal(home)
    (stored,) = (home / "images").iterdir()
    sent = base64.b64encode(stored.read_bytes()).decode()  # what the model was sent
    assert sent not in journal.read_text() and '"ref": "images/' in journal.read_text()
    results = [b for m in load_session(journal).history if m["role"] == "user"
               for b in m["content"] if b["type"] == "tool_result"]
    assert [x["data"] for r in results for x in r["content"] if x["type"] == "image"] == [sent]


def test_sessions_export_holds_references_and_history_reloads_them(home, tmp_path, capsys):
    png(Path("shot.png"))
    assert main(["-m", script(tmp_path, "ok", "again"), "--image", "shot.png", "look"]) == 0
    sid = only_journal(home).stem
    capsys.readouterr()
    assert main(["sessions", "show", sid]) == 0
    assert "+ image shot.png (40x30 png)" in capsys.readouterr().out
    assert main(["sessions", "export", sid, "out.json"]) == 0
    exported = json.loads(Path("out.json").read_text())
    ref = user_images(exported["history"])[0]
    assert ref["ref"].startswith("images/") and "data" not in ref
    assert (home / ref["ref"]).is_file()
    assert main(["-m", script(tmp_path, "seeded"), "--history", "out.json", "more"]) == 0
    newest = max((home / "sessions").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert user_images(load_session(newest).history)[0]["data"]


def test_image_flag_with_json_task_and_func_modes(home, tmp_path, capsys, monkeypatch):
    png(Path("shot.png"))
    assert main(["-m", script(tmp_path, "json answer"), "--json", "--image", "shot.png",
                 "go"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    start = next(e for e in events if e["type"] == "task_start")
    assert start["images"][0]["name"] == "shot.png" and "data" not in start["images"][0]
    monkeypatch.setenv("GA_TASK_REPLY_WAIT", "0")
    task = tmp_path / "child"
    assert main(["-m", script(tmp_path, "task answer"), "--task", str(task), "--input",
                 "describe", "--image", "shot.png"]) == 0
    job = tmp_path / "job.txt"
    job.write_text("describe the picture")
    assert main(["-m", script(tmp_path, "func answer"), "--func", str(job),
                 "--image", "shot.png"]) == 0
    journals = sorted((home / "sessions").glob("*.jsonl"), key=lambda p: p.stat().st_mtime)
    assert len(journals) == 3
    assert all(len(user_images(load_session(j).history)) == 1 for j in journals)


@pytest.mark.parametrize(("name", "content", "message"), [
    ("notes.png", b"hello", "notes.png: not an image this runtime can send"),
    ("old.bmp", None, "old.bmp: BMP images are not supported"),
    ("missing.png", "", "missing.png: cannot read the image"),
])
def test_a_bad_image_exits_2_naming_the_file(home, tmp_path, capsys, name, content, message):
    if content is None:
        Image.new("RGB", (4, 4)).save(name, "BMP")
    elif content:
        Path(name).write_bytes(content)
    assert main(["-m", script(tmp_path, "never"), "--image", name, "look"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


def test_a_bad_image_with_a_history_file_leaves_no_session(home, tmp_path, capsys):
    history = tmp_path / "h.json"
    history.write_text(json.dumps([{"role": "user", "content": "earlier"},
                                   {"role": "assistant", "content": "noted"}]))
    argv = ["-m", script(tmp_path, "never"), "--history", str(history), "--image", "nope.png"]
    assert main([*argv, "look"]) == 2
    assert "nope.png" in capsys.readouterr().err
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


def test_a_bad_image_with_bg_exits_2_before_detaching(home, tmp_path, capsys):
    job = tmp_path / "job.txt"
    job.write_text("look at it")
    argv = ["-m", script(tmp_path, "never"), "--func", str(job), "--bg", "--image", "nope.png"]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and "nope.png" in err and "Traceback" not in err
    assert not (home / "logs" / "bg").exists()  # nothing was started


def test_a_text_only_profile_exits_2_before_any_request(home, llm_server, capsys):
    cfg = write_config(home, llm_server, local={"provider": "openai", "model": "qwen"})
    png(Path("shot.png"))
    assert main(["-m", "local", "--config", cfg, "--image", "shot.png", "look"]) == 2
    err = capsys.readouterr().err
    assert "local cannot see images" in err and "vision: true" in err
    assert llm_server.requests == []


def spawn(home: Path, *args: str) -> pexpect.spawn:
    env = {**os.environ, "GA_HOME": str(home), "PYTHONPATH": str(ROOT), "GA_LANG": "en"}
    return pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), *args], env=env, cwd=os.getcwd(),
                         encoding="utf-8", timeout=TIMEOUT, dimensions=(30, 160))


def test_repl_image_goes_with_the_next_message_and_model_switch_warns(home, tmp_path):
    png(Path("shot.png"))
    a = tmp_path / "a.yaml"
    a.write_text(yaml.safe_dump([{"text": "I see a red square."}]))
    (home / "config.yaml").write_text(yaml.safe_dump({"default": "a", "models": {
        "a": {"provider": "scripted", "script": str(a)},
        "blind": {"provider": "scripted", "script": str(a), "vision": False}}}))
    child = spawn(home)
    child.expect("ga> ")
    child.sendline("/image nope.png")
    child.expect("error: .*nope.png: cannot read the image")
    png(Path("my shot.png"), (20, 10))
    child.sendline("/image shot.png my\\ shot.png")
    child.expect(r"attached shot.png \(40x30 png\)")
    child.expect(r"attached my shot.png \(20x10 png\)")
    child.sendline("/model blind")
    child.expect("note: blind cannot see images")
    child.sendline("what is it?")
    child.expect("error: .*blind cannot see images")
    child.sendline("/model a")
    child.expect("conversation kept")
    child.sendline("/image")
    child.expect(r"attached: shot.png \(40x30 png\), my shot.png \(20x10 png\)")
    child.sendline("what is it?")
    child.expect("red square")
    child.expect("ga> ")
    quit_repl(child)
    history = load_session(only_journal(home)).history
    assert [[b["type"] for b in m["content"]] for m in history if m["role"] == "user"] == [
        ["text", "image", "image"]]


def test_a_lost_image_file_becomes_a_note_on_resume(home, tmp_path, capsys, caplog):
    png(Path("shot.png"))
    assert main(["-m", script(tmp_path, "ok"), "--image", "shot.png", "look"]) == 0
    (stored,) = (home / "images").iterdir()
    stored.unlink()
    state = load_session(only_journal(home))
    assert user_images(state.history) == []
    assert state.history[0]["content"][1] == {
        "type": "text", "text": f"[image: 40x30 png, its file images/{stored.name} is gone]"}
    assert "missing or changed" in caplog.text
