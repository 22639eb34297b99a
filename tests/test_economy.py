"""Token economy through the real SDKs: the newest exchange survives any budget, the request
prefix stays byte-identical between trims, cache markers sit on it, and per-turn work
(wire forms, journal records) is done once per message."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from llm_server import (
    KIND_PATHS,
    KINDS,
    Reply,
    client_for,
    llm_server,
    run_chat,
    tool_schema,
    write_config,
)

from llmcore.anthropic_messages import AnthropicMessages
from llmcore.config import load_config
from llmcore.history import MessageMemo
from llmcore.openai_chat import OpenAIChat
from llmcore.provider import ListMemo
from llmcore.session import LLMSession

__all__ = ["llm_server"]
TOOLS = [tool_schema("file_read", path="string")]
WM = "\n### [WORKING MEMORY]\n<history>\n[Agent] step {n}\n</history>\n<key_info>KEY-{n}</key_info>"



def tool_turns(client, server, turns: int, output: int) -> None:
    """``turns`` model replies each calling file_read, answered with ``output`` chars."""
    msgs = [{"role": "system", "content": "SYS"}, {"role": "user", "content": "read it all"}]
    for n in range(turns):
        server.queue(Reply(text=f"<summary>{n}</summary>",
                           tool_calls=[("file_read", json.dumps({"path": f"p{n}"}))]))
        _, resp = run_chat(client, msgs, TOOLS)
        msgs = [{"role": "user", "content": WM.format(n=n), "tool_results": [
            {"tool_use_id": resp.tool_calls[0].id, "content": f"out{n}|" + "x" * output}]}]
    server.queue(Reply(text="done"))
    run_chat(client, msgs, TOOLS)


def calls_and_results(kind: str, body: dict) -> tuple[list[str], list[str]]:
    if kind == "openai":
        msgs = body["messages"]
        calls = [c["id"] for m in msgs for c in m.get("tool_calls") or []]
        return calls, [m["tool_call_id"] for m in msgs if m["role"] == "tool"]
    if kind == "openai-responses":
        items = body["input"]
        return ([i["call_id"] for i in items if i.get("type") == "function_call"],
                [i["call_id"] for i in items if i.get("type") == "function_call_output"])
    blocks = [b for m in body["messages"] for b in m["content"]]
    return ([b["id"] for b in blocks if b["type"] == "tool_use"],
            [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"])


@pytest.mark.parametrize("kind", KINDS)
def test_call_ids_a_server_repeats_are_renamed_in_every_request(home, llm_server, kind):
    """The test server numbers each reply's calls alike (call_0_13 …); the history is
    repaired incrementally, and what was sent stays valid with each new reply after it."""
    client = client_for(home, llm_server, provider=kind)
    tool_turns(client, llm_server, 5, 100)
    for body in llm_server.bodies():
        calls, results = calls_and_results(kind, body)
        assert len(set(calls)) == len(calls) and results == calls


def without_markers(obj):
    if isinstance(obj, dict):
        return {k: without_markers(v) for k, v in obj.items() if k != "cache_control"}
    if isinstance(obj, list):
        return [without_markers(v) for v in obj]
    return obj


@pytest.mark.parametrize("kind", KINDS)
def test_newest_tool_call_and_its_result_survive_a_tight_budget(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, context_win=2500)
    tool_turns(client, llm_server, 4, 12000)  # each output alone is over the budget
    for body in llm_server.bodies(KIND_PATHS[kind])[1:]:
        calls, results = calls_and_results(kind, body)
        assert calls and calls == results  # every call sent has its own result, in order
    last = json.dumps(llm_server.bodies()[-1])
    assert "out3|xxx" in last and "cut here" in last and "[tool result]" not in last


@pytest.mark.parametrize("kind", KINDS)
def test_request_prefix_is_repeated_unchanged_between_trims(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind)
    tool_turns(client, llm_server, 6, 500)
    key = "input" if kind == "openai-responses" else "messages"
    bodies = llm_server.bodies(KIND_PATHS[kind])
    for prev, cur in zip(bodies, bodies[1:], strict=False):
        assert (cur.get("system"), cur.get("tools")) == (prev.get("system"), prev.get("tools"))
        old, new = without_markers(prev[key]), without_markers(cur[key])
        stable = len(old) - 1  # all but the newest user text (its working memory moves on)
        assert new[:stable] == old[:stable]
        if kind == "anthropic":  # the newest message's tool results stay too
            results = [b for b in old[-1]["content"] if b["type"] == "tool_result"]
            assert new[stable]["content"][: len(results)] == results
    # the working memory rides only in the newest user message
    assert json.dumps(bodies[-1]).count("<key_info>KEY-") == 1


@pytest.mark.parametrize("kind", KINDS)
def test_trims_rewrite_the_prefix_rarely_and_in_large_steps(home, llm_server, kind):
    client = client_for(home, llm_server, provider=kind, context_win=3000)
    tool_turns(client, llm_server, 30, 1000)  # about three turns' output fill the budget
    key = "input" if kind == "openai-responses" else "messages"
    bodies = llm_server.bodies(KIND_PATHS[kind])
    rewrites = 0
    for prev, cur in zip(bodies, bodies[1:], strict=False):
        old, new = without_markers(prev[key]), without_markers(cur[key])
        stable = len(old) - 1
        rewrites += new[:stable] != old[:stable]
    # trims happen, and seldom: dropping just enough would rewrite it on every full turn
    assert 2 <= rewrites <= len(bodies) // 3, rewrites


def test_anthropic_cache_markers_sit_on_the_stable_prefix(home, llm_server):
    client = client_for(home, llm_server, provider="anthropic")
    tool_turns(client, llm_server, 2, 100)
    body = llm_server.bodies()[-2]  # the last request that answers a tool call
    assert body["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    marked = [b for m in body["messages"] for b in m["content"] if "cache_control" in b]
    newest = body["messages"][-1]["content"]
    assert marked == [newest[0]] and newest[0]["type"] == "tool_result"
    assert newest[-1]["type"] == "text" and "cache_control" not in newest[-1]


@pytest.mark.parametrize("kind", KINDS)
def test_body_is_what_the_sdks_typed_create_would_send(home, llm_server, kind):
    import anthropic
    import openai

    client = client_for(home, llm_server, provider=kind, max_tokens=777)
    tool_turns(client, llm_server, 2, 100)
    ours = copy.deepcopy(llm_server.bodies()[-1])
    if kind == "anthropic":
        sdk = anthropic.Anthropic(base_url=llm_server.anthropic_url, api_key="k").messages
    else:
        sdk = openai.OpenAI(base_url=llm_server.openai_url, api_key="k")
        sdk = sdk.responses if kind == "openai-responses" else sdk.chat.completions
    llm_server.queue(Reply(text="same"))
    for _event in sdk.create(**ours):
        pass
    assert llm_server.bodies()[-1] == ours


class CountingChat(OpenAIChat):
    built: list[str] = []
    tool_lists: list[list[str]] = []

    def wire_message(self, m: dict) -> str:
        CountingChat.built.append(m["role"])
        return super().wire_message(m)

    def wire_tools(self, tools: list[dict]) -> list[dict]:
        CountingChat.tool_lists.append([t["function"]["name"] for t in tools])
        return super().wire_tools(tools)


def test_each_message_is_serialised_once_across_turns(home, llm_server):
    cfg = load_config(Path(write_config(home, llm_server, p={"model": "m"})), required=True)
    client = LLMSession(cfg, cfg.profile("p"), home, lambda kind: CountingChat)
    CountingChat.built = []
    tool_turns(client, llm_server, 8, 300)
    # each message once, plus the one rewritten per turn (its working memory retired)
    assert len(client.history) <= len(CountingChat.built) <= len(client.history) + 9
    assert len(llm_server.requests) == 9


class CountingMessages(AnthropicMessages):
    built: list[dict] = []

    def wire_message(self, m: dict) -> str:
        CountingMessages.built.append(m)
        return super().wire_message(m)


def test_the_message_with_the_cache_marker_is_serialised_only_with_it(home, llm_server):
    cfg = load_config(Path(write_config(home, llm_server, p={"provider": "anthropic",
                                                             "model": "m"})), required=True)
    client = LLMSession(cfg, cfg.profile("p"), home, lambda kind: CountingMessages)
    CountingMessages.built = []
    tool_turns(client, llm_server, 8, 300)
    # the newest message of each request carries the marker: it is built once, marked; the
    # plain form of a message is built only once it is older (its working memory retired)
    assert len(CountingMessages.built) == len({id(m) for m in CountingMessages.built})
    assert len(CountingMessages.built) < len(client.history)
    for body in llm_server.bodies()[1:]:  # the first holds no tool result to mark
        assert body["messages"][-1]["content"][0]["cache_control"] == {"type": "ephemeral"}


def test_the_tool_list_is_serialised_once_and_again_when_it_changes(home, llm_server):
    cfg = load_config(Path(write_config(home, llm_server, p={"model": "m"})), required=True)
    client = LLMSession(cfg, cfg.profile("p"), home, lambda kind: CountingChat)
    CountingChat.tool_lists = []
    tool_turns(client, llm_server, 3, 100)
    more = [*TOOLS, tool_schema("file_write", path="string")]
    llm_server.queue(Reply(text="again"))
    run_chat(client, [{"role": "user", "content": "and write"}], more)
    assert CountingChat.tool_lists == [["file_read"], ["file_read", "file_write"]]
    sent = [[t["function"]["name"] for t in body["tools"]] for body in llm_server.bodies()]
    assert sent == [["file_read"]] * 4 + [["file_read", "file_write"]]


def test_list_memo_computes_once_per_list_and_again_for_other_items():
    made = []
    memo = ListMemo(lambda items: made.append(1) or len(items))
    tools = [{"name": "a"}, {"name": "b"}]
    assert memo(tools) == memo(tools) == memo(list(tools)) == 2 and len(made) == 1
    tools.append({"name": "c"})  # the same list, grown
    assert memo(tools) == 3 and len(made) == 2
    assert memo([tools[0], {"name": "b"}, tools[2]]) == 3 and len(made) == 3  # one replaced
    assert memo([]) == 0 and len(made) == 4


def test_message_memo_computes_once_per_object_and_forgets_dropped_ones():
    made = []
    memo = MessageMemo(lambda m: made.append(m) or len(m["content"]))
    msgs = [{"role": "user", "content": [i]} for i in range(200)]
    assert [memo(m) for m in msgs] == [1] * 200
    assert [memo(m) for m in msgs] == [1] * 200 and len(made) == 200
    memo.keep_only(msgs[-10:])
    memo(msgs[0])
    assert len(made) == 201  # forgotten once it left the history


def test_memo_values_follow_a_history_that_grows_and_changes():
    made = []
    memo = MessageMemo(lambda m: made.append(m) or m["content"][0])
    msgs = [{"role": "user", "content": [i]} for i in range(100)]
    assert memo.values(msgs[:60]) == list(range(60)) and len(made) == 60
    assert memo.values(msgs) == list(range(100)) and len(made) == 100  # the new ones only
    changed = [*msgs[:10], {"role": "user", "content": ["new"]}, *msgs[11:]]
    assert memo.values(changed) == [*range(10), "new", *range(11, 100)] and len(made) == 101
    assert memo.values(msgs[:5]) == list(range(5))


def test_journal_serialises_only_what_it_writes(home, tmp_path, monkeypatch):
    """State records carry what changed; building them never re-serialises the history."""
    from frontends import journal as journal_mod
    from frontends.journal import Journal, load_session
    from ga import GenericAgent
    from llmcore.scripted import ScriptedClient

    dumped = []
    real = journal_mod._dumps
    monkeypatch.setattr(journal_mod, "_dumps", lambda obj: dumped.append(real(obj)) or dumped[-1])
    steps = [{"text": f"<summary>{n}</summary>", "tool_calls": [
        {"name": "code_run", "args": {"script": "print(1)", "inline_eval": True}}]}
        for n in range(40)] + [{"text": "done"}]
    agent = GenericAgent(ScriptedClient(steps), home=home, cwd=tmp_path, max_turns=50)
    journal = Journal(home, agent)
    agent.listeners.append(journal)
    list(agent.run_task("go"))
    journal.close()
    written = journal.path.stat().st_size
    assert sum(map(len, dumped)) < 1.5 * written
    assert load_session(journal.path).history == agent.llmclient.history


def test_default_context_win_is_gas_35000_tokens(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  p: {provider: openai, model: m, base_url: 'http://127.0.0.1:1/v1'}\n")
    assert load_config(path, required=True).profile("p").context_win == 35000
