"""`vagen-host serve` answers the official `openai` client: chat completions, streamed and
not, and its errors. VAGEN_HOST names the vagen-host binary."""

import os
import subprocess
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[3]
HOST = Path(os.environ.get("VAGEN_HOST", ROOT / "target" / "release" / "vagen-host"))


@pytest.fixture(scope="module")
def client():
    server = subprocess.Popen(
        [str(HOST), "serve", "--port", "0", "--device", "cpu", "--served-name", "vagen-default"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on "), line
        base = line.split()[-1]
        yield openai.OpenAI(base_url=f"{base}/v1", api_key="not-needed", max_retries=0)
    finally:
        server.kill()
        server.wait()


def test_models_lists_the_served_name(client):
    assert [m.id for m in client.models.list()] == ["vagen-default"]


def test_a_chat_completion_has_text_and_usage(client):
    r = client.chat.completions.create(
        model="vagen-default",
        messages=[{"role": "system", "content": "FrozenLake."}, {"role": "user", "content": "Go left."}],
        max_tokens=6,
        temperature=0,
    )
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str)
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 6 and r.usage.prompt_tokens > 0
    # Greedy and seeded: the same request gives the same text.
    again = client.chat.completions.create(
        model="vagen-default",
        messages=[{"role": "system", "content": "FrozenLake."}, {"role": "user", "content": "Go left."}],
        max_tokens=6,
        temperature=0,
    )
    assert again.choices[0].message.content == choice.message.content


def test_streaming_gives_the_same_text_in_pieces(client):
    args = dict(
        model="vagen-default",
        messages=[{"role": "user", "content": "Where is the goal?"}],
        max_tokens=8,
        temperature=0,
        seed=3,
    )
    whole = client.chat.completions.create(**args).choices[0].message.content
    pieces, finish = [], None
    for chunk in client.chat.completions.create(stream=True, **args):
        delta = chunk.choices[0].delta
        if delta.content:
            pieces.append(delta.content)
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == whole
    assert finish in ("stop", "length")


def test_a_bad_request_is_an_openai_error(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="vagen-default", messages=[], max_tokens=4)
    assert "messages is empty" in str(e.value)


ASK = dict(model="vagen-default", messages=[{"role": "user", "content": "Where is the goal?"}], max_tokens=12)


def test_unseeded_samples_are_fresh_and_seeded_ones_repeat(client):
    ids = lambda r, i=0: r.choices[i].token_ids  # noqa: E731 (our extension field)
    a, b = (client.chat.completions.create(temperature=1.0, **ASK) for _ in range(2))
    assert ids(a) != ids(b)
    a, b = (client.chat.completions.create(temperature=1.0, seed=11, **ASK) for _ in range(2))
    assert ids(a) == ids(b)


def test_n_choices_are_the_single_requests_seeded_in_turn_with_logprobs(client):
    four = client.chat.completions.create(temperature=1.0, seed=20, n=4, logprobs=True, **ASK)
    assert [c.index for c in four.choices] == [0, 1, 2, 3]
    for i, choice in enumerate(four.choices):
        alone = client.chat.completions.create(temperature=1.0, seed=20 + i, **ASK).choices[0]
        assert choice.token_ids == alone.token_ids and choice.message.content == alone.message.content
        assert len(choice.logprobs.content) == len(choice.token_ids)
        assert all(t.logprob <= 0.0 for t in choice.logprobs.content)


def test_what_the_server_does_not_implement_is_refused_by_name(client):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(tools=[{"type": "function", "function": {"name": "f"}}], **ASK)
    assert e.value.body["param"] == "tools"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(response_format={"type": "json_object"}, **ASK)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(**{**ASK, "model": "gpt-4o"})
    assert e.value.body["code"] == "model_not_found"
