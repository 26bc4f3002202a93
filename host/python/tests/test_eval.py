"""`vagen-host eval` as benchmarkers use it: a model behind an OpenAI-compatible endpoint
(our own `serve`, and a flaky stand-in) against the local model, pass@k, results files,
`--resume` after a kill -9, and `eval-compare`. VAGEN_HOST names the vagen-host binary."""

import contextlib
import http.server
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from test_serve import HOST, ROOT, served

PLUGINS = Path(os.environ.get("VAGEN_PLUGIN_PATH", ROOT / "target" / "plugins"))
FROZENLAKE = PLUGINS / "frozenlake.wasm"


def evaluate(out, *args, check=True):
    """`vagen-host eval ARGS --out OUT`: its summary (None when it wrote none) and the run."""
    run = subprocess.run(
        [str(HOST), "eval", "--device", "cpu", "--out", str(out), "--json", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert run.returncode == 0, run.stderr
    summary = Path(out) / "summary.json"
    return (json.loads(summary.read_text()) if summary.exists() else None), run


def episodes(out):
    return [json.loads(line) for line in (Path(out) / "results.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "model, env_config",
    [("default", ""), ("default-vl", '{"observation": "image", "max_actions_per_turn": 1}')],
)
def test_the_served_model_plays_every_episode_as_the_local_one(tmp_path, model, env_config):
    common = ["--plugin", str(FROZENLAKE), "--env-config", env_config, "--episodes", "3", "--max-turns", "3"]
    local, _ = evaluate(tmp_path / "local", "--model", model, *common)
    with served("--model", model, "--served-name", "m") as url:
        remote, _ = evaluate(tmp_path / "served", "--policy", "openai", "--base-url", url, "--model", "m", *common)
    assert remote["settings"]["env"]["sha256"] == local["settings"]["env"]["sha256"]
    assert remote["settings"]["model"]["endpoint"] == url
    pairs = list(zip(episodes(tmp_path / "local"), episodes(tmp_path / "served"), strict=True))
    for a, b in pairs:
        assert (a["seed"], a["reward"], a["finish"]) == (b["seed"], b["reward"], b["finish"])
        assert [t["prompt"] for t in a["steps"]] == [t["prompt"] for t in b["steps"]]
        assert [t["answer"] for t in a["steps"]] == [t["answer"] for t in b["steps"]]
    if model == "default-vl":
        shown = [t["images"] for a, _ in pairs for t in a["steps"]]
        assert all(len(i) == 1 and (tmp_path / "local" / i[0]).is_file() for i in shown)
    assert remote["success"] == local["success"]


class Flaky(http.server.BaseHTTPRequestHandler):
    """Fails each distinct request `failures` times in `mode`, then answers `Right`."""

    mode, failures, seen, lock = "500", 1, {}, threading.Lock()

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            self.seen.setdefault(body, []).append(time.monotonic())
            tries = len(self.seen[body])
        if tries <= self.failures:
            if self.mode == "stall":
                time.sleep(3)
            elif self.mode == "close":
                self.connection.close()
                return
            else:
                self.send_response(int(self.mode))
                # Longer than the client's first backoff (0.5 s): the server's wait is kept.
                if self.mode == "429":
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
        answer = json.dumps({"choices": [{"message": {"role": "assistant", "content": "<think></think><answer>Right"}, "finish_reason": "stop"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer.encode())

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def flaky(mode, failures):
    handler = type("Handler", (Flaky,), {"mode": mode, "failures": failures, "seen": {}})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        server.shutdown()


ENDPOINT = ["--policy", "openai", "--model", "m", "--plugin", str(FROZENLAKE), "--episodes", "3", "--max-turns", "2", "--timeout-s", "1"]


@pytest.mark.parametrize("mode", ["500", "429", "stall", "close"])
def test_a_server_that_fails_then_recovers_is_retried(tmp_path, mode):
    with flaky(mode, 1) as (url, handler):
        s, _ = evaluate(tmp_path, "--base-url", url, "--retries", "2", *ENDPOINT)
    assert (s["lost"], s["judged"]) == (0, 3)
    assert s["requests"]["retries"] >= 3 and s["requests"]["failed"] == 0
    # The stand-in's `Right` closed by the restored `</answer>`: every answer in the format.
    assert s["format_valid_rate"] == 1.0
    assert all(t["actions"] == ["Right"] for e in episodes(tmp_path) for t in e["steps"])
    if mode == "429":
        waits = [times[1] - times[0] for times in handler.seen.values()]
        assert min(waits) >= 0.95, waits


def test_a_server_that_never_recovers_loses_episodes_and_resume_plays_them(tmp_path):
    with flaky("503", 100) as (url, _):
        s, run = evaluate(tmp_path, "--base-url", url, "--retries", "1", *ENDPOINT)
    assert run.returncode == 0 and "lost to the policy's server" in run.stderr
    assert (s["lost"], s["judged"], s["env_failures"], s["success"]) == (3, 0, 0, None)
    assert all(e["finish"] == "lost" and "HTTP 503" in e["error"] for e in episodes(tmp_path))
    with flaky("503", 0) as (url, _):
        s, _ = evaluate(tmp_path, "--base-url", url, "--resume", *ENDPOINT)
    assert (s["lost"], s["judged"]) == (0, 3)
    assert len(episodes(tmp_path)) == 3


def test_a_refused_key_or_model_stops_the_run_naming_it(tmp_path):
    with flaky("404", 100) as (url, handler):
        s, run = evaluate(tmp_path, "--base-url", url, *ENDPOINT, check=False)
    assert run.returncode != 0 and "HTTP 404" in run.stderr, run.stderr
    assert sum(len(t) for t in handler.seen.values()) == 3, "asked once each, not retried"


SAMPLED = ["--model", "default", "--plugin", str(FROZENLAKE), "--episodes", "6", "-n", "2", "--temperature", "1", "--parallel", "4", "--max-new-tokens", "24", "--max-turns", "3"]


def figures(summary):
    return {k: v for k, v in summary.items() if k not in ("wall_seconds", "settings")}


def test_resume_after_kill_9_plays_only_the_missing_episodes_and_gives_the_same_summary(tmp_path):
    whole, _ = evaluate(tmp_path / "whole", *SAMPLED)
    assert set(whole["pass_at_k"]) == {"pass@1", "pass@2"}
    killed = tmp_path / "killed"
    run = subprocess.Popen([str(HOST), "eval", "--device", "cpu", "--out", str(killed), "--json", *SAMPLED],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = killed / "results.jsonl"
    while not (results.exists() and len(results.read_text().splitlines()) >= 4):
        assert run.poll() is None, "the run ended before it could be killed"
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    kept = len(episodes(killed))
    assert 4 <= kept < 12
    resumed, r = evaluate(killed, "--resume", *SAMPLED)
    assert f"{kept} episodes kept, {12 - kept} to play" in r.stderr
    assert figures(resumed) == figures(whole)
    # Other settings are not a resume: refused, naming them.
    _, r = evaluate(killed, "--resume", *SAMPLED[:-1], "4", check=False)
    assert r.returncode != 0 and "max_turns (3 vs 4)" in r.stderr


def test_eval_compare_prints_both_and_refuses_another_env_build(tmp_path):
    common = ["--policy", "random", "--plugin", str(FROZENLAKE), "--episodes", "6", "-n", "2"]
    evaluate(tmp_path / "a", *common)
    evaluate(tmp_path / "b", "--policy", "oracle", *common[2:])
    shown = subprocess.run([str(HOST), "eval-compare", str(tmp_path / "a"), str(tmp_path / "b")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()
    assert "pass@2" in rows[0] and "random" in rows[1] and "oracle" in rows[2]
    # The same env rebuilt (a custom section appended): another digest, refused by it.
    rebuilt = tmp_path / "frozenlake-rebuilt.wasm"
    name = b"rebuilt"
    section = bytes([len(name)]) + name + b"x"
    rebuilt.write_bytes(FROZENLAKE.read_bytes() + b"\x00" + bytes([len(section)]) + section)
    evaluate(tmp_path / "c", *common[:3], str(rebuilt), *common[4:])
    refused = subprocess.run([str(HOST), "eval-compare", str(tmp_path / "a"), str(tmp_path / "c")], capture_output=True, text=True)
    assert refused.returncode != 0 and "different env builds" in refused.stderr
    allowed = subprocess.run([str(HOST), "eval-compare", "--allow-different-env", str(tmp_path / "a"), str(tmp_path / "c")], capture_output=True, text=True)
    assert allowed.returncode == 0, allowed.stderr
