"""Memory through a whole agent run with the scripted model: what the model is sent."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from ga import GenericAgent
from llmcore.scripted import ScriptedClient
from memory.store import MemoryStore


def _run(home: Path, script: list[dict], task: str = "Hello") -> tuple[ScriptedClient, dict]:
    client = ScriptedClient(script)
    agent = GenericAgent(client, home=home, cwd=Path.cwd(), lang="en")
    gen = agent.run_task(task)
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            return client, stop.value


def _checkpoint_turns(n: int) -> list[dict]:
    """n turns that make distinct progress (no repeat guard), each with a summary."""
    return [{"text": f"<summary>step {i}</summary>", "tool_calls": [
        {"name": "update_working_checkpoint", "args": {"key_info": f"step {i}"}}]}
        for i in range(1, n + 1)]


def _ltu_result(client: ScriptedClient, call_index: int) -> str:
    results = client.calls[call_index]["messages"][0]["tool_results"]
    return "\n".join(str(r["content"]) for r in results)


def test_system_prompt_sent_has_date_structure_and_l1(home):
    client, end = _run(home, [{"text": "Hi! How can I help?"}])
    assert end["result"] == "CURRENT_TASK_DONE"
    system = client.calls[0]["system"]
    store = MemoryStore(home)
    assert f"Today: {date.today().isoformat()}" in system
    assert f"[MEMORY] Folder {store.dir}/" in system
    assert store.insight().strip() in system
    assert (store.dir / "plan_sop.md").exists()  # the first run seeded the home


FIRST_REQUEST_BUDGET_TOKENS = 2000


def test_first_hello_request_stays_within_token_budget(home):
    # chars/4 stands in for cl100k here; bench/bench_tokens.py prints the real count.
    client, _ = _run(home, [{"text": "Hi!"}])
    call = client.calls[0]
    sent = call["system"] + json.dumps(call["tools"], ensure_ascii=False) + "Hello"
    assert len(sent) / 4 <= FIRST_REQUEST_BUDGET_TOKENS


def test_user_edits_to_l1_reach_the_model(home):
    store = MemoryStore(home)
    store.seed()
    store.patch("global_mem_insight.txt", "[RULES]", "billing: billing_sop\n\n[RULES]")
    client, _ = _run(home, [{"text": "ok"}])
    assert "billing: billing_sop" in client.calls[0]["system"]


def test_start_long_term_update_refused_at_turn_3(home):
    script = _checkpoint_turns(2) + [
        {"text": "<summary>remember</summary>", "tool_calls": [
            {"name": "start_long_term_update", "args": {}}]},
        {"text": "Done."}]
    client, _ = _run(home, script)
    result = _ltu_result(client, 3)
    assert "from turn 10 (now turn 3)" in result
    assert "Decision tree" not in result


def test_start_long_term_update_works_at_turn_12(home):
    script = _checkpoint_turns(11) + [
        {"text": "<summary>remember</summary>", "tool_calls": [
            {"name": "start_long_term_update", "args": {}}]},
        {"text": "Done."}]
    client, _ = _run(home, script)
    sent = _ltu_result(client, 12) + client.calls[12]["messages"][0]["content"]
    assert "Long-term memory update" in sent
    assert "## Decision tree: which layer?" in sent  # the L0 SOP itself
    assert "Refused" not in sent


def test_l1_insight_reinjected_at_turn_10(home):
    client, _ = _run(home, _checkpoint_turns(11) + [{"text": "Done."}])
    insight = MemoryStore(home).insight().strip()
    after = [c["messages"][0]["content"] for c in client.calls[1:]]
    assert [i + 1 for i, text in enumerate(after) if insight in text] == [10]


def test_reading_a_sop_adds_tip_and_counts_access(home):
    sop = home / "memory" / "plan_sop.md"
    script = [{"text": "<summary>read sop</summary>", "tool_calls": [
        {"name": "file_read", "args": {"path": str(sop)}}]}, {"text": "Done."}]
    client, _ = _run(home, script)
    prompt = client.calls[1]["messages"][0]["content"]
    assert "update_working_checkpoint" in prompt and "memory/SOP file" in prompt
    stats = json.loads((home / "memory" / "file_access_stats.json").read_text("utf-8"))
    assert stats["plan_sop.md"]["count"] == 1
    assert stats["plan_sop.md"]["last"] == date.today().isoformat()


def test_reading_an_ordinary_file_adds_no_tip(home):
    Path("notes.txt").write_text("hello\n", encoding="utf-8")
    script = [{"text": "<summary>read</summary>", "tool_calls": [
        {"name": "file_read", "args": {"path": "notes.txt"}}]}, {"text": "Done."}]
    client, _ = _run(home, script)
    assert "memory/SOP file" not in client.calls[1]["messages"][0]["content"]
    assert not (home / "memory" / "file_access_stats.json").exists()


def test_finished_session_is_archived_in_l4(home):
    _run(home, [{"text": "The answer is 42."}], task="Compute the zanzibar checksum")
    l4 = home / "memory" / "L4_raw_sessions"
    hits = [p.name for p in l4.glob("*")
            if "zanzibar" in p.read_text(encoding="utf-8", errors="replace")]
    assert "index.txt" in hits and len(hits) == 2
