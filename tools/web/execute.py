"""``web_execute_js``: run the model's JavaScript in the page's main world (SPEC §9).

The script runs with top-level ``await`` (``Runtime.evaluate`` in REPL mode) and ``ga(N)``
(``bridge.js``) bound to the elements of the last scan; the value of its last statement (or
of a ``return``) comes back as plain data (``serialize.js``), a promise or thenable awaited
first. Around it: what changed in the DOM, a navigation it caused, tabs it opened and
dialogs it raised (accepted at once), a tab it closed, a crash of the page. The whole call
keeps to its timeout and ends at once on an abort (``limits``).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tools import ToolError, clip
from tools.code_run import last_code_block
from tools.fsutil import atomic_write

from .browser import Browser, clip_title, error_text
from .cdp import CDPError, ConnectionLost
from .cuts import PageCuts, page_call
from .launch import BrowserUnavailable
from .tab import (
    Aborted,
    JSError,
    ScriptTimeout,
    Tab,
    TabBusy,
    TabClosed,
    TabCrashed,
    WebError,
    exception_text,
    page_js,
)

DEFAULT_TIMEOUT = 30
MIN_TIMEOUT = 1.0
MAX_TIMEOUT = 600
QUIET = 0.25  # seconds the DOM must be quiet after the script …
CHANGES_MAX = 1.5  # … but the monitor waits no longer than this
NAV_WAIT = 10.0  # seconds a navigation the script caused is waited for
NAV_START_WAIT = 2.0  # seconds for an asked-for navigation to start loading (else blocked)
NEW_TAB_WAIT = 1.0  # seconds to wait for the URL of a tab the script opened
PREVIEW_CHARS = 200  # of a value saved to a file
# serialize.js caps: what the model is shown (trimmed to its budget after), and what a file
# gets (the full value, bounded only against a runaway size)
SHOWN_LIMITS = {"items": 500, "keys": 200, "depth": 5, "html": 2_000, "chars": 1_000_000}
SAVED_LIMITS = {"items": 10_000_000, "keys": 1_000_000, "depth": 50, "html": 10_000_000,
                "chars": 50_000_000}
STEP_MIN = 0.5  # seconds a step after the script (awaiting its value) gets at least
CLOSE_WAIT = 1.0  # seconds for the browser to confirm that a failing tab is closing
FIELD_SHARE = 8  # a field of the result beside js_return starts at budget / 8 chars …
FIELD_MIN = 100  # … halved while the fields take more than half the budget, down to this
LIST_SHOWN = 5  # a list in the result (dialogs, new tabs) shows its first items and a count
OBJECT_GROUP = "ga-exec"
# the last value settled: a thenable awaited (the language's own await, which a page cannot
# replace), anything else as it is
SETTLE_JS = "async function () { return this; }"
BRIDGE_JS, SERIALIZE_JS = "bridge.js", "serialize.js"
ERROR_PAGE = "chrome-error://"
LOAD_FAILED = "the page did not load; web_scan shows the browser's error page"
NOT_NAVIGATED = "a navigation started but was blocked or cancelled; the page is unchanged"
CUT_SHORT_NOTE = ("the page navigated while the script ran; statements after the navigation "
                  "did not run")
CLOSED_NOTE = ("the tab closed while the script ran (window.close()); web_scan shows the open "
               "tabs and uses one of them")


@dataclass
class Marks:
    """Counters of a tab before the script, to tell what the script caused."""

    url: str
    nav_requests: int
    starts: int
    navigations: int
    loads: int
    dialogs: int
    created: int

    @classmethod
    def of(cls, tab: Tab, browser: Browser) -> Marks:
        return cls(tab.url, tab.nav_requests, tab.starts, tab.navigations, tab.loads,
                   len(tab.dialogs), len(browser.created))


def resolve_script(script: str, reply_text: str, cwd: Path) -> str:
    """The script text: the argument, a ``.js`` file it names, or the reply's last JS block."""
    script = script or last_code_block(reply_text or "", "javascript") or ""
    name = script.strip()
    if name.endswith(".js") and "\n" not in name:
        path = cwd / Path(name).expanduser()
        if path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    return script


def web_execute_js(browser: Browser, script: str, switch_tab_id: str | None = None,
                   no_monitor: bool = False, timeout: float = DEFAULT_TIMEOUT,
                   abort: threading.Event | None = None, budget: int = 8_000,
                   save_to: Path | None = None,
                   check: Callable[[Path], None] | None = None) -> dict:
    """Run ``script`` in the active (or named) tab and report what happened; ``save_to``
    gets the whole value (``check``, the sandbox's rule, sees the real path written)."""
    start = time.monotonic()
    timeout = min(max(float(timeout), MIN_TIMEOUT), MAX_TIMEOUT)
    result: dict[str, Any] = {"status": "success", "js_return": None}
    tab = None
    try:
        with browser.limits.running(abort, timeout):
            tab = browser.tab(switch_tab_id)
            result["tab_id"] = tab.id
            add_note(result, browser.take_notice())
            limits = SHOWN_LIMITS if save_to is None else SAVED_LIMITS
            run(browser, tab, script, not no_monitor, timeout, result, limits)
    except (ScriptTimeout, JSError) as e:
        result.update(status="failed", error=str(e))
    except TabCrashed as e:
        error = browser.crash_report(tab, e) if tab is not None else str(e)
        result.update(status="failed", error=error)
    except (WebError, BrowserUnavailable, CDPError) as e:
        result.update(status="failed", error=error_text(browser, e))
    result["ms"] = round((time.monotonic() - start) * 1000)
    if save_to is not None and result["status"] == "success":
        save(result, save_to, browser.redact, check)
    return fit_result(browser.redact.data(result), budget)  # masked before it is cut


def run(browser: Browser, tab: Tab, script: str, monitor: bool, timeout: float,
        result: dict, limits: dict) -> None:
    tab.ensure_page_js()
    marks = Marks.of(tab, browser)
    if monitor:
        tab.page_value("window.__ga.watch()")
    try:
        result["js_return"] = evaluate(tab, script, timeout, limits)
        if monitor and not started_navigation(tab, marks):
            changes = watch_changes(tab, marks)
            if changes:
                result["changes"] = changes
    except JSError as e:  # still say what it did before it threw
        result.update(status="failed", error=str(e))
    except ConnectionLost:
        raise
    except (TabClosed, CDPError):  # the document or the whole tab went away under the script
        if started_navigation(tab, marks):
            add_note(result, CUT_SHORT_NOTE)
        elif closing(tab):
            add_note(result, CLOSED_NOTE)
            return
        else:
            raise
    report_effects(browser, tab, marks, result)


def closing(tab: Tab) -> bool:
    """Whether the tab is closing (the browser's word may come just after a failed call)."""
    return tab.wait(lambda: False, CLOSE_WAIT) and tab.closed


def report_effects(browser: Browser, tab: Tab, marks: Marks, result: dict) -> None:
    """The navigation, new tabs and dialogs the script caused."""
    if started_navigation(tab, marks) or tab.navigations > marks.navigations:
        result["navigated"] = moved = {"from": marks.url}
        follow_navigation(browser, tab, marks, moved)
    new_tabs = browser.new_tabs(marks.created)
    if any(not t["url"] for t in new_tabs):  # a popup's URL arrives just after it opens
        browser.wait_targets(lambda: all(t["url"] for t in browser.new_tabs(marks.created)),
                             NEW_TAB_WAIT)
        new_tabs = browser.new_tabs(marks.created)
    if new_tabs:
        result["newTabs"] = new_tabs
    if len(tab.dialogs) > marks.dialogs:
        result["dialogs"] = tab.dialogs[marks.dialogs:]


def add_note(result: dict, note: str) -> None:
    if note:
        result["note"] = f"{result['note']}; {note}" if result.get("note") else note


def evaluate(tab: Tab, script: str, timeout: float, limits: dict) -> Any:
    """Run the script; JSError if it throws (or the promise it leaves rejects). A top-level
    ``return`` makes it a function."""
    options = {"returnByValue": False, "objectGroup": OBJECT_GROUP, "userGesture": True}
    bridge = page_js(BRIDGE_JS)
    end = time.monotonic() + timeout
    reply = tab.evaluate(f"{{ {bridge}\n{script}\n}}", timeout, script=True, replMode=True,
                         **options)
    details = reply.get("exceptionDetails")
    if details and "Illegal return statement" in exception_text(details):
        body = f"(async () => {{ {bridge}\n{script}\n}})()"
        reply = tab.evaluate(body, max(end - time.monotonic(), STEP_MIN), script=True, **options)
        details = reply.get("exceptionDetails")
    if details:
        raise JSError(exception_text(details))
    try:
        value = settled(tab, reply.get("result", {}), max(end - time.monotonic(), STEP_MIN))
        return value_of(tab, value, limits)
    finally:
        tab.session.send("Runtime.releaseObjectGroup", {"objectGroup": OBJECT_GROUP})


def settled(tab: Tab, obj: dict, timeout: float) -> dict:
    """The last value with a promise or thenable awaited (within the script's time left);
    JSError when it rejects."""
    if "objectId" not in obj or obj.get("type") not in ("object", "function"):
        return obj
    reply = tab.request("Runtime.callFunctionOn", {
        "objectId": obj["objectId"], "functionDeclaration": SETTLE_JS, "awaitPromise": True,
        "objectGroup": OBJECT_GROUP}, timeout, script=True)
    if "exceptionDetails" in reply:
        raise JSError(exception_text(reply["exceptionDetails"]))
    return reply.get("result", {})


def value_of(tab: Tab, obj: dict, limits: dict) -> Any:
    """A RemoteObject as JSON: primitives directly, objects through ``serialize.js`` with
    its caps ``limits``, its cuts made (masked first)."""
    if "objectId" not in obj:
        if "unserializableValue" in obj:
            return obj["unserializableValue"]
        return obj.get("value")
    cuts = PageCuts(tab.browser.redact)
    reply = tab.request("Runtime.callFunctionOn", {
        "objectId": obj["objectId"], "functionDeclaration": page_js(SERIALIZE_JS),
        "arguments": [{"value": {**limits, "cuts": cuts.options()}}], "returnByValue": True})
    if "exceptionDetails" in reply:
        return obj.get("description")
    got = reply.get("result", {}).get("value") or {}
    return cuts.restore(got.get("value"), got.get("tails"))


def started_navigation(tab: Tab, marks: Marks) -> bool:
    return tab.nav_requests > marks.nav_requests


def watch_changes(tab: Tab, marks: Marks) -> dict | None:
    """The monitor's report once the DOM is quiet; None when a navigation cut it short."""
    try:
        tab.dom_quiet(QUIET, CHANGES_MAX, since=time.monotonic(),
                      stop=lambda: started_navigation(tab, marks))
        if started_navigation(tab, marks):
            return None
        return page_call(tab, "changes")
    except (CDPError, JSError):
        if started_navigation(tab, marks):
            return None
        raise


def follow_navigation(browser: Browser, tab: Tab, marks: Marks, moved: dict) -> None:
    """Wait (≤ NAV_WAIT, within the call's time) for a navigation the script started; fill
    ``moved`` with where it went and the page's title. A page that does not answer leaves
    the title the browser heard and fails the call (TabBusy); so does an abort."""
    wait = min(NAV_WAIT, browser.limits.time_left())
    if started_navigation(tab, marks):
        started = tab.wait(lambda: tab.starts > marks.starts, min(NAV_START_WAIT, wait))
        if started and not tab.wait(lambda: tab.loads > marks.loads, wait):
            moved["note"] = f"still loading after {wait:.0f} s"
        elif not started or tab.navigations == marks.navigations:
            moved["note"] = NOT_NAVIGATED
            return
    moved["to"] = tab.url
    if tab.url.startswith(ERROR_PAGE):
        moved["to"] = tab.target_url()
        moved["note"] = LOAD_FAILED
    title = ""
    try:
        title = clip_title(browser.redact(tab.page_value("document.title") or ""))
    except (TabBusy, Aborted):  # the call fails: the browser's word for the title meanwhile
        add_title(moved, browser.title_of(tab.target_id))
        raise
    except (CDPError, WebError):  # the page went on elsewhere: the browser's word for it
        title = browser.title_of(tab.target_id)
    add_title(moved, title)


def add_title(moved: dict, title: str) -> None:
    if title:
        moved["title"] = title


def save(result: dict, path: Path, redact: Callable[[str], str] = str,
         check: Callable[[Path], None] | None = None) -> None:
    """Write the full value to ``path``; the result keeps a preview (masked, then cut)."""
    value = result["js_return"]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=1)
    try:
        atomic_write(path, text, check=check)
    except (OSError, ToolError) as e:
        result["save_error"] = f"could not save to {path}: {getattr(e, 'strerror', None) or e}"
        return
    shown = redact(text)
    preview = shown[:PREVIEW_CHARS] + ("..." if len(shown) > PREVIEW_CHARS else "")
    result["js_return"] = preview
    result["saved"] = f"{len(text)} chars saved to {path}"


def fit_result(result: dict, budget: int) -> dict:
    """The whole result within about ``budget`` chars: the fields beside ``js_return`` are
    capped (long texts head+tail, lists to their first items and a count), and
    ``js_return`` gets what they leave."""
    share = max(budget // FIELD_SHARE, FIELD_MIN)
    while True:
        fitted = {k: v if k == "js_return" else cap(v, share) for k, v in result.items()}
        rest = len(json.dumps({**fitted, "js_return": None}, ensure_ascii=False))
        if rest <= budget // 2 or share <= FIELD_MIN:
            break
        share = max(share // 2, FIELD_MIN)
    fitted["js_return"] = fit(result["js_return"], max(budget - rest, FIELD_MIN))
    return fitted


def cap(value: Any, chars: int) -> Any:
    """``value`` with every text in it at most about ``chars`` and every list its first
    LIST_SHOWN items and a count."""
    if isinstance(value, str):
        return clip(value, chars, " [... {n} chars omitted ...] ")
    if isinstance(value, dict):
        return {k: cap(v, chars) for k, v in value.items()}
    if isinstance(value, list):
        shown = [cap(v, chars) for v in value[:LIST_SHOWN]]
        return shown + [f"… {len(value) - LIST_SHOWN} more"] if len(value) > LIST_SHOWN else shown
    return value


def fit(value: Any, limit: int) -> Any:
    """The value within ``limit`` chars: kept as is when small, else its text head+tail."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    if len(text) <= limit:
        return value
    return clip(text, limit, "\n[... {n} chars omitted: use save_to_file for all of it ...]\n")
