"""A Countdown agent on the official `openai` client with one tool, a calculator. It knows
nothing of vagen: the client reads OPENAI_BASE_URL and OPENAI_API_KEY from the environment
(the trainer sets them to the episode's own endpoint), the task comes in VAGEN_TASK, and the
last line it prints is its reward. Run it against any OpenAI-compatible server with
VAGEN_TASK='{"seed": 7}' python agent.py."""

import json
import os

from openai import OpenAI

from countdown import TOOLS, check, first_messages, reward, task

MAX_CALLS = 4  # up to three guesses, then the answer


def main():
    seed = json.loads(os.environ["VAGEN_TASK"])["seed"]
    a, b, target = task(seed)
    client = OpenAI()
    messages = first_messages(a, b, target)
    answer = None
    for _ in range(MAX_CALLS):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=48)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            answer = message.content
            break
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": check(expression, target)})
    r = reward(answer, a, b, target)
    tried = sum(1 for m in messages if m["role"] == "tool")
    print(json.dumps({"reward": r, "success": r == 1.0, "metrics": {"tried": tried}}))


if __name__ == "__main__":
    main()
