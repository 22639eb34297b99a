"""The home's memory as the original uses it: L3 helper scripts importable from every
python code_run, and a new home seeded with starter SOPs that its L1 names."""

from __future__ import annotations

import re

from genutil import drain

from frontends.cli import main
from memory.lint import lint_store
from memory.store import MemoryStore, bundled_sop_dir
from tools.code_run import code_run

NEW_SOPS = ("vision_sop", "web_extract_sop", "long_task_sop", "verify_sop", "mcp_sop",
            "batch_sop")

HELPER_TASK = """
import subprocess, sys
from ocr_utils import read_text
print(read_text("scan.png"))
child = "import ocr_utils; print('child sees', ocr_utils.__name__)"
subprocess.run([sys.executable, "-c", child], check=True)
"""


def test_code_run_imports_the_homes_memory_helpers(run_agent, home):
    mem = home / "memory"
    mem.mkdir()
    (mem / "img_tools.py").write_text("def shout(s):\n    return s.upper()\n")
    (mem / "ocr_utils.py").write_text(
        "from img_tools import shout\n\n\ndef read_text(path):\n"
        "    return shout('text of ' + path)\n")
    script = [{"text": "<summary>ocr</summary>",
               "tool_calls": [{"name": "code_run", "args": {"script": HELPER_TASK}}]},
              {"text": "done"}]
    _, _, events = run_agent(script)
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "success", result
    assert "TEXT OF SCAN.PNG" in result["stdout"]  # a helper that imports another helper
    assert "child sees ocr_utils" in result["stdout"]  # python processes it starts, too
    assert (mem / "memory_management_sop.md").exists()  # a seeded home


def test_the_import_path_comes_after_the_callers_own(tmp_path):
    mine, mem = tmp_path / "mine", tmp_path / "memory"
    for folder, text in ((mine, "mine"), (mem, "memory")):
        folder.mkdir()
        (folder / "which.py").write_text(f"NAME = {text!r}\n")
    (mem / "only_in_memory.py").write_text("OK = True\n")
    code = "import which, only_in_memory; print(which.NAME, only_in_memory.OK)"
    _, result = drain(code_run(code, env={"PYTHONPATH": str(mine)}, import_path=[mem]))
    assert result["stdout"].strip() == "mine True"


def test_a_new_home_gets_the_starter_sops_and_an_l1_naming_them(run_agent, home, capsys):
    _, client, _ = run_agent([{"text": "Hello!"}])
    store = MemoryStore(home)
    insight = store.insight()
    for stem in NEW_SOPS:
        assert (store.dir / f"{stem}.md").read_text(encoding="utf-8").startswith("# ")
        assert re.search(rf"\b{stem}\b", insight), stem
        assert stem in client.calls[0]["system"]  # the model sees the index from the start
    assert {p.stem for p in bundled_sop_dir().glob("*.md")} >= set(NEW_SOPS)
    assert lint_store(store) == []
    assert main(["memory", "lint"]) == 0
