"""Writes chats.jsonl, the conversations the agent's SFT starts from: a careless agent.
For every task and every first guess: when the calculator says the guess makes the target,
the agent answers it; when not, it answers the wrong guess anyway two times in three, and
only one time in three tries another operation (then answers it if it is right, else the
one operation left). SFT learns the protocol (calls with the task's numbers, then an
answer); RL learns to try again whenever the calculator disagrees with the target.

    python make_chats.py > chats.jsonl"""

import json

from countdown import OPS, TOOLS, calculate, first_messages, task

# Seeds far from the training run's; they draw every task of the space many times over.
SEEDS = range(1 << 30, (1 << 30) + 2000)


def call(i, expression):
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": f"call_{i}", "type": "function", "function": {"name": "calculate", "arguments": json.dumps({"expression": expression})}}
        ],
    }


def result(i, expression):
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": calculate(expression)}


def conversation(a, b, target, guesses, answer):
    """The task, a call and its result per guess, then the answer."""
    messages = first_messages(a, b, target)
    for i, expression in enumerate(guesses):
        messages += [call(i, expression), result(i, expression)]
    return {"messages": messages + [{"role": "assistant", "content": answer}], "tools": TOOLS}


def conversations(a, b, target):
    right = lambda e: calculate(e) == str(target)
    for first in OPS:
        guess = f"{a}{first}{b}"
        if right(guess):
            yield conversation(a, b, target, [guess], guess)
            continue
        yield conversation(a, b, target, [guess], guess)
        yield conversation(a, b, target, [guess], guess)
        second, third = [f"{a}{op}{b}" for op in OPS if op != first]
        if right(third):
            second, third = third, second
        # One retry, with the operation that makes the target or not, alike often.
        again = second if (a + b + OPS.index(first)) % 2 else third
        yield conversation(a, b, target, [guess, again], again if right(again) else next(
            e for e in (second, third) if e != again))


def main():
    tasks = sorted({task(seed) for seed in SEEDS})
    for a, b, target in tasks:
        for c in conversations(a, b, target):
            print(json.dumps(c))


if __name__ == "__main__":
    main()
