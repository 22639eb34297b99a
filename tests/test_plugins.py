"""Plugins (SPEC §2): --plugin FILE, schemas for undecorated functions, all-or-nothing
loading."""

from __future__ import annotations

import json

import yaml

from frontends.cli import main

UNDECORATED = '''
from agent_loop import StepOutcome

def register(api):
    def do_repeat(self, word: str, times: int = 2):
        """Repeat a word.

        Args:
            word: The word.
            times: How often.
        """
        return StepOutcome(" ".join([word] * times), next_prompt="\\n")
    api.tool(do_repeat)
'''

UNDESCRIBED = '''
def register(api):
    api.on("agent_after", lambda ctx: print("HOOK-FIRED"))
    def do_vague(self, thing):
        return thing
    api.tool(do_vague)
'''

FAILS_LATE = '''
from agent_loop import StepOutcome
from tools.spec import tool

def register(api):
    api.on("agent_after", lambda ctx: print("HOOK-FIRED"))
    @api.tool
    @tool
    def do_half(self):
        """Half registered."""
        return StepOutcome("half", next_prompt="\\n")
    raise RuntimeError("broke half-way")
'''


def script(tmp_path, steps, name="script.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return f"scripted:{p}"


def plugin(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def json_events(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_undecorated_typed_function_gets_a_derived_schema(tmp_path, capsys):
    path = plugin(tmp_path, "repeat.py", UNDECORATED)
    assert main(["tools", "--json", "--plugin", path]) == 0
    row = next(r for r in json.loads(capsys.readouterr().out) if r["name"] == "repeat")
    assert row["offered"] and row["source"] == path and row["description"] == "Repeat a word."
    steps = [{"tool_calls": [{"name": "repeat", "args": {"word": "hi", "times": "3"}}]},
             {"text": "ok"}]
    assert main(["-m", script(tmp_path, steps), "--json", "--plugin", path, "go"]) == 0
    results = [e for e in json_events(capsys.readouterr().out) if e["type"] == "tool_result"]
    assert results[0]["data"] == "hi hi hi"


def test_a_function_without_a_schema_is_refused_at_load_and_leaves_nothing(tmp_path, capsys):
    path = plugin(tmp_path, "vague.py", UNDESCRIBED)
    steps = [{"tool_calls": [{"name": "vague", "args": {"thing": 1}}]}, {"text": "ok"}]
    assert main(["-m", script(tmp_path, steps), "--plugin", path, "go"]) == 0
    out, err = capsys.readouterr()
    assert f"plugin {path} failed to load: TypeError: tool vague: a docstring describing the " \
           "tool is required (api.tool derives the schema" in err
    assert "unknown tool vague" in err and "HOOK-FIRED" not in out


def test_a_plugin_whose_register_raises_leaves_no_tool_and_no_hook(tmp_path, capsys):
    path = plugin(tmp_path, "half.py", FAILS_LATE)
    assert main(["tools", "--plugin", path]) == 0
    out, err = capsys.readouterr()
    assert "half" not in out and "broke half-way" in err
    steps = [{"tool_calls": [{"name": "half", "args": {}}]}, {"text": "ok"}]
    assert main(["-m", script(tmp_path, steps), "--plugin", path, "go"]) == 0
    out, err = capsys.readouterr()
    assert "HOOK-FIRED" not in out + err and "unknown tool half" in err


def test_plugin_option_is_repeatable_and_a_missing_file_is_a_usage_error(tmp_path, capsys):
    one = plugin(tmp_path, "repeat.py", UNDECORATED)
    two = plugin(tmp_path, "shout.py", UNDECORATED.replace("do_repeat", "do_shout"))
    assert main(["tools", "--plugin", one, "--plugin", two]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "repeat" in names and "shout" in names
    assert main(["tools", "--plugin", str(tmp_path / "nope.py")]) == 2
    assert "nope.py: --plugin: plugin file not found" in capsys.readouterr().err


def test_a_plugin_calling_sys_exit_in_register_is_reported_and_skipped(tmp_path, capsys):
    path = plugin(tmp_path, "quits.py", "import sys\n\ndef register(api):\n    sys.exit(5)\n")
    assert main(["tools", "--plugin", path]) == 0
    out, err = capsys.readouterr()
    assert "quits.py failed to load: SystemExit: 5" in err and "code_run" in out
    assert main(["-m", script(tmp_path, [{"text": "ran anyway"}]), "--plugin", path, "go"]) == 0
    assert capsys.readouterr().out == "ran anyway\n"
