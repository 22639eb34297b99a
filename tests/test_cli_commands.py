"""`ga` parsing (git-style), management commands, and errors that say what to do (SPEC §7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from llm_server import Reply, llm_server, write_config

from frontends.cli import main
from frontends.journal import Journal, load_session

__all__ = ["llm_server"]  # the fixture

ROOT = Path(__file__).resolve().parent.parent
DEMO = f"scripted:{ROOT / 'examples' / 'demo.yaml'}"


def script(tmp_path, steps, name="script.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(steps, allow_unicode=True))
    return f"scripted:{p}"


def only_session(home: Path):
    files = list((home / "sessions").glob("*.jsonl"))
    assert len(files) == 1, files
    return load_session(files[0])


# ---- parsing ---------------------------------------------------------------------------
def test_global_options_before_the_command_word_run_the_command_not_a_task(tmp_path, capsys):
    other = tmp_path / "H"
    assert main(["-m", DEMO, "--home", str(other), "sessions"]) == 0
    assert capsys.readouterr().out.strip() == f"no saved sessions in {other / 'sessions'}"
    assert not (Path.cwd() / "hello.py").exists() and not other.exists()


def test_global_options_after_the_command_word(tmp_path, home, capsys):
    other = tmp_path / "X"
    assert main(["memory", "path", "--home", str(other)]) == 0
    assert capsys.readouterr().out.strip() == str(other / "memory")
    assert main(["--home", str(other), "memory", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(other / "memory")


def test_a_mistyped_command_is_an_error_not_a_task(tmp_path, home, capsys):
    assert main(["-m", DEMO, "sesions"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'ga sessions'?" in err and f"ga -m {DEMO} -- sesions" in err
    assert not (home / "sessions").exists()


def test_help_as_a_word_points_to_the_option(capsys):
    assert main(["help"]) == 2
    assert "did you mean 'ga --help'?" in capsys.readouterr().err


def test_a_one_argument_task_starting_with_a_command_word_is_a_task(tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "found it"}]), "memory leak in x"]) == 0
    assert only_session(home).first_prompt == "memory leak in x"


def test_unquoted_task_starting_with_a_command_word_says_how_to_run_it(capsys):
    assert main(["sessions", "are", "slow"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'are'" in err and "ga -- 'sessions are slow'" in err


def test_task_words_and_options_may_be_mixed(tmp_path, home, capsys):
    assert main(["fix", "-m", script(tmp_path, [{"text": "ok"}]), "the", "bug"]) == 0
    assert only_session(home).first_prompt == "fix the bug"


def test_a_plain_one_word_task_still_runs(tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "deployed"}]), "deploy"]) == 0
    assert capsys.readouterr().out == "deployed\n"


@pytest.mark.parametrize("argv", [
    ["--help"], ["sessions", "--help"], ["sessions", "show", "--help"],
    ["sessions", "export", "--help"], ["memory", "--help"], ["memory", "lint", "--help"],
    ["tools", "--help"], ["config", "--help"], ["config", "check", "--help"]])
def test_help_works_on_every_command_and_subcommand(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    words = [w for w in argv if w != "--help"]
    assert out.startswith(f"usage: {' '.join(['ga', *words])}")


def test_general_help_explains_which_words_are_commands(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "ga -- TEXT always runs TEXT as a task" in out and "ga tools" in out
    assert "only\n  the final answer" in out


def test_version_from_the_real_ga_command():
    from importlib.metadata import version

    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "--version"],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout.strip() == f"ga {version('genericagent')}"


# ---- read-only commands ------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["memory"], ["memory", "path"], ["memory", "sops"], ["memory", "lint"], ["sessions"],
    ["tools"], ["config", "path"], ["config", "check"]])
def test_read_only_commands_create_nothing_in_the_home(argv, tmp_path, capsys):
    new = tmp_path / "new-home"
    no_model = argv == ["config", "check"]  # a new home chooses no model: a config problem
    assert main([*argv, "--home", str(new)]) == (2 if no_model else 0)
    assert not new.exists()


def test_memory_show_on_a_new_home_says_it_is_created_by_the_first_task(tmp_path, capsys):
    assert main(["memory", "--home", str(tmp_path / "h")]) == 0
    assert "created by the first task" in capsys.readouterr().out


def test_memory_lint_on_a_new_home_says_there_is_no_memory_yet(tmp_path, capsys):
    for argv in (["memory", "lint"], ["memory", "lint", "--fix"]):
        assert main([*argv, "--home", str(tmp_path / "h")]) == 0
        out = capsys.readouterr().out
        assert out == (f"memory lint: (no memory yet: {tmp_path / 'h' / 'memory'} is created "
                       "by the first task)\n")
    assert not (tmp_path / "h").exists()


# ---- ga tools ----------------------------------------------------------------------------
PLUGIN = '''
from agent_loop import StepOutcome

def register(api):
    def do_shout(self, word: str):
        """Shout a word.

        Args:
            word: The word.
        """
        return StepOutcome(word.upper(), next_prompt="\\n")
    api.tool(do_shout)
'''


def test_tools_lists_sources_and_why_a_tool_is_not_offered(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GA_CHROMIUM", str(tmp_path / "no-chromium"))
    plugin = tmp_path / "shout.py"
    plugin.write_text(PLUGIN)
    assert main(["tools", "--plugin", str(plugin), "--no-user-tools"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "built-in" in rows["code_run"] and rows["code_run"].endswith("offered")
    assert str(plugin) in rows["shout"] and rows["shout"].endswith("offered")
    assert rows["ask_user"].endswith("not offered: --no-user-tools")
    assert "not offered: $GA_CHROMIUM names" in rows["web_scan"]
    assert "apt-get install chromium" in rows["web_execute_js"]
    assert "no_tool" not in rows


def test_tools_json_is_exactly_what_a_run_offers_the_model(tmp_path, home, capsys):
    from llmcore.scripted import ScriptedClient

    plugin = tmp_path / "shout.py"
    plugin.write_text(PLUGIN)
    assert main(["tools", "--json", "--plugin", str(plugin), "--no-user-tools"]) == 0
    listed = {r["name"] for r in json.loads(capsys.readouterr().out) if r["offered"]}
    seen = []
    original = ScriptedClient.chat

    def spy(self, messages, tools=None):
        seen.append({t["function"]["name"] for t in tools})
        return (yield from original(self, messages, tools))

    ScriptedClient.chat = spy
    try:
        assert main(["-m", script(tmp_path, [{"text": "x"}]), "--plugin", str(plugin),
                     "--no-user-tools", "go"]) == 0
    finally:
        ScriptedClient.chat = original
    assert seen[0] == listed and "shout" in listed


def test_tools_shows_what_each_offered_tool_adds_to_every_request(tmp_path, home, capsys):
    from llmcore.scripted import ScriptedClient
    from tools.spec import schema_tokens

    assert main(["tools", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    seen = []
    original = ScriptedClient.chat

    def spy(self, messages, tools=None):
        seen.extend(tools)
        return (yield from original(self, messages, tools))

    ScriptedClient.chat = spy
    try:
        assert main(["-m", script(tmp_path, [{"text": "x"}]), "go"]) == 0
    finally:
        ScriptedClient.chat = original
    costs = {s["function"]["name"]: schema_tokens(s) for s in seen}
    assert costs and {name: rows[name]["tokens"] for name in costs} == costs
    capsys.readouterr()
    assert main(["tools"]) == 0
    out, err = capsys.readouterr()
    line = next(line for line in out.splitlines() if line.startswith("code_run "))
    assert f" {costs['code_run']} tokens " in line
    assert f"{sum(costs.values()):,} tokens in every request" in err


# ---- ga config ---------------------------------------------------------------------------
def test_config_path_follows_config_option_env_and_home(tmp_path, home, monkeypatch, capsys):
    assert main(["config", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(home / "config.yaml")
    monkeypatch.setenv("GA_CONFIG", str(tmp_path / "env.yaml"))
    assert main(["config", "path"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "env.yaml")
    assert main(["config", "path", "--config", str(tmp_path / "opt.yaml")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "opt.yaml")


def test_config_check_lists_profiles_with_keys_only_as_set_or_unset(home, monkeypatch, capsys):
    monkeypatch.setenv("MY_KEY", "sk-ant-secret-value-123456")
    (home / "config.yaml").write_text(yaml.safe_dump({"default": "a", "models": {
        "a": {"provider": "anthropic", "model": "claude-x", "api_key_env": "MY_KEY"},
        "b": {"provider": "openai", "model": "gpt-x", "api_key_env": "UNSET_KEY"},
        "c": {"provider": "openai", "model": "q", "base_url": "http://127.0.0.1:9/v1"},
        "d": {"provider": "openai", "model": "m", "api_key": "inline-secret-abcdef"}}}))
    assert main(["config", "check"]) == 2  # a problem found is a config error
    out = capsys.readouterr().out
    assert "a (default): anthropic claude-x, key set (from $MY_KEY)" in out
    assert "b: openai gpt-x, key unset" in out and "UNSET_KEY is not set" in out
    assert "c: openai q at http://127.0.0.1:9/v1, key none (not needed)" in out
    assert "d: openai m, key set (from api_key in the file)" in out
    assert "secret" not in out and "1 problem(s)" in out


def test_config_check_without_a_chosen_model_exits_2(home, capsys):
    (home / "config.yaml").write_text(yaml.safe_dump({"models": {
        "a": {"provider": "openai", "model": "q", "base_url": "http://127.0.0.1:9/v1"}}}))
    assert main(["config", "check"]) == 2
    out = capsys.readouterr().out
    assert "problem: no model chosen" in out and "1 problem(s)" in out


def test_config_check_of_a_valid_config_is_ok(home, tmp_path, capsys):
    (tmp_path / "x.yaml").write_text("- text: hi\n")
    (home / "config.yaml").write_text(f"default: s\nmodels:\n  s: {{provider: scripted, "
                                      f"script: {tmp_path / 'x.yaml'}}}\n")
    assert main(["config"]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")


@pytest.mark.parametrize("content, words", [
    (None, "cannot read script"), ("- tool_call: []\n", "[0].tool_call: unknown field")])
def test_config_check_reads_and_checks_a_scripted_profiles_script(home, tmp_path, capsys,
                                                                  content, words):
    path = tmp_path / "s.yaml"
    if content is not None:
        path.write_text(content)
    (home / "config.yaml").write_text(f"default: s\nmodels:\n  s: {{provider: scripted, "
                                      f"script: {path}}}\n")
    assert main(["config", "check"]) == 2  # a problem found is a config error
    out = capsys.readouterr().out
    assert f"problem: s: {path}" in out and words in out and "1 problem(s)" in out


# ---- errors that say what to do (SPEC §6/§7) --------------------------------------------
def test_ga_config_naming_a_missing_file_is_an_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GA_CONFIG", str(tmp_path / "gone.yaml"))
    assert main(["-m", DEMO, "go"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "gone.yaml") in err and "$GA_CONFIG" in err


def test_provider_model_without_a_key_names_the_variable(monkeypatch, capsys):
    monkeypatch.setenv("GA_MODEL", "openai:gpt-5.4")
    assert main(["go"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "ga: openai:gpt-5.4: no API key: set the environment variable OPENAI_API_KEY"


def test_ambiguous_session_prefix_lists_the_matches(home, tmp_path, capsys):
    from llmcore.scripted import ScriptedClient

    class Agent:
        cwd = tmp_path
        handler = None
        history_info: list = []
        llmclient = ScriptedClient([])

    for sid in ("abc-1", "abc-2"):
        journal = Journal(home, Agent(), sid)
        journal.write({"type": "task_start", "prompt": sid})
        journal.close()
    assert main(["-m", DEMO, "--resume", "abc", "again"]) == 2
    assert "'abc' matches 2 sessions: abc-1, abc-2" in capsys.readouterr().err
    assert main(["sessions", "show", "abc"]) == 2
    assert "abc-1, abc-2" in capsys.readouterr().err
    assert main(["sessions", "show", "abc-2"]) == 0


@pytest.mark.parametrize(("data", "words"), [
    ({"conversation": []}, 'object with a "history" list'),
    ({"history": "hi"}, "history: expected a list"),
    ({"history": [], "extra": 1}, "extra: unknown key"),
    ([{"role": "tool", "content": []}], "history[0]: expected a message"),
])
def test_history_file_of_the_wrong_shape_is_an_error(tmp_path, capsys, data, words):
    bad = tmp_path / "h.json"
    bad.write_text(json.dumps(data))
    assert main(["-m", DEMO, "--history", str(bad), "go"]) == 2
    assert words in capsys.readouterr().err


# ---- ga sessions -------------------------------------------------------------------------
def test_sessions_show_prints_a_readable_transcript(home, capsys):
    assert main(["-m", DEMO, "make hello.py"]) == 0
    sid = only_session(home).id
    capsys.readouterr()
    assert main(["sessions", "show", sid[:10]]) == 0
    out = capsys.readouterr().out
    assert f"session {sid} started" in out and "▶ make hello.py" in out
    assert "🛠️ file_write(" in out and "↳ ok" in out and "» write hello.py" in out
    assert out.rstrip().endswith("■ done (4 turns)") and "Done: `hello.py`" in out


def test_sessions_list_cuts_long_model_names_to_one_line(home, tmp_path, capsys):
    deep = tmp_path / ("very-long-folder-name-" * 4)
    deep.mkdir()
    assert main(["-m", script(deep, [{"text": "ok"}], "the-script.yaml"), "count"]) == 0
    capsys.readouterr()
    assert main(["sessions"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines()
               if line.startswith(only_session(home).id))
    assert "scripted:" in row and "…" in row and "the-script.yaml" in row and "count" in row


def test_the_provider_log_is_named_after_the_session(home, llm_server, capsys):
    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m", "api_key": "k"})
    llm_server.queue(Reply(text="logged answer"))
    assert main(["-m", "p", "--config", cfg, "log this"]) == 0
    sid = only_session(home).id
    assert [p.name for p in (home / "logs").glob("*.log")] == [f"llm-{sid}.log"]
    assert "logged answer" in (home / "logs" / f"llm-{sid}.log").read_text()


def test_sessions_json_lists_one_object_per_session(home, tmp_path, capsys):
    assert main(["-m", script(tmp_path, [{"text": "ok", "usage": {"input": 5, "output": 2}}]),
                 "count"]) == 0
    capsys.readouterr()
    assert main(["sessions", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 1 and rows[0]["first_prompt"] == "count" and rows[0]["tokens"] == 7


def test_the_run_as_a_task_hint_keeps_options_outside_the_task_text(tmp_path, capsys):
    argv = ["--home", "H", "-C", "W w", "-m", "M", "memory", "leak", "--json", "in", "x"]
    assert main(argv) == 2
    assert "(to run this as a task: ga --home H -C 'W w' -m M --json -- 'memory leak in x')" \
        in capsys.readouterr().err
    assert main(["--home=H", "sessions", "bogus"]) == 2
    assert "(to run this as a task: ga --home=H -- 'sessions bogus')" in capsys.readouterr().err


def test_sessions_export_to_a_folder_or_an_unwritable_path_is_a_usage_error(home, tmp_path,
                                                                            capsys):
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "go"]) == 0
    sid = only_session(home).id
    capsys.readouterr()
    assert main(["sessions", "export", sid, str(tmp_path)]) == 2
    assert capsys.readouterr().err == (f"ga: {tmp_path}: is a folder; name a file to write, "
                                       f"e.g. {tmp_path / 'session.json'}\n")
    missing = tmp_path / "no" / "such"
    missing.parent.write_text("a file where a folder should be")
    assert main(["sessions", "export", sid, str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ga: {missing}: cannot write it (") and err.count("\n") == 1
    assert err.endswith("); name a file in a folder you can write to\n")


def test_sessions_export_to_dash_writes_standard_output(home, tmp_path, capsys,
                                                       monkeypatch):
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "go"]) == 0
    sid = only_session(home).id
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert main(["sessions", "export", sid, "-"]) == 0
    assert json.loads(capsys.readouterr().out)["history"]
    assert not (tmp_path / "-").exists()


# ---- options read exactly, sessions found by their folder ------------------------------
def test_an_abbreviated_option_is_unknown_not_taken_for_another(tmp_path, capsys):
    other = tmp_path / "H"
    assert main(["--hom", str(other), "sessions"]) == 2
    assert "--hom" in capsys.readouterr().err
    assert not other.exists()


def test_continue_finds_a_session_started_with_a_dotted_folder(tmp_path, home, monkeypatch,
                                                              capsys):
    (tmp_path / "p1").mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    model = script(tmp_path, [{"text": "done"}])
    assert main(["-m", model, "-C", "../p1", "start"]) == 0
    assert main(["-m", model, "-C", str(tmp_path / "p1"), "--continue", "again"]) == 0
    (journal,) = (home / "sessions").glob("*.jsonl")  # the same session, continued
    assert f"resumed session {journal.stem}" in capsys.readouterr().err


def test_resume_and_continue_together_are_a_usage_error(tmp_path, home, capsys):
    assert main(["-m", DEMO, "--resume", "x", "--continue", "go"]) == 2
    assert "--resume [ID] or --continue, not both" in capsys.readouterr().err


def test_resume_with_only_a_task_says_how_to_give_both(tmp_path, home, capsys):
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "first"]) == 0
    capsys.readouterr()
    assert main(["--resume", "do more"]) == 2
    err = capsys.readouterr().err
    assert "'do more' was read as a session id" in err
    assert "ga --resume -- 'do more'" in err


def test_resume_or_continue_without_a_task_or_a_terminal_says_how_to_give_one(tmp_path, home,
                                                                            capsys):
    assert main(["-m", script(tmp_path, [{"text": "ok"}]), "first"]) == 0
    sid = only_session(home).id
    capsys.readouterr()
    for argv, give in ((["--resume"], 'ga --resume ID "TASK"'),
                       (["--resume", sid], f'ga --resume {sid} "TASK"'),
                       (["--continue"], 'ga --continue "TASK"')):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "without a terminal there is no session picker or REPL" in err, argv
        assert f"give the task: {give}" in err and "or run it in a terminal" in err, argv


def test_sessions_limit_must_be_at_least_one(home, capsys):
    assert main(["sessions", "-n", "0"]) == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_json_without_a_task_at_a_terminal_is_a_usage_error(home, monkeypatch, capsys):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    assert main(["-m", DEMO, "--json"]) == 2
    assert '--json: needs a task: ga --json "TASK"' in capsys.readouterr().err


def test_a_model_failure_still_names_the_session(tmp_path, home, capsys):
    model = script(tmp_path, [{"raise": "503: down", "status": 503}])
    assert main(["-m", model, "go"]) == 1
    err = capsys.readouterr().err
    (journal,) = (home / "sessions").glob("*.jsonl")
    assert "503: down" in err and f"session {journal.stem}" in err
