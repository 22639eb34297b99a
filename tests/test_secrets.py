"""Secrets stay out of children and out of everything written (SPEC §4): the env policy,
the one redactor (every profile's key, secret-named environment values) and its writers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from llm_server import llm_server, write_config

import llmcore
from frontends.cli import main
from ga import GenericAgent, GenericAgentHandler, StepOutcome
from llmcore.base import ConfigError
from llmcore.config import Config, load_config, tools_settings
from llmcore.scripted import ScriptedClient
from llmcore.secrets import MASK, EnvPolicy, Redactor
from memory.cli import memory_command
from memory.store import MemoryStore

__all__ = ["llm_server"]
KEY_A = "key-of-profile-a-11111111"
KEY_B = "key-of-profile-b-22222222"  # a profile that is not the active one
VENDOR_KEY = "sk-ant-" + "V" * 30
GH_TOKEN = "gho_" + "t" * 36


@pytest.fixture
def config(home, monkeypatch) -> Path:
    """Two profiles with keys, one reading its key from a variable whose name looks harmless."""
    monkeypatch.setenv("LLM_ACCESS", VENDOR_KEY)
    path = home / "config.yaml"
    path.write_text(yaml.safe_dump({"models": {
        "a": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
              "api_key": KEY_A},
        "b": {"provider": "anthropic", "model": "m", "api_key": KEY_B},
        "c": {"provider": "anthropic", "model": "m", "api_key_env": "LLM_ACCESS"}}}))
    return path


def script(tmp_path: Path, steps: list[dict], name: str = "model.yaml") -> str:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(steps))
    return f"scripted:{p}"


# ---- what children inherit ---------------------------------------------------------------
def test_children_get_the_environment_minus_secrets(config):
    env = {"PATH": "/bin", "HOME": "/root", "GITHUB_TOKEN": GH_TOKEN, "OPENAI_API_KEY": "x",
           "db_password": "p", "AWS_SECRET_ACCESS_KEY": "s", "GCP_CREDENTIALS": "c",
           "ANTHROPIC_AUTH_TOKEN": "t", "LLM_ACCESS": VENDOR_KEY, "EXTRA_DROP": "d",
           "KEEP_TOKEN": "k"}
    cfg = load_config(config, required=True)
    cfg.tools = {"env_keep": ["KEEP_TOKEN"], "env_drop": ["EXTRA_DROP"]}
    child = EnvPolicy.from_config(cfg).child_env(env)
    assert child == {"PATH": "/bin", "HOME": "/root", "KEEP_TOKEN": "k"}


def test_code_run_children_never_see_keys(home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "o" * 30)
    monkeypatch.setenv("HARMLESS_SETTING", "visible-value")
    model = script(tmp_path, [{"tool_calls": [{"name": "code_run", "args": {
        "type": "bash", "script": "env | cut -d= -f1 | sort; echo $HARMLESS_SETTING"}}]},
        {"text": "done"}])
    assert main(["-m", model, "-v", "show env"]) == 0
    out = "".join(capsys.readouterr())  # progress goes to stderr when stdout is not a terminal
    assert "visible-value" in out and "PATH" in out
    assert "GITHUB_TOKEN" not in out and "OPENAI_API_KEY" not in out


def test_env_keep_passes_a_named_variable_through(home, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GITHUB_TOKEN", GH_TOKEN)
    (home / "config.yaml").write_text("tools: {env_keep: [GITHUB_TOKEN], env_drop: [PATH2]}\n")
    monkeypatch.setenv("PATH2", "dropped-value")
    model = script(tmp_path, [{"tool_calls": [{"name": "code_run", "args": {
        "type": "bash", "script": 'echo "len=${#GITHUB_TOKEN} p2=[$PATH2]"'}}]},
        {"text": "done"}])
    assert main(["-m", model, "-v", "use gh"]) == 0
    out = "".join(capsys.readouterr())
    assert "len=40 p2=[]" in out and GH_TOKEN not in out


@pytest.mark.parametrize(("tools", "field"), [
    ({"bogus": 1}, "tools.bogus"), ({"env_keep": "GITHUB_TOKEN"}, "tools.env_keep"),
    ({"env_drop": [1]}, "tools.env_drop"), ({"max_calls_per_turn": 0}, "tools.max_calls_per_turn"),
    ({"max_calls_per_turn": "many"}, "tools.max_calls_per_turn")])
def test_tools_section_is_checked(home, tmp_path, capsys, tools, field):
    with pytest.raises(ConfigError) as err:
        tools_settings(Config(path="c.yaml", tools=tools))
    assert err.value.field == field
    (home / "config.yaml").write_text(yaml.safe_dump({"tools": tools}))
    assert main(["-m", script(tmp_path, [{"text": "x"}]), "go"]) == 2
    assert field in capsys.readouterr().err
    assert main(["config", "check"]) == 2
    assert field in capsys.readouterr().err


def test_tools_section_defaults():
    tools = tools_settings(Config())
    assert (tools.env_keep, tools.env_drop, tools.max_calls_per_turn) == ((), (), 32)


# ---- the vendor's key stays with the vendor ----------------------------------------------
OPENAI_KEY = "sk-proj-" + "v" * 40
ANTHROPIC_KEY = "sk-ant-api03-" + "w" * 40


def sent_key(request: dict) -> str:
    """The credential a request carried (Authorization or x-api-key), whatever the case."""
    headers = {k.lower(): v for k, v in request["headers"].items()}
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


@pytest.mark.parametrize("kind", ["openai", "openai-responses", "anthropic"])
def test_a_base_url_profile_without_a_key_sends_no_vendor_key(home, llm_server, monkeypatch,
                                                              kind):
    from llm_server import GO, Reply, client_for, run_chat

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    client = client_for(home, llm_server, provider=kind)  # its own base_url, no key named
    llm_server.queue(Reply(text="hi"))
    run_chat(client, GO)
    assert sent_key(llm_server.requests[0]) == "no-key"
    assert OPENAI_KEY not in json.dumps(llm_server.requests[0]["headers"])
    assert ANTHROPIC_KEY not in json.dumps(llm_server.requests[0]["headers"])


def test_an_env_only_setup_sends_the_key_to_the_base_url_of_the_same_variables(
        home, llm_server, monkeypatch):
    from llm_server import GO, Reply, run_chat

    monkeypatch.setenv("GA_MODEL", "openai:m")
    monkeypatch.setenv("OPENAI_BASE_URL", llm_server.openai_url)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    llm_server.queue(Reply(text="hi"))
    run_chat(llmcore.make_client(None), GO)
    assert sent_key(llm_server.requests[0]) == OPENAI_KEY


def test_the_sdk_variable_is_the_key_of_the_official_endpoint_only(monkeypatch):
    from llmcore.config import Profile, resolve_key

    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    assert resolve_key(Profile(name="gpt", model="m"), "c.yaml") == OPENAI_KEY
    proxy = Profile(name="proxy", model="m", base_url="https://proxy.example/v1")
    assert resolve_key(proxy, "c.yaml") is None
    monkeypatch.setenv("OPENAI_BASE_URL", "https://proxy.example/v1")  # same URL, own profile
    assert resolve_key(proxy, "c.yaml") is None


def test_config_check_shows_no_key_for_a_base_url_profile(home, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    (home / "config.yaml").write_text(yaml.safe_dump({"default": "vllm", "models": {
        "vllm": {"provider": "openai", "model": "q", "base_url": "http://127.0.0.1:9/v1"},
        "gpt": {"provider": "openai", "model": "m"}}}))
    assert main(["config", "check"]) == 0
    out = capsys.readouterr().out
    assert "vllm (default): openai q at http://127.0.0.1:9/v1, key none (not needed)" in out
    assert "gpt: openai m, key set (from $OPENAI_API_KEY)" in out and OPENAI_KEY not in out


# ---- one redactor for every writer -----------------------------------------------------
def test_redactor_knows_every_profile_and_secret_named_variables(config):
    env = {"MY_SERVICE_TOKEN": "tok-12345678", "SHORT_KEY": "abc", "LLM_ACCESS": VENDOR_KEY,
           "PLAIN": "not-a-secret-at-all"}
    redact = Redactor.from_config(load_config(config, required=True), environ=env)
    text = f"{KEY_A} {KEY_B} {VENDOR_KEY} tok-12345678 abc not-a-secret-at-all"
    assert redact(text) == f"{MASK} {MASK} {MASK} {MASK} abc not-a-secret-at-all"
    assert redact.data({"a": [KEY_B, 3]}) == {"a": [MASK, 3]}


def test_stream_redaction_holds_back_a_split_key():
    redact = Redactor([KEY_B])
    stream = redact.stream()
    pieces = [stream.feed(p) for p in ("my key is key-of-pro", "file-b-2222", "2222 ok")]
    shown = "".join(pieces) + stream.flush()
    assert shown == f"my key is {MASK} ok" and pieces[0] == "my key is "
    stream = redact.stream()
    assert stream.feed("key-of") == "" and stream.flush() == "key-of"  # not a key after all
    pem = "-----BEGIN KEY-----" + "Z" * 5000  # a long secret held in a variable
    stream = Redactor([pem]).stream()
    pieces = [stream.feed(pem[i:i + 700]) for i in range(0, len(pem), 700)]
    assert "".join(pieces) + stream.feed(" end") + stream.flush() == f"{MASK} end"


def test_tool_results_to_the_model_never_carry_another_vendors_key(config, home):
    client = ScriptedClient([{"tool_calls": [{"name": "file_read", "args": {
        "path": str(config)}}]}, {"text": "read"}])
    client.config = load_config(config, required=True)
    agent = GenericAgent(client, home=home, cwd=Path.cwd())
    events = list(agent.run_task("show the config"))
    sent = client.calls[1]["messages"][0]["tool_results"][0]["content"]
    assert "api_key" in sent and MASK in sent
    for key in (KEY_A, KEY_B, VENDOR_KEY):
        assert key not in sent and key not in json.dumps(events)


def test_a_next_prompt_from_a_tool_never_carries_a_key(config, home):
    class Leaky(GenericAgentHandler):
        def do_peek(self, args, response):
            return StepOutcome({"ok": 1}, next_prompt=f"the other key is {KEY_B}")
            yield

    client = ScriptedClient([{"tool_calls": [{"name": "peek", "args": {}}]}, {"text": "done"}])
    client.config = load_config(config, required=True)
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), handler_cls=Leaky)
    list(agent.run_task("peek"))
    sent = client.calls[1]["messages"][0]["content"]
    assert "the other key is" in sent and KEY_B not in sent


def test_every_writer_masks_a_key_of_a_profile_that_is_not_active(config, home, tmp_path,
                                                                   capsys):
    model = script(tmp_path, [
        {"text": f"<summary>read</summary>Echoing {KEY_B} back.",
         "tool_calls": [{"name": "file_read", "args": {"path": str(config)}}]},
        {"text": f"The other key is {VENDOR_KEY}."}])
    for flags in (["-v"], ["--json"]):
        assert main(["-m", model, *flags, f"read {config.name}"]) == 0
        shown = "".join(capsys.readouterr())
        assert "api_key" in shown
        for key in (KEY_A, KEY_B, VENDOR_KEY):
            assert key not in shown
    stored = [p.read_text() for p in (home / "sessions").glob("*.jsonl")]
    stored += [p.read_text() for p in (home / "memory" / "L4_raw_sessions").glob("*")]
    assert len(stored) == 2 + 3  # two journals, two L4 sessions and the index
    for text in stored:
        for key in (KEY_A, KEY_B, VENDOR_KEY):
            assert key not in text


def test_a_long_piped_prompt_is_saved_masked(config, home, tmp_path, monkeypatch, capsys):
    import sys

    monkeypatch.setenv("OPENAI_API_KEY", "sk-proj-" + "e" * 40)
    data = tmp_path / "dump.txt"
    data.write_text(f"KEY_B={KEY_B}\nOPENAI_API_KEY={'sk-proj-' + 'e' * 40}\n" + "log\n" * 800)
    with open(data) as stdin:
        monkeypatch.setattr(sys, "stdin", stdin)
        assert main(["-m", script(tmp_path, [{"text": "read it"}]), "what leaked?"]) == 0
    (saved,) = (home / "prompts").glob("*.txt")
    text = saved.read_text()
    assert f"KEY_B={MASK}" in text and f"OPENAI_API_KEY={MASK}" in text and "log\n" in text
    assert KEY_B not in text and "eeeeeeee" not in text


def test_the_model_log_masks_every_profiles_key(home, llm_server):
    from llm_server import Reply

    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m"},
                       other={"provider": "anthropic", "model": "m", "api_key": KEY_B})
    client = llmcore.make_client("p", config_path=cfg, home=home)
    llm_server.queue(Reply(text=f"you said {KEY_B}"))
    list(client.chat([{"role": "system", "content": "s"},
                      {"role": "user", "content": f"the key is {KEY_B}"}]))
    logs = list((home / "logs").glob("*.log"))
    assert logs and "the key is ***" in logs[0].read_text()
    assert KEY_B not in logs[0].read_text()


def test_sessions_export_and_show_mask_keys_in_an_old_journal(config, home, capsys):
    sessions = home / "sessions"
    sessions.mkdir()
    (sessions / "old.jsonl").write_text(json.dumps({"type": "state", "history": {
        "from": 0, "items": [{"role": "user", "content": [
            {"type": "text", "text": f"key {KEY_B}"}]}]}}) + "\n"
        + json.dumps({"type": "text", "text": f"the reply shows {KEY_B}"}) + "\n")
    assert main(["sessions", "export", "old"]) == 0
    out = capsys.readouterr().out
    assert "key ***" in out and KEY_B not in out
    assert main(["sessions", "show", "old"]) == 0
    out = capsys.readouterr().out
    assert "the reply shows ***" in out and KEY_B not in out


# ---- memory lint finds keys in every layer ---------------------------------------------
def test_lint_reports_a_configured_key_in_l4(config, home, capsys):
    store = MemoryStore(home)
    store.seed()
    store.l4_dir.mkdir(parents=True, exist_ok=True)
    (store.l4_dir / "s1.md").write_text(f"# Session\n- result code_run: {KEY_B}\n")
    assert memory_command("lint", home) == 1
    assert "s1.md:2: secret-looking string (a key from your config" in capsys.readouterr().out


def test_lint_reports_an_env_dump_in_l4(home, capsys):
    store = MemoryStore(home)
    store.seed()
    store.l4_dir.mkdir(parents=True, exist_ok=True)
    (store.l4_dir / "s1.md").write_text("OPENAI_API_KEY=abcd1234efgh5678ijkl\n"
                                        "GITHUB_TOKEN=q1w2e3r4t5y6u7i8o9p0\n")
    assert memory_command("lint", home) == 1
    out = capsys.readouterr().out
    assert "s1.md:1:" in out and "s1.md:2:" in out


QUOTED_KEY = 'key"with\\quote-33333333'  # JSON text holds it escaped: key\"with\\quote-…


def test_a_key_with_a_quote_or_backslash_is_masked_in_the_journal_and_exports(home, tmp_path,
                                                                              capsys):
    (home / "config.yaml").write_text(yaml.safe_dump({"models": {
        "q": {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
              "api_key": QUOTED_KEY}}}))
    model = script(tmp_path, [{"text": f"Echoing {QUOTED_KEY} back."}])
    assert main(["-m", model, f"remember {QUOTED_KEY}"]) == 0
    capsys.readouterr()
    (journal,) = (home / "sessions").glob("*.jsonl")
    escaped = json.dumps(QUOTED_KEY)[1:-1]
    assert "remember ***" in journal.read_text() and escaped not in journal.read_text()
    journal.write_text(journal.read_text().replace("remember ***", f"remember {escaped}"))
    assert main(["sessions", "export", journal.stem]) == 0
    out = capsys.readouterr().out
    assert "remember ***" in out and escaped not in out and QUOTED_KEY not in out


def test_the_model_log_masks_a_quoted_key_inside_tool_call_json(home, llm_server):
    from llm_server import Reply

    cfg = write_config(home, llm_server, p={"provider": "openai", "model": "m"},
                       other={"provider": "anthropic", "model": "m", "api_key": QUOTED_KEY})
    client = llmcore.make_client("p", config_path=cfg, home=home)
    args = json.dumps({"path": "k.txt", "content": QUOTED_KEY})
    llm_server.queue(Reply(tool_calls=[("file_write", args)]), Reply(text="ok"))
    tools = [{"name": "file_write", "description": "w", "parameters": {"type": "object"}}]
    resp = None
    for step in (1, 2):
        gen = client.chat([{"role": "system", "content": "s"}, {"role": "user", "content": "go",
                           **({"tool_results": [{"tool_use_id": resp.tool_calls[0].id,
                                                 "content": {"written": QUOTED_KEY}}]}
                              if step == 2 else {})}], tools)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            resp = stop.value
    (log,) = (home / "logs").glob("*.log")
    text = log.read_text()
    assert "[tool_call" in text and "***" in text
    assert json.dumps(QUOTED_KEY)[1:-1] not in text and QUOTED_KEY not in text


def test_a_ga_started_by_ga_code_says_where_its_stripped_key_must_come_from(home, tmp_path,
                                                                           monkeypatch, capsys):
    import sys

    from tools.procs import TIE_ENV

    root = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("PYTHONPATH", str(root))
    monkeypatch.setenv("MY_LLM_KEY", "k" * 20)  # the outer ga has it; its children do not
    (home / "config.yaml").write_text(yaml.safe_dump({"models": {"real": {
        "provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "MY_LLM_KEY"}}}))
    child = f"{sys.executable} {root / 'ga.py'} -m real 'say hi'; echo exit=$? tied=${TIE_ENV}"
    model = script(tmp_path, [{"tool_calls": [{"name": "code_run", "args": {
        "type": "bash", "script": child}}]}, {"text": "done"}])
    assert main(["-m", model, "start a subagent"]) == 0
    (journal,) = (home / "sessions").glob("*.jsonl")
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    out = next(e["data"]["stdout"] for e in events if e["type"] == "tool_result")
    assert "environment variable MY_LLM_KEY is not set" in out and "exit=2 tied=/" in out
    assert "started by another ga" in out and "api_key" in out and "tools.env_keep" in out
