"""`ga acp` (SPEC §13) sent by hand what an SDK client would not send: a prompt without an
id, a resource block that is not an object. Each line is written to the real process and
its replies read back as JSON."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from pathlib import Path

from test_acp import BOUND, GA, ROOT, model


class RawEditor:
    """A running ``ga acp`` spoken to one JSON line at a time."""

    def __init__(self, home: Path, tmp_path: Path, steps: list) -> None:
        self.stderr = tmp_path / "stderr.txt"
        env = {"GA_LANG": "en", "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path)}
        with open(self.stderr, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, GA, "--home", str(home), "acp", "-m", model(tmp_path, steps)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env)
        self.seen: list[dict] = []
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    def send(self, method: str, params: dict, request_id: int | None = None) -> None:
        message = {"jsonrpc": "2.0", "method": method, "params": params}
        if request_id is not None:
            message["id"] = request_id
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def reply(self, request_id: int) -> dict:
        """The reply to ``request_id``; what came before it is kept in ``seen``."""
        while True:
            message = self.lines.get(timeout=BOUND)
            assert message is not None, "ga acp ended without replying"
            self.seen.append(message)
            if message.get("id") == request_id and "method" not in message:
                return message

    def close(self) -> int:
        """Close stdin; the rest of what ga says is kept in ``seen``; its exit code."""
        self.proc.stdin.close()
        while (message := self.lines.get(timeout=BOUND)) is not None:
            self.seen.append(message)
        return self.proc.wait(BOUND)

    def open_session(self) -> str:
        self.send("initialize", {"protocolVersion": 1}, 1)
        self.reply(1)
        self.send("session/new", {"cwd": str(Path.cwd()), "mcpServers": []}, 2)
        return self.reply(2)["result"]["sessionId"]


def said(messages: list[dict]) -> str:
    return "".join(m["params"]["update"]["content"]["text"] for m in messages
                   if m.get("method") == "session/update"
                   and m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")


def test_a_prompt_sent_without_an_id_is_neither_run_nor_answered(home, tmp_path):
    editor = RawEditor(home, tmp_path, [{"text": "first"}, {"text": "second"}])
    session = editor.open_session()
    text = [{"type": "text", "text": "hello"}]
    editor.send("session/prompt", {"sessionId": session, "prompt": text})  # no id
    editor.send("session/prompt", {"sessionId": session, "prompt": text}, 3)
    answer = editor.reply(3)
    assert editor.close() == 0
    assert answer.get("result") == {"stopReason": "end_turn"} and said(editor.seen) == "first"
    assert not [m for m in editor.seen if "id" in m and m["id"] is None]
    assert "session/prompt without an id is not run" in editor.stderr.read_text()


def test_a_resource_that_is_not_an_object_is_invalid_params_in_one_line(home, tmp_path):
    editor = RawEditor(home, tmp_path, [])
    session = editor.open_session()
    editor.send("session/prompt", {"sessionId": session, "prompt": [
        {"type": "text", "text": "read"}, {"type": "resource", "resource": "notes.txt"}]}, 3)
    error = editor.reply(3)["error"]
    assert editor.close() == 0
    assert error == {"code": -32602, "message": "prompt: a resource block's resource must be "
                                                "an object (uri, and text or blob)"}
    assert "Traceback" not in editor.stderr.read_text()
