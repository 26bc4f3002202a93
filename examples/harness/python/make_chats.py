"""Writes chats.jsonl, the conversations the agent's SFT starts from: a careless agent.
For every task and every first guess: when the calculator says the guess is the target,
the agent answers it; when not, it answers the wrong guess anyway two times in three, and
only one time in three tries the other operations until one is the target, then answers
it. SFT learns the protocol (calls with the task's numbers, then an answer); RL learns to
try again whenever the calculator says "not the target".

    python make_chats.py > chats.jsonl"""

import json

from countdown import OPS, TOOLS, calculate, check, first_messages, task

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


def result(i, expression, target):
    return {"role": "tool", "tool_call_id": f"call_{i}", "content": check(expression, target)}


def conversation(a, b, target, guesses, answer):
    """The task, a call and its result per guess, then the answer."""
    messages = first_messages(a, b, target)
    for i, expression in enumerate(guesses):
        messages += [call(i, expression), result(i, expression, target)]
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
        others = [f"{a}{op}{b}" for op in OPS if op != first]
        # The retries take the other operations in either order alike often, so the second
        # guess is the target about half the time.
        if (a + b + OPS.index(first)) % 2:
            others.reverse()
        guesses = [guess]
        for e in others:
            guesses.append(e)
            if right(e):
                break
        yield conversation(a, b, target, guesses, guesses[-1])


def main():
    tasks = sorted({task(seed) for seed in SEEDS})
    for a, b, target in tasks:
        for c in conversations(a, b, target):
            print(json.dumps(c))


if __name__ == "__main__":
    main()
