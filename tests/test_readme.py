"""README's commands and code, run as written: the first command, the routes to add a tool."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from frontends.cli import main

ROOT = Path(__file__).resolve().parent.parent


def readme_block(marker: str) -> str:
    """The fenced block of README.md whose first line is ``marker``."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for body in re.findall(r"```\w*\n(.*?)```", text, re.S):
        if body.startswith(marker):
            return body
    raise AssertionError(f"README has no block starting with {marker!r}")


def readme_route(folder: Path) -> None:
    (folder / "my_tools.py").write_text(readme_block("# my_tools.py"))
    (folder / "word_count_test.yaml").write_text(readme_block("# word_count_test.yaml"))
    (folder / "notes.txt").write_text("one two three\n")


def test_readme_plugin_route_runs_offline(tmp_path, capsys):
    work = Path.cwd()
    readme_route(work)
    command = readme_block("echo").splitlines()[1].split()
    assert command[:2] == ["ga", "--plugin"]
    argv = [a.strip('"') for a in command[1:]]
    argv = argv[: argv.index("-v")] + ["--json"] + [" ".join(argv[argv.index("-v") + 1:])]
    assert main(argv) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"type": "tool_result", "name": "word_count", "id": "call_1_0",
            "data": {"words": 3}} in events
    assert events[-1]["text"] == "notes.txt has 3 words."


def test_readme_subclass_route_runs(tmp_path, home):
    readme_route(tmp_path)
    (tmp_path / "my_agent.py").write_text(readme_block("# my_agent.py"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path / "user")}
    proc = subprocess.run([sys.executable, "my_agent.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "CURRENT_TASK_DONE notes.txt has 3 words."


def test_readme_first_command_writes_nothing_into_the_checkout(tmp_path):
    first = readme_block("pip install").splitlines()[0]
    demo = first.split("&& ", 1)[1]
    assert demo.startswith('ga -C "$(mktemp -d)"')
    before = sorted(p.name for p in ROOT.iterdir())
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GA_HOME": str(tmp_path / "home"),
           "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", "-c", demo.replace("ga ", f"{sys.executable} ga.py ", 1)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert "Done: `hello.py` prints `hello`" in proc.stdout
    assert sorted(p.name for p in ROOT.iterdir()) == before
    assert list(tmp_path.glob("tmp*/hello.py"))


def test_readme_browser_config_is_valid():
    import yaml

    from tools.web import BrowserConfig

    section = yaml.safe_load(readme_block("browser:"))["browser"]
    cfg = BrowserConfig.from_dict(section, "README.md")
    assert cfg.window_size == (1280, 1000) and not cfg.attach


def test_readme_safety_matches_what_the_sandbox_lets_through(tmp_path, capsys):
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    safety = text.split("## Safety", 1)[1].split("\n## ", 1)[0]
    assert "| `workspace-write` (default) |" in safety and "`--yolo`" in safety
    assert "agent: {sandbox: full-access" in safety and "macOS" in safety
    work, outside = tmp_path / "project", tmp_path / "outside"
    work.mkdir()
    outside.mkdir()
    steps = [{"tool_calls": [
        {"name": "file_write", "args": {"path": "../outside/written.txt", "content": "x"}},
        {"name": "code_run", "args": {"type": "bash", "script": "echo y > ../outside/ran"}}]},
        {"text": "done"}]
    (tmp_path / "m.json").write_text(json.dumps(steps))
    run = ["-m", f"scripted:{tmp_path / 'm.json'}", "-C", str(work), "write outside"]
    assert main(run) == 0
    assert list(outside.iterdir()) == []  # the default: nothing outside the workspace
    assert main(["--yolo", *run]) == 0  # the original's behaviour, as the section says
    assert (outside / "written.txt").read_text() == "x"
    assert (outside / "ran").read_text() == "y\n"


def test_readme_states_that_inline_eval_code_keeps_the_full_environment():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for title in ("## Processes and signals", "## Safety"):
        section = text.split(title, 1)[1].split("\n## ", 1)[0]
        assert "`inline_eval`" in section and "full environment" in section
        assert "use a plain `code_run` for anything that starts" in section.lower()


def test_readme_run_batch_example_runs(tmp_path, home):
    (tmp_path / "batch_demo.py").write_text(readme_block("# batch_demo.py"))
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "batch_demo.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    answer = "Done: `hello.py` prints `hello`, and running it confirmed the output."
    assert lines == [*(f"hello-{n} done {answer}" for n in range(3)), "exit code 0"]
    assert (tmp_path / "hello.results.work" / "hello-0" / "hello.py").exists()
