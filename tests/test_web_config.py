"""The browser: config keys, finding it, telling the user and the model what is missing,
and the web tools' output budget (SPEC §9)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from llmcore.base import ConfigError
from tools.web import BrowserConfig, budget, unavailable_reason, web_calls
from tools.web.cdp import Connection, ConnectionLost

ROOT = Path(__file__).resolve().parent.parent


def test_without_the_browser_extra_the_hint_is_readmes_install_command(monkeypatch):
    command = re.search(r'pip install -e "\.\[browser\]"', (ROOT / "README.md").read_text())
    monkeypatch.setitem(sys.modules, "websocket", None)
    assert command.group(0) in unavailable_reason(BrowserConfig())
    with pytest.raises(ConnectionLost, match=re.escape(command.group(0))):
        Connection("ws://127.0.0.1:9/devtools/browser/x")


def test_a_failed_web_call_shows_as_an_error_in_the_console(tmp_path, capsys):
    from frontends.cli import main

    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\necho 'no display here' >&2\nexit 1\n")
    broken.chmod(0o755)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"browser": {"executable": str(broken)}}))
    steps = [{"text": "<summary>look</summary>", "tool_calls": [
                 {"name": "web_scan", "args": {}},
                 {"name": "web_execute_js", "args": {"script": "1"}}]},
             {"text": "could not browse"}]
    model = tmp_path / "s.yaml"
    model.write_text(yaml.safe_dump(steps), encoding="utf-8")
    assert main(["--config", str(cfg), "-m", f"scripted:{model}", "browse"]) == 0
    outcomes = [ln.strip() for ln in capsys.readouterr().err.splitlines() if "↳" in ln]
    assert len(outcomes) == 2 and all("no display here" in o for o in outcomes), outcomes
    assert outcomes[0].startswith("↳ error: ") and outcomes[1].startswith("↳ failed: ")


def test_a_missing_configured_browser_is_offered_and_its_hint_reaches_stderr(tmp_path, capsys):
    from frontends.cli import main

    missing = tmp_path / "opt" / "chrome"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"browser": {"executable": str(missing)}}))
    assert main(["--config", str(cfg), "tools"]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"^web_scan +built-in +\d+ tokens +offered$", listed, re.M), listed
    steps = [{"text": "<summary>look</summary>", "tool_calls": [
                 {"name": "web_scan", "args": {}},
                 {"name": "code_run", "args": {"script": "print('CODE-RAN')"}}]},
             {"text": "could not browse"}]
    model = tmp_path / "s.yaml"
    model.write_text(yaml.safe_dump(steps), encoding="utf-8")
    assert main(["--config", str(cfg), "--json", "-m", f"scripted:{model}", "browse"]) == 0
    out, err = capsys.readouterr()
    told = [ln for ln in err.splitlines() if ln.startswith("ga: web tools:")]
    assert len(told) == 1 and str(missing) in told[0] and "apt-get install chromium" in told[0]
    results = [json.loads(ln)["data"] for ln in out.splitlines() if '"tool_result"' in ln]
    assert "apt-get install chromium" in results[0]["msg"] and "CODE-RAN" in str(results[1])


def test_executable_comes_from_config_then_ga_chromium(monkeypatch, tmp_path):
    monkeypatch.setenv("GA_CHROMIUM", str(tmp_path / "env-chromium"))
    assert "$GA_CHROMIUM" in BrowserConfig().unavailable_reason()
    fake = tmp_path / "my-chrome"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert BrowserConfig(executable=str(fake)).find_executable() == str(fake)
    assert BrowserConfig(cdp_url="http://127.0.0.1:9").unavailable_reason() is None


@pytest.mark.parametrize("section, field", [
    ({"colour": "red"}, "browser.colour"),
    ({"mode": "borrow"}, "browser.mode"),
    ({"headless": "yes"}, "browser.headless"),
    ({"cdp_url": "127.0.0.1:9222"}, "browser.cdp_url"),
    ({"window_size": "big"}, "browser.window_size"),
])
def test_bad_browser_config_names_the_key(section, field):
    with pytest.raises(ConfigError) as err:
        BrowserConfig.from_dict(section, "config.yaml")
    assert err.value.field == field


def test_a_misspelt_browser_key_names_its_close_match():
    with pytest.raises(ConfigError) as err:
        BrowserConfig.from_dict({"headles": True}, "config.yaml")
    assert str(err.value) == "config.yaml: browser.headles: unknown setting; did you mean headless?"


def test_browser_config_values(monkeypatch):
    cfg = BrowserConfig.from_dict({"window_size": "1024x768", "cdp_url": "ws://h:1/x"})
    assert cfg.window_size == (1024, 768) and cfg.attach
    assert not BrowserConfig.from_dict({"mode": "launch", "cdp_url": "ws://h:1/x"}).attach
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert BrowserConfig().is_headless() and not BrowserConfig(headless=False).is_headless()


def test_bad_browser_config_exits_2_naming_file_and_key(tmp_path, capsys):
    from frontends.cli import main

    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"browser": {"mode": "borrow"}}), encoding="utf-8")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump([{"text": "hi"}]), encoding="utf-8")
    assert main(["--config", str(cfg), "-m", f"scripted:{script}", "hi"]) == 2
    err = capsys.readouterr().err
    assert str(cfg) in err and "browser.mode" in err


def test_config_check_names_the_browser_or_a_bad_browser_key(tmp_path, capsys, monkeypatch):
    from frontends.cli import main

    monkeypatch.setenv("GA_CHROMIUM", str(tmp_path / "no-chromium"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"browser": {"cdp_url": "http://127.0.0.1:9333"}}))
    main(["--config", str(cfg), "config", "check"])
    assert "browser: attach to http://127.0.0.1:9333" in capsys.readouterr().out
    cfg.write_text(yaml.safe_dump({"browser": {"headless": "no"}}))
    assert main(["--config", str(cfg), "config", "check"]) == 2
    assert "browser.headless" in capsys.readouterr().err
    cfg.write_text(yaml.safe_dump({"browser": {}}))
    assert main(["--config", str(cfg), "config", "check"]) == 2
    out = capsys.readouterr().out
    assert "browser: none, the web tools are not offered: $GA_CHROMIUM" in out
    assert "problem: $GA_CHROMIUM names" in out


def test_config_check_reports_a_browser_executable_that_does_not_exist(tmp_path, capsys,
                                                                       monkeypatch):
    from frontends.cli import main

    monkeypatch.delenv("GA_CHROMIUM", raising=False)
    missing = tmp_path / "opt" / "chrome"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"browser": {"executable": str(missing)}}))
    assert main(["--config", str(cfg), "config", "check"]) == 2
    out = capsys.readouterr().out
    assert f"problem: browser.executable names {missing}, which is not an executable" in out
    assert "\nok\n" not in out


def test_budget_scales_with_the_context_window_and_splits_among_web_calls():
    assert budget(35_000) == 35_000
    assert budget(35_000, context_win=70_000) == 70_000
    assert budget(35_000, context_win=1_000_000) == 105_000
    assert budget(35_000, context_win=8_000) == 35_000
    assert budget(8_000, context_win=35_000, calls=2) == 4_000

    class Call:
        def __init__(self, name):
            self.function = type("F", (), {"name": name})()

    reply = type("R", (), {"tool_calls": [Call("web_scan"), Call("code_run"),
                                          Call("web_execute_js")]})()
    assert web_calls(reply) == 2 and web_calls(None) == 1
