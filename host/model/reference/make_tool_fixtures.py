"""Writes tests/fixtures/tool-chats.json: conversations in OpenAI's chat format with tools,
tool calls and tool messages, rendered by transformers' `apply_chat_template` with the
embedded model's template (Qwen2.5's): tools passed as sent, each call's JSON `arguments`
decoded to a dict first (as vLLM does). Run by `cargo xtask fixtures`.
"""

import copy
import json
import pathlib

from transformers import PreTrainedTokenizerFast

HERE = pathlib.Path(__file__).resolve().parent
CRATE = HERE.parent
FIXTURES = CRATE / "tests" / "fixtures"

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Evaluates an arithmetic expression.",
        # Keys out of alphabetical order: they must stay in the order written.
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]},
    },
}
WEATHER = {"type": "function", "function": {"name": "weather", "parameters": {"type": "object", "properties": {"zone": {"type": "string"}, "day": {"type": "integer"}}}}}


def call(id_, name, arguments):
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


CASES = [
    {"tools": [CALC], "messages": [{"role": "user", "content": "What is 3 + 4?"}]},
    {
        "tools": [CALC, WEATHER],
        "messages": [
            {"role": "system", "content": "You are a careful assistant."},
            {"role": "user", "content": "What is 3 + 4, and the weather in Zürich tomorrow?"},
            {
                "role": "assistant",
                "content": "Let me check both.",
                "tool_calls": [
                    call("call_1", "calc", '{"expression": "3 + 4"}'),
                    call("call_2", "weather", '{"zone": "Zürich", "day": 1}'),
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "7"},
            {"role": "tool", "tool_call_id": "call_2", "content": "sunny"},
            {"role": "assistant", "content": "7, and sunny."},
            {"role": "user", "content": "Thanks!"},
        ],
    },
    {
        "tools": [],
        "messages": [
            {"role": "user", "content": "Add 1 and 2."},
            {"role": "assistant", "content": "", "tool_calls": [call("c", "calc", '{"expression":"1+2"}')]},
            {"role": "tool", "tool_call_id": "c", "content": "3"},
        ],
    },
]


def decoded(messages):
    """vLLM's preparation: each tool call's arguments as the object they encode."""
    out = copy.deepcopy(messages)
    for m in out:
        for c in m.get("tool_calls", []):
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    return out


def main():
    tok = PreTrainedTokenizerFast.from_pretrained(FIXTURES / "tiny-qwen2")
    template = (CRATE / "assets" / "chat_template.jinja").read_text()
    cases = []
    for case in CASES:
        for gen_prompt in (False, True):
            text = tok.apply_chat_template(
                decoded(case["messages"]),
                tools=case["tools"] or None,
                chat_template=template,
                add_generation_prompt=gen_prompt,
                tokenize=False,
            )
            cases.append({**case, "add_generation_prompt": gen_prompt, "text": text})
    (FIXTURES / "tool-chats.json").write_text(json.dumps(cases, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
