"""What a task cost (SPEC §15): a profile's ``price:`` in USD per million tokens, checked by
the config loader; usage and task_end events carry the cost; none without prices."""

from __future__ import annotations

import pytest
import yaml
from genutil import drain
from llm_server import GO, Reply, llm_server, run_chat, write_config

import llmcore
from llmcore.base import ConfigError, Usage
from llmcore.config import load_config
from llmcore.price import Price, format_usd

__all__ = ["llm_server"]
PRICE = {"input": 3.0, "output": 15.0, "cache_read": 0.3, "cache_write": 3.75}


def config(tmp_path, **profiles) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"models": profiles}), encoding="utf-8")
    return str(path)


def test_a_request_is_priced_by_its_fresh_cached_written_and_output_tokens():
    usage = Usage(input=1000, cached=200, cache_write=100, output=50)
    # 700 fresh at 3, 200 read at 0.3, 100 written at 3.75, 50 out at 15 — per million
    assert Price(**PRICE).cost(usage) == pytest.approx((2100 + 60 + 375 + 750) / 1e6)
    assert Price(input=2.0, output=8.0).cost(usage) == pytest.approx((1000 * 2 + 50 * 8) / 1e6)


@pytest.mark.parametrize("price, field, message", [
    ({"inptu": 3, "output": 15}, "price.inptu", "did you mean input?"),
    ({"input": -1, "output": 15}, "price.input", "a number >= 0"),
    ({"input": "cheap", "output": 15}, "price.input", "a number >= 0"),
    ({"input": 3}, "price.output", "missing"),
    ([3, 15], "price", "expected a mapping"),
])
def test_a_bad_price_names_the_file_and_field(tmp_path, price, field, message):
    path = config(tmp_path, p={"provider": "openai", "model": "m", "price": price})
    with pytest.raises(ConfigError) as err:
        load_config(tmp_path / "config.yaml", required=True)
    assert err.value.path == path and err.value.field == f"models.p.{field}"
    assert message in err.value.message


def test_a_mixin_profile_is_priced_by_its_members(tmp_path):
    config(tmp_path, a={"provider": "openai", "model": "m"},
           both={"mixin": ["a"], "price": {"input": 1, "output": 2}})
    with pytest.raises(ConfigError, match="give each of them its price"):
        load_config(tmp_path / "config.yaml", required=True)


def test_a_bad_price_on_the_command_line_exits_2_with_one_line(tmp_path, capsys):
    from frontends.cli import main

    script = tmp_path / "s.yaml"
    script.write_text("- text: hi\n")
    path = config(tmp_path, s={"provider": "scripted", "script": str(script),
                               "price": {"input": 1, "ouptut": 2}})
    assert main(["--config", path, "-m", "s", "go"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"ga: {path}: models.s.price.ouptut: unknown price; "
                           "did you mean output?")


def priced_agent(tmp_path, home, steps, price=PRICE):
    from ga import GenericAgent

    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump(steps))
    prof = {"provider": "scripted", "script": str(script)}
    if price:
        prof["price"] = price
    client = llmcore.make_client("s", config_path=config(tmp_path, s=prof), home=home)
    return GenericAgent(client, home=home, cwd=".")


STEPS = [{"tool_calls": [{"name": "update_working_checkpoint", "args": {"key_info": "k"}}],
          "usage": {"input": 1000, "cached": 400, "output": 100}},
         {"text": "done", "usage": {"input": 2000, "cached": 1000, "cache_write": 500,
                                    "output": 50}}]


def test_usage_and_task_end_carry_the_cost_of_a_priced_profile(tmp_path, home):
    agent = priced_agent(tmp_path, home, STEPS)
    events = list(agent.run_task("go"))
    usage = [e for e in events if e["type"] == "usage"]
    first = (600 * 3 + 400 * 0.3 + 100 * 15) / 1e6
    second = (500 * 3 + 1000 * 0.3 + 500 * 3.75 + 50 * 15) / 1e6
    assert [u["cost"] for u in usage] == [pytest.approx(first), pytest.approx(second)]
    assert usage[1]["cache_write"] == 500 and "cache_write" not in usage[0]
    assert events[-1]["type"] == "task_end"
    assert events[-1]["cost"] == pytest.approx(first + second)
    again = list(agent.run_task("more"))  # each task its own cost: the script is used up
    assert again[-1]["cost"] == 0.0


def test_without_prices_no_event_carries_a_cost(tmp_path, home):
    agent = priced_agent(tmp_path, home, STEPS, price=None)
    events = list(agent.run_task("go"))
    assert not [e for e in events if "cost" in e]
    assert agent.llmclient.unpriced() == ["s"]


def test_a_provider_reply_is_priced_from_the_usage_the_server_reported(home, llm_server):
    path = write_config(home, llm_server, p={"provider": "anthropic", "model": "claude-x",
                                             "price": PRICE})
    client = llmcore.make_client("p", config_path=path, home=home)
    llm_server.queue(Reply(text="hi", usage=(1000, 300, 40), cache_write=200))
    _, resp = run_chat(client, [{"role": "system", "content": "S"}, *GO])
    assert (resp.usage.input, resp.usage.cached, resp.usage.cache_write) == (1000, 300, 200)
    assert resp.usage.cost == pytest.approx((500 * 3 + 300 * 0.3 + 200 * 3.75 + 40 * 15) / 1e6)


def test_a_failover_request_is_priced_by_the_profile_that_served_it(home, llm_server):
    path = write_config(
        home, llm_server,
        first={"provider": "anthropic", "model": "claude-x", "max_retries": 0,
               "price": {"input": 100, "output": 100}},
        second={"provider": "openai", "model": "gpt-x", "price": {"input": 1, "output": 2}},
        both={"mixin": ["first", "second"]})
    client = llmcore.make_client("both", config_path=path, home=home)
    client.on_event = lambda event: None
    llm_server.queue(Reply(status=500), Reply(text="from second", usage=(1000, 0, 500)))
    _, resp = run_chat(client, [{"role": "system", "content": "S"}, *GO])
    assert client.name == "second"
    assert resp.usage.cost == pytest.approx((1000 * 1 + 500 * 2) / 1e6)


def test_a_price_can_be_set_for_the_session():
    from llmcore.config import coerce

    assert coerce(None, "", "price", '{"input": 1, "output": 4}') == Price(1.0, 4.0)


def test_costs_read_as_dollars():
    assert format_usd(1.23456) == "$1.2346"
    assert format_usd(0.000042) == "$0.000042"
    assert format_usd(0.009) == "$0.0090"
    assert format_usd(0) == "$0.0000"


def test_a_turn_that_fails_after_a_broken_attempt_counts_and_prices_what_it_spent(home,
                                                                                 llm_server):
    from ga import GenericAgent

    dollar_a_token = {"input": 1e6, "output": 1e6}
    path = write_config(home, llm_server, p={"provider": "openai", "model": "m",
                                             "max_retries": 1, "price": dollar_a_token})
    client = llmcore.make_client("p", config_path=path, home=home)
    agent = GenericAgent(client, home=home, cwd=".")
    client.on_event = agent.provider_event  # as a session wires it
    llm_server.queue(Reply(text="<summary>s</summary>" + "y" * 400, drop_after=40),
                     Reply(status=500))
    events = list(agent.run_task("go"))
    usage = [e for e in events if e["type"] == "usage"]
    assert len(usage) == 1 and events[-1]["type"] == "task_end"
    assert events[-1]["result"] == "FAILED" and events.index(usage[0]) < len(events) - 1
    spent = usage[0]["input"] + usage[0]["output"]
    assert usage[0]["output"] > 0 and usage[0]["estimated"] is True  # the broken reply's text
    assert usage[0]["cost"] == pytest.approx(spent) and events[-1]["cost"] == pytest.approx(spent)
    assert client.total_usage.total == spent


def test_an_aborted_reply_is_priced_by_the_tokens_it_had_reported(home, llm_server):
    path = write_config(home, llm_server, p={"provider": "anthropic", "model": "claude-x",
                                             "price": PRICE})
    client = llmcore.make_client("p", config_path=path, home=home)
    llm_server.queue(Reply(text="a" * 400, usage=(1000, 0, 40)))
    gen = client.chat([{"role": "system", "content": "S"}, *GO])
    assert next(gen) == "aaaa"
    client.abort()  # after message_start told the input tokens
    _, resp = drain(gen)
    assert resp.stop_reason == "aborted" and resp.usage.input == 1000
    cost = (1000 * 3 + resp.usage.output * 15) / 1e6
    assert resp.usage.cost == pytest.approx(cost)
    assert client.total_usage.cost == pytest.approx(cost)
