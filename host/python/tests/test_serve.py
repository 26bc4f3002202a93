"""`vagen-host serve` answers the official `openai` client: chat completions, streamed and
not, and its errors. VAGEN_HOST names the vagen-host binary."""

import contextlib
import os
import subprocess
from pathlib import Path

import openai
import pytest

ROOT = Path(__file__).resolve().parents[3]
HOST = Path(os.environ.get("VAGEN_HOST", ROOT / "target" / "release" / "vagen-host"))


@contextlib.contextmanager
def served(*args):
    """`vagen-host serve ARGS` on a free port: its base URL (…/v1), stopped after."""
    server = subprocess.Popen(
        [str(HOST), "serve", "--port", "0", "--device", "cpu", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"{line.split()[-1]}/v1"
    finally:
        server.kill()
        server.wait()


@contextlib.contextmanager
def serving(*args):
    """An official client of `vagen-host serve ARGS` on a free port, stopped after."""
    with served(*args) as url:
        yield openai.OpenAI(base_url=url, api_key="not-needed", max_retries=0)


@pytest.fixture(scope="module")
def client():
    with serving("--served-name", "vagen-default") as c:
        yield c


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
        client.chat.completions.create(logit_bias={"5": 10}, **ASK)
    assert e.value.body["param"] == "logit_bias"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(response_format={"type": "json_object"}, **ASK)
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(**{**ASK, "model": "gpt-4o"})
    assert e.value.body["code"] == "model_not_found"


def test_a_streamed_answer_with_include_usage_ends_with_the_whole_answers_usage(client):
    args = dict(ASK, temperature=1.0, seed=5, n=2)
    whole = client.chat.completions.create(**args)
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **args))
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (
        whole.usage.prompt_tokens,
        whole.usage.completion_tokens,
        whole.usage.total_tokens,
    )
    assert all(c.usage is None for c in chunks[:-1])
    # Without the option, no usage chunk.
    assert all(c.choices for c in client.chat.completions.create(stream=True, **args))


def test_response_format_text_is_accepted_and_json_refused_with_the_reason(client):
    r = client.chat.completions.create(response_format={"type": "text"}, temperature=0, **ASK)
    assert r.choices[0].finish_reason in ("stop", "length")
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}, **ASK
        )
    assert e.value.body["param"] == "response_format" and "constrain" in e.value.body["message"]


def test_models_retrieve_and_unknown_routes_answer_as_openai_does(client):
    assert client.models.retrieve("vagen-default").id == "vagen-default"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.body["code"] == "model_not_found"
    with pytest.raises(openai.NotFoundError) as e:
        client.completions.create(model="vagen-default", prompt="Hi")
    assert "/v1/completions" in e.value.body["message"] and e.value.body["type"] == "invalid_request_error"


def test_logprob_bytes_are_each_tokens_own_and_join_to_the_text(client):
    r = client.chat.completions.create(temperature=1.0, seed=8, logprobs=True, top_logprobs=2, **ASK)
    choice = r.choices[0]
    entries = choice.logprobs.content
    # (The untrained model also samples ids past its tokenizer's vocabulary: no bytes.)
    assert sum(1 for e in entries if e.bytes) >= len(entries) // 2
    # The text, then the end-of-turn token's own bytes when the answer ended there.
    joined = b"".join(bytes(e.bytes) for e in entries).decode("utf-8", errors="replace")
    assert joined.startswith(choice.message.content)
    for e in entries:
        if not e.token.startswith("bytes:"):
            assert bytes(e.bytes).decode("utf-8") == e.token
        assert all(bytes(t.bytes).decode("utf-8", errors="replace") in t.token or t.token.startswith("bytes:") for t in e.top_logprobs)


@pytest.fixture(scope="module")
def vl_client():
    with serving("--model", "default-vl", "--served-name", "vl") as c:
        yield c


def _picture(fmt):
    """A 64x48 picture of grey 16-pixel blocks, which each format stores exactly (JPEG too:
    grey has no chroma to lose, and flat blocks aligned to its 16-pixel units keep only DC)."""
    import base64
    import io

    from PIL import Image

    img = Image.new("RGB", (64, 48))
    for x in range(0, 64, 16):
        for y in range(0, 48, 16):
            g = (x * 3 + y * 5) % 256
            img.paste((g, g, g), (x, y, x + 16, y + 16))
    buf = io.BytesIO()
    options = {"jpeg": dict(quality=100, subsampling=0), "webp": dict(lossless=True)}.get(fmt, {})
    img.save(buf, format=fmt.upper(), **options)
    return f"data:image/{fmt};base64,{base64.b64encode(buf.getvalue()).decode()}"


def test_jpeg_webp_and_gif_images_answer_as_the_same_picture_in_png(vl_client):
    def ask(fmt, role="user"):
        content = [{"type": "text", "text": "What is here?"}, {"type": "image_url", "image_url": {"url": _picture(fmt)}}]
        return vl_client.chat.completions.create(
            model="vl", messages=[{"role": role, "content": content}], max_tokens=6, temperature=0
        )

    png = ask("png").choices[0]
    for fmt in ("jpeg", "webp", "gif"):
        other = ask(fmt).choices[0]
        assert (other.token_ids, other.message.content) == (png.token_ids, png.message.content), fmt
    with pytest.raises(openai.BadRequestError) as e:
        ask("png", role="system")
    assert "user messages only" in e.value.body["message"]
