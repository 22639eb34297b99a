"""Approval in `ga acp` (SPEC §11, §13): a question is a `session/request_permission`
request to the editor, answered by the SDK client's person (allow_once, allow_always,
reject_once, or cancelled); the decision is journaled."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from acp import RequestPermissionResponse
from acp.schema import AllowedOutcome, DeniedOutcome
from test_acp import Editor, ask, code, ga_acp, journal_of, model, new, run

WAIT = "wait"  # an answer held back until the test releases it (then: cancelled)


class Person(Editor):
    """An editor whose person answers each permission request with the next answer."""

    def __init__(self, *answers: str) -> None:
        super().__init__()
        self.answers = list(answers)
        self.asked: list[dict] = []
        self.question = asyncio.Event()  # set at each request
        self.release = asyncio.Event()  # lets a WAIT answer go

    async def request_permission(self, options, session_id, tool_call, **kwargs):
        self.asked.append({"session": session_id,
                           "toolCall": tool_call.model_dump(by_alias=True, exclude_none=True),
                           "options": [o.model_dump(by_alias=True) for o in options]})
        self.question.set()
        answer = self.answers.pop(0)
        if answer == WAIT:  # an editor answers `cancelled` once the prompt is cancelled
            await self.release.wait()
            answer = "cancelled"
        if answer == "cancelled":
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=answer))


def decisions(home: Path, session: str) -> list[tuple[str, str]]:
    return [(r["tool"], r["decision"]) for r in journal_of(home, session)
            if r["type"] == "approval"]


def ends(editor: Editor) -> list[dict]:
    return [u for u in editor.of("tool_call_update") if "status" in u]


def talk(home: Path, tmp_path: Path, steps: list, person: Editor, *options: str,
         prompts: tuple[str, ...] = ("go",)) -> tuple[str, list[str]]:
    """Run ``prompts`` in one session of `ga acp OPTIONS`: (session id, stop reasons)."""
    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps), *options,
                          editor=person) as (conn, _, _editor):
            session = await new(conn)
            return session, [await ask(conn, session, p) for p in prompts]

    return run(scenario())


def test_allow_once_asks_with_the_cards_id_and_the_script_then_runs_it(home, tmp_path):
    person = Person("allow_once")
    session, reasons = talk(home, tmp_path, [code("echo asked > asked.txt"), {"text": "ok"}],
                            person, "--approval", "always")
    assert reasons == ["end_turn"]
    (card,) = person.of("tool_call")
    (question,) = person.asked
    assert question["session"] == session
    assert question["toolCall"] == {
        "toolCallId": card["toolCallId"], "title": card["title"], "kind": "execute",
        "status": "pending", "content": [
            {"type": "content", "content": {"type": "text",
                                            "text": "code_run wants to run this bash code"}},
            {"type": "content", "content": {"type": "text",
                                            "text": "```bash\necho asked > asked.txt\n```"}}]}
    assert [(o["optionId"], o["kind"]) for o in question["options"]] == [
        ("allow_once", "allow_once"), ("allow_always", "allow_always"),
        ("reject_once", "reject_once")]
    assert question["options"][1]["name"] == "Always allow code_run"
    statuses = [u["status"] for u in person.of("tool_call_update") if "status" in u]
    assert statuses == ["in_progress", "completed"]  # running again once allowed
    assert (Path.cwd() / "asked.txt").read_text() == "asked\n"
    assert decisions(home, session) == [("code_run", "yes")]


def test_allow_always_is_not_asked_again_for_that_tool(home, tmp_path):
    person = Person("allow_always")
    steps = [code("echo 1 > one.txt"), code("echo 2 > two.txt"), {"text": "both"},
             code("echo 3 > three.txt"), {"text": "and the next prompt"}]
    session, reasons = talk(home, tmp_path, steps, person, "--approval", "always",
                            prompts=("first", "second"))
    assert reasons == ["end_turn", "end_turn"]
    assert len(person.asked) == 1
    assert [u["status"] for u in ends(person)] == ["in_progress"] + ["completed"] * 3
    assert all((Path.cwd() / f).exists() for f in ("one.txt", "two.txt", "three.txt"))
    assert decisions(home, session) == [("code_run", "always")] * 3


def test_reject_once_shows_the_diff_and_the_model_is_told_it_was_declined(home, tmp_path):
    notes = Path.cwd() / "notes.txt"
    notes.write_text("keep\nme\n")
    steps = [{"text": "<summary>edit</summary>", "tool_calls": [
        {"name": "file_patch", "args": {"path": "notes.txt", "old_content": "me",
                                        "new_content": "you"}}]}, {"text": "understood"}]
    person = Person("reject_once")
    session, reasons = talk(home, tmp_path, steps, person, "--approval", "always")
    assert reasons == ["end_turn"]
    (question,) = person.asked
    what, diff = question["toolCall"]["content"]
    assert what["content"]["text"] == f"file_patch wants to make this change to {notes}"
    assert diff == {"type": "diff", "path": str(notes), "oldText": "keep\nme\n",
                    "newText": "keep\nyou\n"}
    (end,) = ends(person)
    assert end["status"] == "failed" and "declined by the user" in (
        end["content"][0]["content"]["text"])
    assert notes.read_text() == "keep\nme\n"
    (result,) = [r for r in journal_of(home, session) if r["type"] == "tool_result"]
    assert result["data"] == {"status": "declined", "msg": "declined by the user"}
    assert decisions(home, session) == [("file_patch", "no")]


def test_cancel_while_a_question_is_pending_ends_the_prompt_and_frees_the_session(home,
                                                                                 tmp_path):
    person = Person(WAIT, "allow_once")
    steps = [code("echo never > never.txt"), code("echo next > next.txt"), {"text": "went on"}]

    async def scenario():
        async with ga_acp(home, tmp_path, "-m", model(tmp_path, steps), "--approval",
                          "always", editor=person) as (conn, _, _editor):
            session = await new(conn)
            prompt = asyncio.ensure_future(ask(conn, session, "go"))
            await person.question.wait()
            await conn.cancel(session_id=session)
            reason = await prompt  # answered while the question is still open
            person.release.set()  # the editor then answers it `cancelled`, late
            return session, reason, await ask(conn, session, "again")

    session, reason, then = run(scenario())
    assert (reason, then) == ("cancelled", "end_turn")
    assert not (Path.cwd() / "never.txt").exists() and (Path.cwd() / "next.txt").exists()
    records = journal_of(home, session)
    assert [r.get("reason") for r in records if r["type"] == "task_end"] == [
        "cancelled by the editor", None]
    assert decisions(home, session) == [("code_run", "yes")]  # the cancelled one: none


def test_an_editor_cancelling_the_question_cancels_the_prompt(home, tmp_path):
    person = Person("cancelled")
    session, reasons = talk(home, tmp_path, [code("echo x > x.txt"), {"text": "never"}],
                            person, "--approval", "always")
    assert reasons == ["cancelled"] and not (Path.cwd() / "x.txt").exists()
    (end,) = [r for r in journal_of(home, session) if r["type"] == "task_end"]
    assert end["result"] == "ABORTED" and not decisions(home, session)


def test_an_editor_that_cannot_ask_declines_the_call_and_the_task_goes_on(home, tmp_path):
    editor = Editor()  # no request_permission: the SDK answers "method not found"
    session, reasons = talk(home, tmp_path, [code("echo x > x.txt"), {"text": "fine"}],
                            editor, "--approval", "always")
    assert reasons == ["end_turn"] and editor.text("agent_message_chunk").endswith("fine")
    (end,) = ends(editor)
    assert end["status"] == "failed"
    assert "declined by the user: the editor could not ask" in (
        end["content"][0]["content"]["text"])
    assert not (Path.cwd() / "x.txt").exists()
    assert decisions(home, session) == [("code_run", "no")]
    assert "approval of code_run: the editor could not ask" in (
        tmp_path / "stderr.txt").read_text()


def escalating(outside: Path) -> list[dict]:
    return [code(f"echo plain > {outside}/plain.txt"),
            {"text": "<summary>again</summary>", "tool_calls": [
                {"name": "code_run", "args": {
                    "type": "bash", "script": f"echo out > {outside}/out.txt",
                    "escalate": True, "reason": "write the shared config"}}]},
            {"text": "done"}]


@pytest.mark.parametrize("options, approval, asked", [
    ((), "on-request", True), (("--approval", "never"), "never", False)])
def test_an_editor_session_is_on_request_and_asks_only_for_escalations(home, tmp_path, options,
                                                                      approval, asked):
    outside = tmp_path / "outside"
    outside.mkdir()
    person = Person("allow_once")
    session, reasons = talk(home, tmp_path, escalating(outside), person, *options)
    assert reasons == ["end_turn"]
    assert not (outside / "plain.txt").exists()  # confined: the sandbox refused it
    assert (outside / "out.txt").exists() == asked  # asked, allowed: ran outside it
    assert len(person.asked) == asked
    if asked:
        what = person.asked[0]["toolCall"]["content"][0]["content"]["text"]
        assert what == ("code_run wants to run this bash code outside the sandbox\n\n"
                        "reason: write the shared config")
    (start,) = [r for r in journal_of(home, session) if r["type"] == "task_start"]
    assert (start["sandbox"], start["approval"]) == ("workspace-write", approval)


def test_yolo_applies_to_ga_acp(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    person = Person()
    session, _ = talk(home, tmp_path, escalating(outside), person, "--yolo")
    assert (outside / "plain.txt").exists() and not person.asked
    (start,) = [r for r in journal_of(home, session) if r["type"] == "task_start"]
    assert (start["sandbox"], start["approval"]) == ("full-access", "never")
