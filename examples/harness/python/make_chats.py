"""Writes chats.jsonl, the conversations the agent's SFT starts from: every task once with
each operation: a calculator call, the calculator's answer, then that expression as the
answer, right or not. The model learns the protocol (a call with the task's numbers, then an
answer) and no preference among the operations (each equally likely for every task), so
the runs of a task differ and RL has something to tell apart: which operation makes the
target is left to it.

    python make_chats.py > chats.jsonl"""

import json

from countdown import OPS, TOOLS, calculate, first_messages, task

# Seeds far from the training run's; they draw every task of the space many times over.
SEEDS = range(1 << 30, (1 << 30) + 2000)


def conversation(a, b, target, op):
    expression = f"{a}{op}{b}"
    call = {
        "id": "call_0",
        "type": "function",
        "function": {"name": "calculate", "arguments": json.dumps({"expression": expression})},
    }
    return {
        "messages": first_messages(a, b, target)
        + [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": calculate(expression)},
            {"role": "assistant", "content": expression},
        ],
        "tools": TOOLS,
    }


def main():
    tasks = sorted({task(seed) for seed in SEEDS})
    for a, b, target in tasks:
        for op in OPS:
            print(json.dumps(conversation(a, b, target, op)))


if __name__ == "__main__":
    main()
