"""The management commands show outside text inert (SPEC §4 "Untrusted text reaches no
terminal raw"): the memory files the model writes (``ga memory show|sops|lint``), plugin
descriptions (``ga tools``) and the names in a user's file (``ga config import``), tried
through a real pseudo-terminal and by capturing what is printed. (MCP servers' texts:
test_mcp_outside.py.)"""

from __future__ import annotations

import json
import sys

import pexpect
from test_terminal import CLEAR, CLIPBOARD, CSI8, ROOT, TIMEOUT, TITLE, assert_inert, env_for

from frontends.cli import main
from memory.store import MemoryStore

ESCAPES = CLEAR + TITLE + CLIPBOARD + CSI8
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x1b]52;c;aGk=\\x07\\x9b2J"  # ESCAPES made inert
EVIL_SOP = f"evil{CLEAR}_sop.md"
RAW_CHARS = ("\x1b", "\x07", "\u009b")


def hostile_memory(home) -> MemoryStore:
    """A memory the model wrote: escapes in the L1 index, an SOP's name and the stats."""
    store = MemoryStore(home)
    store.dir.mkdir(parents=True)
    store.l1_path.write_text(f"# Index {ESCAPES}\n- deploy: see deploy_sop\n")
    (store.dir / EVIL_SOP).write_text("steps\n")
    store.stats_path.write_text(json.dumps({EVIL_SOP: {"count": 2, "last": ESCAPES}}))
    return store


def on_a_terminal(argv: list[str], home, cwd) -> str:
    """What a terminal gets from ``ga ARGV`` (any exit code), checked to hold no escape."""
    child = pexpect.spawn(sys.executable, [str(ROOT / "ga.py"), *argv], env=env_for(home),
                          cwd=str(cwd), timeout=TIMEOUT, dimensions=(40, 200))
    shown = child.read()
    child.close()
    return assert_inert(shown)


def test_memory_show_and_sops_show_what_the_model_wrote_inert(home, tmp_path):
    hostile_memory(home)
    shown = on_a_terminal(["memory", "show"], home, tmp_path)
    assert f"# Index {SHOWN}" in shown
    shown = on_a_terminal(["memory", "sops"], home, tmp_path)
    assert "evil\\x1b[2J_sop.md" in shown and SHOWN in shown


def test_memory_lint_names_a_hostile_file_inert(home, capsys):
    hostile_memory(home)
    assert main(["memory", "lint"]) == 1
    out = capsys.readouterr().out
    assert "evil\\x1b[2J_sop" in out and not [c for c in RAW_CHARS if c in out]


PLUGIN = f'''
def register(api):
    def do_shout(self, word: str):
        """Shout a word.{CLEAR}{TITLE}{CSI8}

        Args:
            word: The word.
        """
        return word
    api.tool(do_shout)
'''


def test_ga_tools_shows_a_plugins_description_inert(home, tmp_path, capsys):
    plugin = tmp_path / "shout.py"
    plugin.write_text(PLUGIN)
    assert main(["tools", "-v", "--plugin", str(plugin)]) == 0
    out = capsys.readouterr().out
    assert "Shout a word.\\x1b[2J\\x1b]0;pwned\\x07\\x9b2J" in out
    assert not [c for c in RAW_CHARS if c in out]
    assert main(["tools", "--json", "--plugin", str(plugin)]) == 0
    out = capsys.readouterr().out
    assert "\u009b" not in out and "\\u009b2J" in out  # JSON, with C1 escaped too


MYKEY = f'''
native_oai_config = {{
    'name': 'gpt{CLEAR}', 'apikey': 'sk-proj-key-0123456789abcdef',
    'apibase': 'http://127.0.0.1:9/v1', 'model': 'gpt-5{TITLE}{CSI8}', 'note': '{CLIPBOARD}',
}}
'''


def test_config_import_shows_the_files_names_inert(home, tmp_path):
    mykey = tmp_path / "mykey.py"
    mykey.write_text(MYKEY)
    shown = on_a_terminal(["config", "import", str(mykey), "--out", str(tmp_path / "c.yaml")],
                          home, tmp_path)
    assert "gpt-5\\x1b]0;pwned\\x07\\x9b2J" in shown and "sk-proj-key" not in shown
