"""The browser's life: started lazily, never outliving the runtime, attached browsers left
alone, a crash or a missing browser reported to the model (SPEC §9)."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from web_site import need_browser, web_site

from ga import GenericAgent
from llmcore.base import ConfigError
from llmcore.scripted import ScriptedClient
from llmcore.secrets import EnvPolicy
from tools.procs import OWNER_FILE, STALE_GRACE_SECONDS, end_group, popen_tied, release
from tools.web import BrowserConfig, budget, unavailable_reason, web_calls
from tools.web.browser import Browser
from tools.web.cdp import Connection, ConnectionLost
from tools.web.execute import web_execute_js
from tools.web.launch import DEBIAN_CHROMIUM, RUN_PREFIX, SHORT_TMP, attach_url
from tools.web.scan import web_scan

__all__ = ["web_site"]
ROOT = Path(__file__).resolve().parent.parent
EXIT_WAIT = 10.0


def running_with(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line mentions ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != b"Z":
            found.append(int(entry))
    return found


def wait_exit(pid: int, timeout: float = EXIT_WAIT) -> bool:
    """Wait for any process to end, on its pidfd (no polling)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], timeout)[0])
    finally:
        os.close(fd)


@pytest.fixture
def short_temp():
    """A temp dir with a short path (Chromium's socket paths must stay under 108 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="ga-test-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ga_env(tmp_path: Path, temp: Path) -> dict:
    return {**os.environ, "GA_HOME": str(tmp_path / "h"), "PYTHONPATH": str(ROOT),
            "TMPDIR": str(temp)}


def scan_script(tmp_path: Path, then: list[dict]) -> str:
    steps = [{"text": "<summary>look</summary>", "tool_calls": [{"name": "web_scan", "args": {}}]},
             *then]
    path = tmp_path / "script.yaml"
    path.write_text(yaml.safe_dump(steps), encoding="utf-8")
    return f"scripted:{path}"


def test_nothing_is_left_after_ga_exits(tmp_path, short_temp):
    need_browser()
    env = ga_env(tmp_path, short_temp)
    model = scan_script(tmp_path, [{"text": "seen"}])
    proc = subprocess.run([sys.executable, str(ROOT / "ga.py"), "--json", "-m", model, "look"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(x) for x in proc.stdout.splitlines() if '"tool_result"' in x]
    assert results[0]["data"].startswith('{"status": "success"')
    wait_cleaned(env["TMPDIR"])
    assert running_with(env["TMPDIR"]) == []
    assert os.listdir(env["TMPDIR"]) == []


def test_nothing_is_left_after_ctrl_c(tmp_path, short_temp):
    need_browser()
    env = ga_env(tmp_path, short_temp)
    sleep = {"name": "code_run", "args": {"script": "sleep 60", "type": "bash"}}
    long_run = {"text": "<summary>wait</summary>", "tool_calls": [sleep]}
    model = scan_script(tmp_path, [long_run])
    proc = subprocess.Popen([sys.executable, str(ROOT / "ga.py"), "--json", "-m", model, "look"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    for line in proc.stdout:
        if '"tool_call"' in line and "code_run" in line:
            break
    assert running_with(env["TMPDIR"]), "the browser should be running now"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130
    wait_cleaned(env["TMPDIR"])
    assert running_with(env["TMPDIR"]) == []
    assert os.listdir(env["TMPDIR"]) == []


HOLDER = """
import json, sys
from tools.procs import runtime_dir
from tools.web.browser import Browser
b = Browser()
b.tab()
print(json.dumps({"browser": b.launched.proc.pid, "runtime": str(runtime_dir()),
                  "run_dir": str(b.launched.run_dir)}), flush=True)
sys.stdin.read()
"""


def wait_cleaned(marker: str) -> None:
    """Wait for whatever still runs with ``marker`` (the runtime's watchdog cleaning up)."""
    for pid in running_with(marker):
        assert wait_exit(pid), f"pid {pid} ({marker}) did not end"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGABRT])
def test_browser_dies_and_its_files_go_when_the_runtime_is_killed(tmp_path, short_temp, sig):
    need_browser()
    env = ga_env(tmp_path, short_temp)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    info = json.loads(proc.stdout.readline())
    assert Path(info["run_dir"], "profile").is_dir()
    proc.send_signal(sig)
    proc.wait(timeout=10)
    assert wait_exit(info["browser"])
    wait_cleaned(info["runtime"])
    assert running_with(info["run_dir"]) == []
    assert not Path(info["run_dir"]).exists() and not Path(info["runtime"]).exists()
    assert os.listdir(env["TMPDIR"]) == []  # no org.chromium.* left either


USER_FLAGS = ("--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--no-sandbox",
              "--remote-debugging-port=0")
PORT_WAIT = 20.0


@contextlib.contextmanager
def user_chromium(profile: Path, url: str):
    """A Chromium as a user starts it, with --remote-debugging-port: yields (process, its
    http://127.0.0.1:port). Tied to this test run and ended on the way out, whatever
    happened in between."""
    argv = [os.environ.get("GA_CHROMIUM") or DEBIAN_CHROMIUM, *USER_FLAGS,
            f"--user-data-dir={profile}", url]
    proc = popen_tied(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                      env={**os.environ, "TMPDIR": str(profile)})
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + PORT_WAIT
        while len(port_file.exists() and port_file.read_text().split() or []) != 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no DevTools port"
            time.sleep(0.02)  # the browser writes this file once it listens
        yield proc, f"http://127.0.0.1:{port_file.read_text().split()[0]}"
    finally:
        end_group(proc)
        proc.wait()
        release(proc)


@pytest.fixture
def users_browser(short_temp, web_site):
    """A Chromium the user started with --remote-debugging-port, with two tabs."""
    need_browser()
    with user_chromium(short_temp, web_site("/nav1.html")) as (proc, url):
        user = Connection(attach_url(url))
        try:
            user.call("Target.createTarget", {"url": web_site("/nav2.html")})  # in front
            yield proc, url, user
        finally:
            user.close()


def test_the_users_browser_of_a_test_ends_even_when_its_setup_fails(short_temp):
    need_browser()
    with pytest.raises(ConnectionLost):
        with user_chromium(short_temp, "about:blank") as (proc, url):
            Connection(url.replace("http://", "ws://") + "/no-such-socket")
    assert wait_exit(proc.pid) and proc.returncode is not None


def page_targets(conn: Connection) -> list[tuple[str, str]]:
    infos = conn.call("Target.getTargets")["targetInfos"]
    return sorted((i["targetId"], i["url"]) for i in infos if i["type"] == "page")


def test_attach_scans_the_visible_tab_and_leaves_the_browser_running(users_browser):
    proc, url, user = users_browser
    before = page_targets(user)
    assert len(before) == 2
    browser = Browser(BrowserConfig(cdp_url=url))
    out = web_scan(browser)
    assert "PAGE-TWO-BODY" in out and browser.launched is None
    browser.close()
    assert proc.poll() is None
    assert page_targets(user) == before
    infos = user.call("Target.getTargets")["targetInfos"]
    assert not any(i["attached"] for i in infos if i["type"] == "page")  # nothing left on


def test_a_kept_profile_survives_a_clean_close(short_temp, web_site):
    need_browser()
    cfg = BrowserConfig(profile_dir=str(short_temp / "profile"), window_size=(1000, 700))
    first = Browser(cfg)
    web_execute_js(first, f"location.href = '{web_site('/nav1.html')}'")
    r = web_execute_js(first, "localStorage.kept = 'yes'; innerWidth", no_monitor=True)
    assert r["js_return"] == 1000
    run_dir = first.launched.run_dir
    first.close()
    assert (short_temp / "profile").is_dir() and not run_dir.exists()
    second = Browser(cfg)
    try:
        web_execute_js(second, f"location.href = '{web_site('/nav1.html')}'")
        assert web_execute_js(second, "localStorage.kept", no_monitor=True)["js_return"] == "yes"
    finally:
        second.close()


def test_a_crashed_browser_is_reported_and_the_next_call_starts_a_new_one(web_site):
    need_browser()
    browser = Browser()
    try:
        browser.tab()
        first = browser.launched
        web_site.server.hooks["/crash"] = lambda: os.kill(first.proc.pid, signal.SIGKILL)
        r = web_execute_js(browser, f"await fetch('{web_site('/crash')}'); "
                           "await new Promise(r => setTimeout(r, 10000))")
        assert r["status"] == "failed"
        assert "the next web call starts the browser again" in r["error"]
        r = web_execute_js(browser, "1 + 1", no_monitor=True)
        assert r["status"] == "success" and r["js_return"] == 2
        assert "a new one was started" in r["note"]
        assert browser.launched is not first and not first.run_dir.exists()
    finally:
        browser.close()


def test_no_browser_means_no_web_tools_and_a_hint_when_called_anyway(home, tmp_path):
    missing = BrowserConfig(executable=str(tmp_path / "nope" / "chromium"))
    script = [{"text": "<summary>try</summary>", "tool_calls": [{"name": "web_scan", "args": {}}]},
              {"text": "could not browse"}]
    agent = GenericAgent(ScriptedClient(script), home=home, cwd=tmp_path, browser=missing)
    names = {s["function"]["name"] for s in agent.tools_schema()}
    assert not names & {"web_scan", "web_execute_js"} and "code_run" in names
    assert "apt-get install chromium" in agent.unavailable["web_scan"]
    events = list(agent.run_task("browse"))
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "error" and "apt-get install chromium" in result["msg"]
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_a_browser_that_cannot_start_answers_with_a_hint_and_the_task_goes_on(home, tmp_path,
                                                                              caplog):
    broken = tmp_path / "chromium"
    broken.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 1\n")
    broken.chmod(0o755)
    script = [{"text": "<summary>try</summary>", "tool_calls": [
                  {"name": "web_execute_js", "args": {"script": "1"}},
                  {"name": "web_scan", "args": {}}]},
              {"text": "could not browse"}]
    agent = GenericAgent(ScriptedClient(script), home=home, cwd=tmp_path,
                         browser=BrowserConfig(executable=str(broken)))
    assert agent.unavailable == {}
    events = list(agent.run_task("browse"))
    executed, scanned = [e["data"] for e in events if e["type"] == "tool_result"]
    assert executed["status"] == "failed" and "cannot open display" in executed["error"]
    assert "apt-get install chromium" in executed["error"]
    assert json.loads(scanned)["status"] == "error" and "exited at start" in scanned
    assert events[-1]["result"] == "CURRENT_TASK_DONE"
    told = [r for r in caplog.records if "cannot open display" in r.getMessage()]
    assert len(told) == 1 and told[0].levelname == "WARNING"  # the user hears it once


def test_without_the_browser_extra_the_hint_is_readmes_install_command(monkeypatch):
    command = re.search(r'pip install -e "\.\[browser\]"', (ROOT / "README.md").read_text())
    monkeypatch.setitem(sys.modules, "websocket", None)
    assert command.group(0) in unavailable_reason(BrowserConfig())
    with pytest.raises(ConnectionLost, match=re.escape(command.group(0))):
        Connection("ws://127.0.0.1:9/devtools/browser/x")


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
    assert main(["--config", str(cfg), "config", "check"]) == 1
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
    assert main(["--config", str(cfg), "config", "check"]) == 1
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


def test_agent_runs_web_tools_and_closes_its_browser(run_agent, web_site):
    need_browser()
    url = web_site("/nav1.html")
    script = [
        {"text": "<summary>go</summary>", "tool_calls": [
            {"name": "web_execute_js", "args": {"script": f"location.href = '{url}'"}}]},
        {"text": "<summary>look</summary>", "tool_calls": [
            {"name": "web_scan", "args": {"text_only": "true"}}]},
        {"text": "page one it is"},
    ]
    agent, client, events = run_agent(script)
    results = [e["data"] for e in events if e["type"] == "tool_result"]
    assert results[0]["navigated"]["title"] == "Page one"
    assert "PAGE-ONE-BODY" in results[1]
    assert any(t["function"]["name"] == "web_scan" for t in client.calls[0]["tools"])
    launched = agent.browser.launched
    agent.close()
    assert wait_exit(launched.proc.pid) and not launched.run_dir.exists()


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_the_launched_browser_gets_the_childrens_env_and_writes_nothing_in_home(
        home, tmp_path, monkeypatch, web_site):
    need_browser()
    real_home = tmp_path / "real-home"
    real_home.mkdir()
    monkeypatch.setenv("HOME", str(real_home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("SHOP_API_TOKEN", "tok-" + "s" * 24)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-" + "k" * 24)
    monkeypatch.setenv("CORP_GATEWAY", "dropped-by-tools.env_drop")
    monkeypatch.setenv("GH_TOKEN", "kept-by-tools.env_keep")
    monkeypatch.setenv("GA_PLAIN_SETTING", "passes")
    policy = EnvPolicy(drop={"CORP_GATEWAY"}, keep={"GH_TOKEN"})
    agent = GenericAgent(ScriptedClient([]), home=home, cwd=tmp_path, env_policy=policy)
    try:
        web_execute_js(agent.browser, f"location.href = '{web_site('/nav1.html')}'")
        launched = agent.browser.launched
        env = environ(launched.proc.pid)
    finally:
        agent.close()
    assert not {"SHOP_API_TOKEN", "ANTHROPIC_API_KEY", "CORP_GATEWAY"} & set(env)
    assert env["GH_TOKEN"] == "kept-by-tools.env_keep" and env["GA_PLAIN_SETTING"] == "passes"
    assert Path(env["TMPDIR"]) in (launched.run_dir, launched.run_dir.parent)
    assert Path(env["XDG_CONFIG_HOME"]).parent == Path(env["HOME"])
    assert Path(env["HOME"]).is_relative_to(launched.run_dir)
    assert list(real_home.rglob("*")) == []  # no crash reports, dconf or caches there


def test_an_agent_dropped_without_close_still_ends_its_browser(home, tmp_path):
    need_browser()
    agent = GenericAgent(ScriptedClient([]), home=home, cwd=tmp_path)
    agent.browser.tab()
    launched = agent.browser.launched
    del agent
    gc.collect()
    assert wait_exit(launched.proc.pid) and not launched.run_dir.exists()


@pytest.fixture
def long_temp(short_temp):
    """A temp dir too long for Chromium's socket path (like macOS's default $TMPDIR)."""
    path = short_temp / ("t" * 88)
    path.mkdir()
    return path


def test_a_run_folder_outside_a_long_temp_dir_goes_when_the_runtime_is_killed(tmp_path,
                                                                               long_temp):
    need_browser()
    left = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=SHORT_TMP))  # by a killed runtime
    (left / OWNER_FILE).write_text(str(long_temp / "ga-run-1-gone"), encoding="utf-8")
    old = time.time() - 2 * STALE_GRACE_SECONDS
    os.utime(left, (old, old))
    env = ga_env(tmp_path, long_temp)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    info = json.loads(proc.stdout.readline())
    run_dir = Path(info["run_dir"])
    assert run_dir.parent == SHORT_TMP and (run_dir / "profile").is_dir()
    assert not left.exists()  # swept by this start
    proc.kill()
    proc.wait(timeout=10)
    assert wait_exit(info["browser"])
    wait_cleaned(info["runtime"])
    assert not run_dir.exists() and not Path(info["runtime"]).exists()
