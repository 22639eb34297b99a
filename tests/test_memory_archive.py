"""L4 archive, concurrent access stats, and the ``ga memory`` subcommands."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from frontends.cli import main
from memory.archive import INDEX_NAME, TOOL_OUTPUT_CHARS, archive_to_l4, squeeze
from memory.lint import lint_store
from memory.store import MemoryStore

ROOT = Path(__file__).resolve().parent.parent


def _events(prompt: str, answer: str = "The port is 8080.") -> list[dict]:
    return [
        {"type": "task_start"},
        {"type": "user", "text": prompt},
        {"type": "assistant", "text": "<thinking>secret plan</thinking><summary>look</summary>",
         "thinking": "hidden reasoning", "tool_calls": [{"name": "file_read",
                                                         "args": {"path": "app.cfg"}}]},
        {"type": "tool_result", "name": "file_read", "data": "x" * 5000},
        {"type": "summary", "text": "read the config"},
        {"type": "weird", "payload": 1},
        {"type": "assistant"},
        {"type": "task_end", "result": "CURRENT_TASK_DONE", "text": answer},
    ]


def _grep(folder: Path, word: str) -> list[str]:
    hits = []
    for path in sorted(folder.iterdir()):
        for line in path.read_text(encoding="utf-8").splitlines():
            if word.lower() in line.lower():
                hits.append(f"{path.name}:{line}")
    return hits


@pytest.fixture
def store(home) -> MemoryStore:
    s = MemoryStore(home)
    s.seed()
    return s


def test_archived_session_is_found_by_grep(store):
    path = archive_to_l4(store, "20250101-abc", _events("Find the nginx listening port"),
                                 today=date(2025, 1, 1))
    assert path.parent == store.l4_dir and path.name == "20250101-abc.md"
    hits = _grep(store.l4_dir, "nginx")
    assert f"{INDEX_NAME}:2025-01-01 20250101-abc Find the nginx listening port" in hits
    assert any(h.startswith("20250101-abc.md:") for h in hits)
    text = path.read_text(encoding="utf-8")
    assert "The port is 8080." in text and "read the config" in text
    assert "file_read" in text and "app.cfg" in text


def test_archive_squeezes_tool_output_and_drops_thinking(store):
    text = archive_to_l4(store, "s1", _events("check")).read_text(encoding="utf-8")
    assert "x" * TOOL_OUTPUT_CHARS in text and "x" * (TOOL_OUTPUT_CHARS + 1) not in text
    assert "[+4760 chars]" in text
    assert "secret plan" not in text and "hidden reasoning" not in text


def test_a_long_output_is_squeezed_to_one_line_counting_what_was_cut():
    out = "\n".join(f"line {i:04d}: the quick brown fox" for i in range(2000))
    flat = " ".join(out.split())
    assert squeeze(out, TOOL_OUTPUT_CHARS) == (
        f"{flat[:TOOL_OUTPUT_CHARS]}... [+{len(flat) - TOOL_OUTPUT_CHARS} chars]")
    assert squeeze("  short\n text ", TOOL_OUTPUT_CHARS) == "short text"


def test_archive_names_how_a_stopped_task_ended(store):
    events = [*_events("wait")[:-1], {"type": "task_end", "result": "ABORTED", "text": "",
                                      "reason": "terminated (SIGTERM)"}]
    text = archive_to_l4(store, "s1", events).read_text(encoding="utf-8")
    assert "## Final (ABORTED: terminated (SIGTERM))" in text


def test_archive_redacts_secrets(store):
    key = "sk-" + "Q" * 30
    text = archive_to_l4(store, "s1", _events(f"use key {key} please")).read_text("utf-8")
    assert key not in text and key not in (store.l4_dir / INDEX_NAME).read_text("utf-8")
    assert lint_store(store) == []


def test_one_file_per_session(store):
    archive_to_l4(store, "s1", _events("first try"))
    archive_to_l4(store, "s1", _events("first try", answer="second answer"))
    assert sorted(p.name for p in store.l4_dir.iterdir()) == [INDEX_NAME, "s1.md"]
    index = (store.l4_dir / INDEX_NAME).read_text(encoding="utf-8").splitlines()
    assert len(index) == 1
    assert "second answer" in (store.l4_dir / "s1.md").read_text(encoding="utf-8")


def test_archive_prunes_oldest_beyond_retention(home):
    store = MemoryStore(home, l4_keep=3)
    for i in range(5):
        archive_to_l4(store, f"s{i}", _events(f"task number {i}"))
    files = sorted(p.name for p in store.l4_dir.glob("*.md"))
    assert files == ["s2.md", "s3.md", "s4.md"]
    index = (store.l4_dir / INDEX_NAME).read_text(encoding="utf-8").splitlines()
    assert [ln.split()[1] for ln in index] == ["s2", "s3", "s4"]


def test_archive_sanitises_session_id(store):
    path = archive_to_l4(store, "../../evil id", _events("x"))
    assert path.parent == store.l4_dir


_BUMP = """
import sys
from pathlib import Path
from memory.store import MemoryStore
store = MemoryStore(Path(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    store.record_access(store.dir / "plan_sop.md")
"""


def test_concurrent_processes_never_corrupt_stats(store):
    procs, per_proc = 4, 30
    running = [subprocess.Popen([sys.executable, "-c", _BUMP, str(store.home), str(per_proc)],
                                cwd=ROOT) for _ in range(procs)]
    assert [p.wait(timeout=120) for p in running] == [0] * procs
    stats = json.loads(store.stats_path.read_text(encoding="utf-8"))
    assert stats["plan_sop.md"]["count"] == procs * per_proc


# ---- ga memory show / sops / path ------------------------------------------------------
def test_cli_show_prints_insight(store, capsys):
    assert main(["memory"]) == 0
    out = capsys.readouterr().out
    assert "[RULES]" in out and "global_mem_insight.txt" in out


def test_cli_sops_lists_counts(store, capsys):
    store.record_access(store.dir / "plan_sop.md", today=date(2025, 2, 3))
    store.record_access(store.dir / "plan_sop.md", today=date(2025, 2, 3))
    assert main(["memory", "sops"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("plan_sop.md"))
    assert line.split()[1:] == ["2", "2025-02-03"]
    assert "subagent_sop.md" in out


def test_cli_path_and_usage(home, capsys):
    assert main(["memory", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(home / "memory")
    assert main(["memory", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "usage: ga memory" in err and "invalid choice: 'bogus'" in err


def test_archive_accepts_json_event_stream(store):
    events = [{"type": "task_start", "prompt": "Rotate the kafka logs"},
              {"type": "turn", "turn": 1},
              {"type": "text", "delta": "<summary>rotate</summary>Done: "},
              {"type": "text", "delta": "rotated 3 files."},
              {"type": "tool_call", "name": "code_run", "args": {"script": "ls"}, "id": "c1"},
              {"type": "tool_result", "name": "code_run", "id": "c1", "data": "a b c"},
              {"type": "task_end", "result": "CURRENT_TASK_DONE", "text": "rotated", "turns": 1}]
    text = archive_to_l4(store, "j1", events).read_text(encoding="utf-8")
    assert "## User\nRotate the kafka logs" in text
    assert "Done: rotated 3 files." in text and "- call code_run" in text
    assert _grep(store.l4_dir, "kafka")[0].startswith(f"{INDEX_NAME}:")


def test_archiving_prunes_raw_logs_beyond_the_retention_limit(home, monkeypatch):
    import os

    from memory import archive
    from memory.store import MemoryStore

    logs = home / "logs"
    logs.mkdir()
    for i in range(6):
        p = logs / f"llm-{i}.log"
        p.write_text("x")
        os.utime(p, (1000 + i, 1000 + i))
    (logs / "reflect").mkdir()
    monkeypatch.setattr(archive.prune_raw_logs, "__defaults__", (4,))  # keep 4 for the test
    store = MemoryStore(home)
    store.seed()
    archive_to_l4(store, "s1", [{"type": "user", "text": "hello"}])
    assert sorted(p.name for p in logs.glob("*.log")) == [f"llm-{i}.log" for i in range(2, 6)]
    assert (logs / "reflect").is_dir()
