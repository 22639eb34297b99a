"""The browser's life: started lazily, never outliving the runtime (its files neither),
a crashed tab or browser reported to the model and recovered, a missing browser reported
(SPEC §9)."""

from __future__ import annotations

import gc
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from web_site import (
    DOWNLOAD_NAME,
    EXIT_WAIT,
    goto,
    need_browser,
    running_with,
    short_temp,
    wait_exit,
    web_site,
)

from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from llmcore.secrets import EnvPolicy
from tools.procs import OWNER_FILE, STALE_GRACE_SECONDS
from tools.web import BrowserConfig
from tools.web.browser import Browser
from tools.web.cdp import Connection
from tools.web.execute import web_execute_js
from tools.web.launch import RUN_PREFIX, SHORT_TMP
from tools.web.scan import web_scan

__all__ = ["short_temp", "web_site"]
ROOT = Path(__file__).resolve().parent.parent


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
from tools.web.cdp import Connection
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


def renderers(browser: Browser) -> list[int]:
    """The renderer processes of a launched browser (its process group)."""
    pgid = browser.launched.proc.pid
    return [pid for pid in running_with("--type=renderer") if os.getpgid(pid) == pgid]


def test_a_crashed_tab_is_said_so_and_loaded_again(web_site):
    need_browser()
    browser = Browser()
    try:
        goto(browser, web_site("/nav1.html"))
        for pid in renderers(browser):
            os.kill(pid, signal.SIGKILL)
        assert browser.wait_targets(lambda: browser.active in browser.crashed, EXIT_WAIT)
        out = web_scan(browser)
        assert out.startswith('{"status": "success"') and "PAGE-ONE-BODY" in out
        assert "had crashed" in out and "reloaded" in out
        web_site.server.hooks["/crash"] = lambda: [os.kill(p, signal.SIGKILL)
                                                   for p in renderers(browser)]
        r = web_execute_js(browser, f"await fetch('{web_site('/crash')}'); "
                           "await new Promise(r => setTimeout(r, 30000))")
        assert r["status"] == "failed" and "crashed" in r["error"], r
        assert "loaded again" in r["error"] and "timeout" not in r["error"]
        r = web_execute_js(browser, "location.pathname", no_monitor=True)
        assert r["status"] == "success" and r["js_return"] == "/nav1.html"
    finally:
        browser.close()


LOADED = ("new Promise(r => document.readyState === 'complete' ? r()"
          " : addEventListener('load', () => r()))")


def wait_loaded(browser: Browser, target: str) -> None:
    """Wait until the page of ``target`` has loaded, asked on a connection of our own (the
    browser's tools do not touch the tab)."""
    own = Connection(browser.launched.ws_url)
    try:
        session = own.call("Target.attachToTarget", {"targetId": target, "flatten": True})
        own.call("Runtime.evaluate", {"expression": LOADED, "awaitPromise": True},
                 session["sessionId"])
    finally:
        own.close()


def test_a_tab_that_crashed_before_its_first_use_is_loaded_again(web_site):
    need_browser()
    browser = Browser()
    try:
        goto(browser, web_site("/nav1.html"))
        popup = web_execute_js(browser, "document.querySelector('button').click()")["newTabs"][0]
        target = next(t for t, short in browser.short.items() if short == popup["id"])
        wait_loaded(browser, target)
        for pid in renderers(browser):
            os.kill(pid, signal.SIGKILL)
        assert browser.wait_targets(lambda: target in browser.crashed, EXIT_WAIT)
        out = web_scan(browser, switch_tab_id=popup["id"])
        assert out.startswith('{"status": "success"') and "PAGE-TWO-BODY" in out, out
        assert "had crashed" in out and "reloaded" in out
    finally:
        browser.close()


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


def test_no_browser_means_no_web_tools_and_a_hint_when_called_anyway(home, tmp_path,
                                                                     monkeypatch):
    monkeypatch.setenv("GA_CHROMIUM", str(tmp_path / "nope" / "chromium"))
    script = [{"text": "<summary>try</summary>", "tool_calls": [{"name": "web_scan", "args": {}}]},
              {"text": "could not browse"}]
    agent = GenericAgent(ScriptedClient(script), home=home, cwd=tmp_path)
    names = {s["function"]["name"] for s in agent.tools_schema()}
    assert not names & {"web_scan", "web_execute_js"} and "code_run" in names
    assert "apt-get install chromium" in agent.unavailable["web_scan"]
    events = list(agent.run_task("browse"))
    result = next(e for e in events if e["type"] == "tool_result")["data"]
    assert result["status"] == "error" and "apt-get install chromium" in result["msg"]
    assert events[-1]["result"] == "CURRENT_TASK_DONE"


def test_a_configured_browser_that_is_missing_is_offered_and_answers_with_a_hint(
        home, tmp_path, caplog):
    missing = BrowserConfig(executable=str(tmp_path / "nope" / "chromium"))
    run = {"name": "code_run", "args": {"script": "print('CODE-RAN')"}}
    script = [{"text": "<summary>try</summary>", "tool_calls": [
                  {"name": "web_scan", "args": {}}, run,
                  {"name": "web_execute_js", "args": {"script": "1"}}]},
              {"text": "could not browse"}]
    agent = GenericAgent(ScriptedClient(script), home=home, cwd=tmp_path, browser=missing)
    names = {s["function"]["name"] for s in agent.tools_schema()}
    assert {"web_scan", "web_execute_js", "code_run"} <= names and agent.unavailable == {}
    events = list(agent.run_task("browse"))
    scanned, ran, executed = [e["data"] for e in events if e["type"] == "tool_result"]
    assert scanned["status"] == "error" and "apt-get install chromium" in scanned["msg"]
    assert str(missing.executable) in scanned["msg"]
    assert executed["status"] == "failed" and "apt-get install chromium" in executed["error"]
    assert "CODE-RAN" in json.dumps(ran)  # the other tools keep working
    assert events[-1]["result"] == "CURRENT_TASK_DONE"
    told = [r for r in caplog.records if "apt-get install chromium" in r.getMessage()]
    assert len(told) == 1 and told[0].levelname == "WARNING"  # the user hears it once


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
    assert scanned["status"] == "error" and "exited at start" in scanned["msg"]
    assert events[-1]["result"] == "CURRENT_TASK_DONE"
    told = [r for r in caplog.records if "cannot open display" in r.getMessage()]
    assert len(told) == 1 and told[0].levelname == "WARNING"  # the user hears it once


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


def test_the_browser_saves_no_download(home, tmp_path, web_site):
    need_browser()
    agent = GenericAgent(ScriptedClient([]), home=home, cwd=tmp_path)
    ended: queue.Queue = queue.Queue()

    def on_event(method: str, params: dict, session_id: str | None) -> None:
        if method == "Browser.downloadProgress" and params.get("state") != "inProgress":
            ended.put(params["state"])

    try:
        agent.browser.ensure()
        agent.browser.conn.on(on_event)
        web_execute_js(agent.browser, f"location.href = '{web_site('/download.bin')}'")
        assert ended.get(timeout=EXIT_WAIT) == "canceled"
        saved = [p for p in (agent.browser.launched.run_dir, tmp_path)
                 for p in p.rglob(DOWNLOAD_NAME)]
    finally:
        agent.close()
    assert saved == []


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
    try:
        info = json.loads(proc.stdout.readline())
        run_dir = Path(info["run_dir"])
        assert run_dir.parent == SHORT_TMP and (run_dir / "profile").is_dir()
        assert not left.exists()  # swept by this start
    finally:
        shutil.rmtree(left, ignore_errors=True)
        proc.kill()
        proc.wait(timeout=10)
    assert wait_exit(info["browser"])
    wait_cleaned(info["runtime"])
    assert not run_dir.exists() and not Path(info["runtime"]).exists()
