"""Config loading, validation, zero-config from env, runtime overrides."""

from __future__ import annotations

import pytest
from llm_server import llm_server, write_config

import llmcore
from llmcore import ConfigError

__all__ = ["llm_server"]


def write(home, text):
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_default_profile_from_home_config(home, llm_server):
    write_config(home, llm_server, a={"provider": "openai", "model": "m-a"},
                 b={"provider": "anthropic", "model": "m-b"})
    (home / "config.yaml").write_text((home / "config.yaml").read_text() + "default: b\n")
    client = llmcore.make_client(None)
    assert client.name == "b" and client.model == "m-b"
    assert client.profiles() == ["a", "b"]


def test_ga_config_env_and_ga_model(home, llm_server, monkeypatch, tmp_path):
    path = write_config(tmp_path, llm_server, x={"provider": "openai", "model": "mx"})
    monkeypatch.setenv("GA_CONFIG", path)
    monkeypatch.setenv("GA_MODEL", "x")
    assert llmcore.make_client(None).model == "mx"


def test_zero_config_from_standard_env(monkeypatch):
    monkeypatch.setenv("GA_MODEL", "anthropic:claude-sonnet-4-6")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-zero-config-key")
    client = llmcore.make_client(None)
    assert client.model == "claude-sonnet-4-6" and client.profile.provider == "anthropic"


def test_provider_model_spec_uses_env_base_url(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    client = llmcore.make_client("openai:qwen3")
    assert client.profile.base_url == "http://127.0.0.1:9/v1"


def test_no_model_anywhere_is_a_clear_error():
    with pytest.raises(ConfigError) as err:
        llmcore.make_client(None)
    assert "GA_MODEL" in str(err.value)


def test_official_endpoint_without_key_is_an_error():
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("openai:gpt-5.4")
    assert "OPENAI_API_KEY" in str(err.value)


def test_unset_api_key_env_names_the_variable(home):
    write(home, "models:\n  c: {provider: anthropic, model: m, api_key_env: NOPE_KEY}\n")
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("c")
    assert "NOPE_KEY" in str(err.value) and "config.yaml" in str(err.value)


@pytest.mark.parametrize(("text", "field", "words"), [
    ("models:\n  c: {provider: bogus, model: m}\n", "models.c.provider", "anthropic"),
    ("models:\n  c: {provider: openai, model: m, colour: red}\n", "models.c.colour", "allowed"),
    ("models:\n  c: {provider: openai, model: m, tempreature: 0.2}\n", "models.c.tempreature",
     "unknown field; did you mean temperature?"),
    ("modles:\n  c: {provider: openai, model: m}\n", "modles",
     "unknown top-level key; did you mean models?"),
    ("models:\n  c: {provider: openai, model: m, max_tokens: lots}\n", "models.c.max_tokens",
     "integer"),
    ("models:\n  c: {provider: openai}\n", "models.c.model", "missing"),
    ("models:\n  c: {mixin: [nope]}\n", "models.c.mixin", "nope"),
    ("models:\n  c: {provider: openai, model: m, extra_body: [1]}\n", "models.c.extra_body",
     "mapping"),
    ("models: [\n", None, "YAML"),
    ("default: zzz\nmodels: {}\n", "default", "zzz"),
])
def test_bad_config_is_one_clear_message(home, text, field, words):
    path = write(home, text)
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("c")
    assert err.value.path == path and err.value.field == field
    assert words in str(err.value) and "\n" not in str(err.value)


def test_a_misspelt_tools_key_names_its_close_match_and_a_far_one_the_allowed(home):
    from llmcore.config import load_config, tools_settings

    write(home, "tools:\n  max_calls_per_trun: 3\n")
    with pytest.raises(ConfigError) as err:
        tools_settings(load_config(home / "config.yaml", required=True))
    assert err.value.message == "unknown setting; did you mean max_calls_per_turn?"
    write(home, "tools:\n  colour: red\n")
    with pytest.raises(ConfigError) as err:
        tools_settings(load_config(home / "config.yaml", required=True))
    assert err.value.message.startswith("unknown setting; allowed: env_keep, env_drop")


def test_explicit_missing_config_is_an_error(tmp_path):
    with pytest.raises(ConfigError):
        llmcore.make_client("x", config_path=str(tmp_path / "none.yaml"))


def test_local_base_url_needs_no_key(home):
    write(home, "models:\n  local: {provider: openai, base_url: 'http://127.0.0.1:1/v1', "
                "model: qwen3, tool_mode: text}\n")
    assert llmcore.make_client("local").profile.tool_mode == "text"


def test_set_option_coerces_and_validates(home, llm_server):
    write_config(home, llm_server, a={"provider": "openai", "model": "m"})
    client = llmcore.make_client("a")
    client.set_option("temperature", "0.5")
    client.set_option("max_tokens", "99")
    assert client.profile.temperature == 0.5 and client.profile.max_tokens == 99
    with pytest.raises(ConfigError):
        client.set_option("max_tokens", "many")
    with pytest.raises(ConfigError):
        client.set_option("wibble", "1")


def test_switch_unknown_profile_is_config_error(home, llm_server):
    write_config(home, llm_server, a={"provider": "openai", "model": "m"})
    client = llmcore.make_client("a")
    with pytest.raises(ConfigError):
        client.switch("nope")


def test_scripted_spec_and_profile_still_work(home, tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text("- text: hi\n")
    assert llmcore.make_client(f"scripted:{script}").steps == [{"text": "hi"}]
    write(home, f"models:\n  demo: {{provider: scripted, script: '{script}'}}\n")
    client = llmcore.make_client("demo")
    assert client.steps == [{"text": "hi"}] and client.profiles() == ["demo"]


def test_importing_llmcore_does_not_import_the_sdks():
    import subprocess
    import sys

    code = "import sys, llmcore; print('openai' in sys.modules or 'anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ga_config_naming_a_missing_file_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("GA_CONFIG", str(tmp_path / "gone.yaml"))
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("scripted:x.yaml")
    assert err.value.path == str(tmp_path / "gone.yaml") and "$GA_CONFIG" in str(err.value)


def test_yaml_error_gives_the_line_and_column(home):
    path = write(home, "models:\n  a: {provider: openai\n  b: 1\n")
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("a")
    assert err.value.path == path and "invalid YAML: line 3, column 4:" in str(err.value)


def test_unknown_model_lists_the_profiles(home, tmp_path):
    write(home, f"models:\n  alpha: {{provider: scripted, script: {tmp_path / 'x.yaml'}}}\n"
                "  beta: {mixin: [alpha]}\n")
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("nosuch")
    assert str(err.value).endswith("; profiles: alpha, beta")


def test_unknown_model_without_a_config_says_there_is_none():
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("nosuch")
    assert "no config file (see: ga config path)" in str(err.value)


def test_provider_model_without_a_key_names_the_variable_not_a_config_field():
    with pytest.raises(ConfigError) as err:
        llmcore.make_client("openai:gpt-5.4")
    assert err.value.path is None and err.value.field == "openai:gpt-5.4"
    assert err.value.message == "no API key: set the environment variable OPENAI_API_KEY"


def test_session_log_is_named_after_the_session_once_known(tmp_path):
    from llmcore.logs import SessionLog
    from llmcore.secrets import Redactor

    log = SessionLog(tmp_path, Redactor())
    assert log.path.name.startswith("llm-") and log.path.parent == tmp_path
    log.session_id = "20260101-120000-abcd"
    log.note("hello")
    assert (tmp_path / "llm-20260101-120000-abcd.log").read_text().endswith("hello\n")


LOCAL_CONTEXT = 8192  # the context local servers usually run with


def test_readme_local_profiles_fit_a_local_server_context(tmp_path):
    import re
    from pathlib import Path

    from llmcore.config import load_config

    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n(default: claude\nmodels:.*?)```", readme, re.S).group(1)
    (tmp_path / "readme.yaml").write_text(block, encoding="utf-8")
    cfg = load_config(tmp_path / "readme.yaml", required=True)
    for name in ("ollama", "vllm", "llamacpp"):
        prof = cfg.profiles[name]
        assert prof.context_win + prof.max_tokens <= LOCAL_CONTEXT, name
