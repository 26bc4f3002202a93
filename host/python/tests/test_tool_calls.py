"""Tool calls through the official `openai` client: the embedded model learns a calculator
conversation by SFT from a chats file (`[sft] data`), then `vagen-host serve` offers it the
tool; its calls come back as OpenAI's `tool_calls`, whole and streamed, and the tool's
answer goes back in as a `tool` message. VAGEN_HOST names the vagen-host binary."""

import json
import subprocess

import openai
import pytest

from test_serve import HOST, serving
from test_vagen import plugin

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluates an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
SYSTEM = {"role": "system", "content": "Use the calculator."}
QUESTIONS = [("3 + 4", "7"), ("12 - 5", "7"), ("6 * 2", "12"), ("9 / 3", "3")]


def asked(question):
    return [SYSTEM, {"role": "user", "content": f"What is {question}?"}]


def called(question, answer):
    """The conversation of one question: the call, the tool's answer, the reply."""
    call = {"id": "call_0", "type": "function", "function": {"name": "calc", "arguments": json.dumps({"expression": question})}}
    return asked(question) + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "content": answer},
        {"role": "assistant", "content": f"It is {answer}."},
    ]


CONFIG = """
[env]
plugin = "PLUGIN"
groups = 1
group_size = 2
max_turns = 1
val_episodes = 1
[model]
path = "default"
device = "cpu"
[schedule]
steps = 0
[sft]
steps = 60
lr = 3e-3
episodes_per_step = 4
save_every = 0
data = "chats.jsonl"
"""


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The embedded model after SFT on the calculator chats: its checkpoint folder."""
    tmp = tmp_path_factory.mktemp("tools")
    lines = [json.dumps({"messages": called(q, a), "tools": [CALC]}) for q, a in QUESTIONS]
    (tmp / "chats.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "sft.toml").write_text(CONFIG.replace("PLUGIN", str(plugin("frozenlake"))))
    run = tmp / "run"
    subprocess.run([str(HOST), "train", "--config", str(tmp / "sft.toml"), "--run-dir", str(run)], check=True, capture_output=True)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [m["sft/loss"] for m in metrics if "sft/loss" in m]
    assert len(losses) == 60 and losses[-1] < 0.2 < 2 < losses[0], losses
    return run / "checkpoints" / "sft-000060" / "actor"


@pytest.fixture(scope="module")
def client(trained):
    with serving("--model", str(trained)) as c:
        yield c


def ask(client, messages, **kw):
    return client.chat.completions.create(model=client.models.list().data[0].id, messages=messages, temperature=0, max_tokens=64, **kw)


def written_call(client, question):
    """What the model writes for `question` with the tool offered and calls left unread
    (`tool_choice` none, greedy): the text of its call's name and arguments."""
    text = ask(client, asked(question), tools=[CALC], tool_choice="none").choices[0].message.content
    assert text.startswith('<tool_call>\n{"name": "calc", "arguments": ') and text.endswith("}\n</tool_call>"), text
    return "calc", text[len('<tool_call>\n{"name": "calc", "arguments": ') : -len("}\n</tool_call>")]


def test_a_call_comes_back_as_tool_calls_and_its_answer_goes_back_in(client):
    first = ask(client, asked("3 + 4"), tools=[CALC])
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and len(call.id) == 29
    # Read back exactly as written (the same greedy draw), and a JSON object as learnt.
    assert (call.function.name, call.function.arguments) == written_call(client, "3 + 4")
    assert list(json.loads(call.function.arguments)) == ["expression"]
    # The client's own message goes back with the tool's answer.
    history = asked("3 + 4") + [choice.message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "7"}]
    second = ask(client, history, tools=[CALC]).choices[0]
    assert (second.finish_reason, second.message.tool_calls) == ("stop", None)
    assert second.message.content.startswith("It is "), second.message.content


def test_a_streamed_call_arrives_in_tool_call_deltas(client):
    stream = ask(client, asked("6 * 2"), tools=[CALC], stream=True)
    content, calls, finish = "", {}, None
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            for d in c.delta.tool_calls or []:
                entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += d.id or ""
                entry["name"] += (d.function and d.function.name) or ""
                entry["arguments"] += (d.function and d.function.arguments) or ""
            finish = c.finish_reason or finish
    assert (content, finish) == ("", "tool_calls")
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [written_call(client, "6 * 2")]
    assert calls[0]["id"].startswith("call_")


def test_tool_choice_forces_a_call(client):
    # OpenAI ends an answer forced to call a named function with "stop".
    named = ask(client, asked("9 / 3"), tools=[CALC], tool_choice={"type": "function", "function": {"name": "calc"}})
    call = named.choices[0].message.tool_calls[0]
    assert (named.choices[0].finish_reason, call.function.name) == ("stop", "calc")
    # The forced opening is the prompt's; what follows it is what the model writes anyway.
    assert call.function.arguments == written_call(client, "9 / 3")[1]
    auto = ask(client, asked("9 / 3"), tools=[CALC])
    assert named.usage.completion_tokens < auto.usage.completion_tokens
    required = ask(client, asked("9 / 3"), tools=[CALC], tool_choice="required").choices[0]
    assert required.finish_reason == "tool_calls"
    assert required.message.tool_calls[0].function.arguments == call.function.arguments


def test_a_call_cut_short_is_text_not_an_error(client):
    cut = client.chat.completions.create(
        model=client.models.list().data[0].id, messages=asked("3 + 4"), tools=[CALC], temperature=0, max_tokens=6
    ).choices[0]
    assert cut.finish_reason == "length" and cut.message.tool_calls is None
    assert cut.message.content.startswith("<tool"), cut.message.content
    with pytest.raises(openai.BadRequestError) as e:
        ask(client, asked("3 + 4"), tools=[CALC], tool_choice={"type": "function", "function": {"name": "rm"}})
    assert e.value.body["param"] == "tool_choice"
