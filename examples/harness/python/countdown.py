"""The task and the prompts of the Countdown agent, shared by the agent (agent.py) and the
script that writes its SFT conversations (make_chats.py), so both speak to the model alike.

A task: two numbers and a target made from them with +, - or *. The agent may try
expressions on a calculator tool, then answers with one expression; it is right when that
expression uses both numbers once and equals the target. The calculator's answer says
whether a guess makes the target ("4+2 = 6: not the target"), so an agent that tries again
until it does always wins."""

import random
import re

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluates an arithmetic expression of integers with + - * and says whether it is the target.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
SYSTEM = "Make the target from the two numbers with one of + - *. Check with the calculator, then answer with the expression."
OPS = ["+", "-", "*"]


def task(seed):
    """The numbers and the target of task `seed`."""
    rng = random.Random(seed)
    a, b = rng.randint(2, 7), rng.randint(2, 7)
    a, b = max(a, b), min(a, b)
    op = rng.choice(OPS)
    if op == "-" and a == b:
        op = "+"
    return a, b, calculate(f"{a}{op}{b}")


def first_messages(a, b, target):
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Numbers {a} {b}. Target {target}."}]


def calculate(expression):
    """The value of an expression of integers and + - * (no brackets), as text; an error's
    text otherwise."""
    if not re.fullmatch(r"\s*\d+(\s*[-+*]\s*\d+)*\s*", expression or ""):
        return "error"
    return str(eval(expression, {"__builtins__": {}}))


def check(expression, target):
    """The calculator's answer to the agent: the value of `expression` and whether it is the
    target."""
    value = calculate(expression)
    if value == "error":
        return value
    return f"{expression} = {value}: {'the target' if value == str(target) else 'not the target'}"


def reward(answer, a, b, target):
    """1 when `answer` is an expression of a and b (each once) with one of + - * whose value
    is the target, else 0."""
    m = re.fullmatch(r"\s*(\d+)\s*([-+*])\s*(\d+)\s*", answer or "")
    if not m or sorted([int(m.group(1)), int(m.group(3))]) != sorted([a, b]):
        return 0.0
    return 1.0 if calculate(answer) == str(target) else 0.0
