"""``ga config import``: an original GenericAgent mykey.py, read without running it, becomes
a private config whose profiles run tasks against the local test server."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml
from llm_server import Reply, llm_server

from frontends.cli import main
from frontends.mykey import base_url

__all__ = ["llm_server"]  # the fixture

CLAUDE_KEY = "sk-ant-api03-claude-key-0a1b2c3d"
GPT_KEY = "sk-proj-gpt-key-4e5f6a7b8c9d"
CHAT_KEY = "deepseek-key-0123456789abcdef"
RELAY_KEY = "relay-key-fedcba9876543210"
BOT_TOKEN = "12345:telegram-bot-token-value"
KEYS = (CLAUDE_KEY, GPT_KEY, CHAT_KEY, RELAY_KEY, BOT_TOKEN)
DEAD_PROXY = "http://127.0.0.1:9"

# A GA-style mykey.py: every session kind, a mixin that names one member and indexes
# another, a global proxy, chat-bot settings, and code that would leave a marker if run.
MYKEY = '''"""My GenericAgent keys."""
import os
open({marker!r}, "w").write("mykey.py was executed")

native_claude_config = {{
    'name': 'claude', 'apikey': {claude_key!r}, 'apibase': {server!r},
    'model': 'claude-opus-4-7[1m]', 'thinking_type': 'enabled', 'thinking_budget_tokens': 2048,
    'reasoning_effort': 'xhigh', 'read_timeout': 180, 'fake_cc_system_prompt': True,
}}
native_oai_config = {{
    'name': 'gpt', 'apikey': {gpt_key!r}, 'apibase': '{server}/v1', 'model': 'gpt-5.4',
    'api_mode': 'responses', 'reasoning_effort': 'high', 'thinking_type': 'adaptive',
}}
native_oai_config_chat = {{
    'name': 'chat', 'apikey': {chat_key!r}, 'apibase': {server!r}, 'model': 'deepseek-chat',
    'temperature': 0.3, 'max_retries': 2, 'stream': False,
}}
claude_config = {{
    'apikey': {relay_key!r}, 'apibase': '{server}/v1/messages',
    'model': 'claude-sonnet-4-6',
}}
oai_config = {{
    'name': 'local', 'apikey': '', 'apibase': '{server}/v1/chat/completions',
    'model': 'qwen3', 'proxy': {dead_proxy!r},
}}
mixin_config = {{'llm_nos': ('claude', 2), 'max_retries': 3, 'base_delay': 0.5,
                 'spring_back': 60}}
broken_mixin_config = {{'llm_nos': []}}
proxy = {server!r}
tg_bot_token = {bot_token!r}
langfuse_config = {{'public_key': 'pk-lf-1', 'secret_key': 'sk-lf-2'}}
native_oai_cookie = os.environ['HOME']
'''


@pytest.fixture
def mykey(tmp_path, llm_server):
    path = tmp_path / "mykey.py"
    path.write_text(MYKEY.format(
        marker=str(tmp_path / "MARKER"), server=f"http://127.0.0.1:{llm_server.port}",
        claude_key=CLAUDE_KEY, gpt_key=GPT_KEY, chat_key=CHAT_KEY, relay_key=RELAY_KEY,
        bot_token=BOT_TOKEN, dead_proxy=DEAD_PROXY), encoding="utf-8")
    return path


def line_of(path, start: str) -> int:
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(no for no, line in enumerate(lines, 1) if line.startswith(start))


def sent_key(request: dict) -> str:
    headers = {k.lower(): v for k, v in request["headers"].items()}
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


def expected_models(server: str) -> dict:
    return {
        "claude": {"provider": "anthropic", "model": "claude-opus-4-7", "base_url": server,
                   "api_key": CLAUDE_KEY, "thinking": "enabled", "thinking_budget": 2048,
                   "reasoning_effort": "max", "read_timeout": 180.0, "proxy": server},
        "gpt": {"provider": "openai-responses", "model": "gpt-5.4", "base_url": f"{server}/v1",
                "api_key": GPT_KEY, "reasoning_effort": "high", "proxy": server},
        "chat": {"provider": "openai", "model": "deepseek-chat", "base_url": f"{server}/v1",
                 "api_key": CHAT_KEY, "temperature": 0.3, "max_retries": 2, "proxy": server},
        "claude_config": {"provider": "anthropic", "model": "claude-sonnet-4-6",
                          "base_url": server, "api_key": RELAY_KEY, "tool_mode": "text",
                          "proxy": server},
        "local": {"provider": "openai", "model": "qwen3", "base_url": f"{server}/v1",
                  "tool_mode": "text", "proxy": DEAD_PROXY},
        "mixin_config": {"mixin": ["claude", "chat"], "max_turn_attempts": 4,
                         "spring_back": 60.0},
    }


def test_import_maps_every_session_kind_and_never_runs_the_file(mykey, home, llm_server,
                                                                 capsys):
    assert main(["config", "import", str(mykey)]) == 0
    out, err = capsys.readouterr()
    assert not (mykey.parent / "MARKER").exists()  # read with ast, never executed
    data = yaml.safe_load((home / "config.yaml").read_text(encoding="utf-8"))
    assert data["default"] == "claude"  # the first session
    assert data["models"] == expected_models(f"http://127.0.0.1:{llm_server.port}")
    for line in ("native_claude_config -> claude (native Claude): anthropic claude-opus-4-7",
                 "native_oai_config -> gpt (native OpenAI): openai-responses gpt-5.4",
                 "claude_config -> claude_config (Claude, text tool protocol)",
                 "oai_config -> local (OpenAI, text tool protocol)",
                 "mixin_config -> mixin_config (failover): failover over claude, chat",
                 f"key ***{CLAUDE_KEY[-4:]}"):
        assert line in out
    for why in ("[1m] taken off the model", "1M-context beta header",
                "fake_cc_system_prompt left out", "stream left out",
                "thinking_type left out: the original sends it to Claude only",
                "base_delay left out", "proxy: the file's global proxy",
                "broken_mixin_config: its llm_nos lists no session",
                "tg_bot_token: not a model session", "langfuse_config: no session kind",
                f"native_oai_cookie: line {line_of(mykey, 'native_oai_cookie')}: its value "
                "is not a literal",
                "line 2: Import statement, not run", "line 3: Expr statement, not run"):
        assert why in out, why
    assert not any(key in out + err for key in KEYS)
    assert "config check" in err


def test_the_imported_config_passes_check_and_runs_a_task(mykey, home, tmp_path, llm_server,
                                                          capsys):
    assert main(["config", "import", str(mykey)]) == 0
    assert main(["config", "check"]) == 0
    capsys.readouterr()
    args = json.dumps({"path": "out.txt", "content": "written through the imported config"})
    llm_server.queue(Reply(text="<summary>write</summary>Writing.",
                           tool_calls=[("file_write", args)]),
                     Reply(text="The file is written."))
    assert main(["write the file"]) == 0  # no -m: the default, the first session
    out, err = capsys.readouterr()
    assert (tmp_path / "work" / "out.txt").read_text() == "written through the imported config"
    assert "The file is written." in out
    first = llm_server.requests[0]
    assert first["path"] == "/v1/messages" and sent_key(first) == CLAUDE_KEY
    assert first["target"].startswith("http://")  # sent through the global proxy
    assert first["body"]["model"] == "claude-opus-4-7"
    assert first["body"]["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert not any(key in out + err for key in KEYS)


@pytest.mark.parametrize(("profile", "path", "model", "key"), [
    ("gpt", "/v1/responses", "gpt-5.4", GPT_KEY),
    ("chat", "/v1/chat/completions", "deepseek-chat", CHAT_KEY),
    ("claude_config", "/v1/messages", "claude-sonnet-4-6", RELAY_KEY),
])
def test_each_imported_profile_reaches_its_endpoint(mykey, home, llm_server, profile, path,
                                                    model, key, capsys):
    assert main(["config", "import", str(mykey)]) == 0
    llm_server.queue(Reply(text="hello back"))
    assert main(["-m", profile, "say hello"]) == 0
    assert "hello back" in capsys.readouterr().out
    sent = llm_server.requests[-1]
    assert (sent["path"], sent["body"]["model"], sent_key(sent)) == (path, model, key)


def test_the_imported_mixin_fails_over_to_its_next_member(mykey, home, llm_server, capsys):
    assert main(["config", "import", str(mykey)]) == 0
    llm_server.queue(Reply(status=401, message="bad key"), Reply(text="answered by chat"))
    assert main(["-m", "mixin_config", "say hello"]) == 0
    assert "answered by chat" in capsys.readouterr().out
    assert [r["path"] for r in llm_server.requests] == ["/v1/messages", "/v1/chat/completions"]


def test_the_config_is_private_from_its_creation(mykey, home, monkeypatch, capsys):
    modes = []
    real_replace = os.replace

    def replace(src, dst, *a, **kw):  # the temp file's mode, the moment before it is renamed
        modes.append(stat.S_IMODE(os.stat(src, dir_fd=kw.get("src_dir_fd")).st_mode))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace)
    old_umask = os.umask(0)  # a umask that takes nothing away
    try:
        assert main(["config", "import", str(mykey)]) == 0
    finally:
        os.umask(old_umask)
    assert modes == [0o600]
    assert stat.S_IMODE((home / "config.yaml").stat().st_mode) == 0o600


def test_an_existing_config_is_replaced_only_with_force(mykey, home, capsys):
    cfg = home / "config.yaml"
    cfg.write_text("models: {}\n", encoding="utf-8")
    cfg.chmod(0o644)
    assert main(["config", "import", str(mykey)]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "--force" in err and "Traceback" not in err
    assert cfg.read_text(encoding="utf-8") == "models: {}\n"
    assert main(["config", "import", str(mykey), "--force"]) == 0
    assert "claude" in yaml.safe_load(cfg.read_text(encoding="utf-8"))["models"]
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o600


def test_out_writes_another_file_and_says_how_to_use_it(mykey, home, tmp_path, capsys):
    out = tmp_path / "imported" / "ga.yaml"
    assert main(["config", "import", str(mykey), "--out", str(out)]) == 0
    assert not (home / "config.yaml").exists() and out.exists()
    assert f"--config {out} config check" in capsys.readouterr().err
    assert main(["--config", str(out), "config", "check"]) == 0


@pytest.mark.parametrize(("text", "message"), [
    ("native_claude_config = {'apikey': 'k'\n", "not valid Python (line 1"),
    ("native_claude_config = " + "1+" * 20_000 + "1\n", "nested too deeply"),
    ("native_claude_config = " + "-" * 100_000 + "1\n", "nested too deeply"),
    ("tg_bot_token = 'abc'\n", "no model session to import"),
], ids=["unclosed", "sum-too-deep", "minus-too-deep", "no-session"])
def test_a_file_with_nothing_to_import_writes_nothing(tmp_path, home, text, message, capsys):
    path = tmp_path / "mykey.py"
    path.write_text(text, encoding="utf-8")
    assert main(["config", "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and str(path) in err and "Traceback" not in err
    assert not (home / "config.yaml").exists()


def test_config_import_help(capsys):
    assert main(["config", "import", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: ga config import") and "--force" in out


@pytest.mark.parametrize(("apibase", "provider", "url"), [
    ("https://api.openai.com", "openai", "https://api.openai.com/v1"),
    ("https://ark.example.com/api/v3/", "openai", "https://ark.example.com/api/v3"),
    ("https://h.example/v1/chat/completions", "openai", "https://h.example/v1"),
    ("https://h.example/v1/responses", "openai-responses", "https://h.example/v1"),
    ("https://api.anthropic.com/v1", "anthropic", "https://api.anthropic.com"),
    ("https://open.bigmodel.cn/api/anthropic", "anthropic",
     "https://open.bigmodel.cn/api/anthropic"),
])
def test_apibase_becomes_the_sdk_base_url_for_the_same_endpoint(apibase, provider, url):
    assert base_url(apibase, provider) == (url, [])


def test_an_apibase_the_sdk_cannot_reach_the_same_way_is_pointed_out():
    url, notes = base_url("https://relay.example/api/chat$", "openai")
    assert url == "https://relay.example/api/chat/v1" and "check the base_url" in notes[0]
