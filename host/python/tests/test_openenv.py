"""OpenEnv both ways, against openenv-core 0.3.0 itself (pinned by `cargo xtask`):
`vagen-host serve-env` played by openenv-core's own client (WebSocket) and over its HTTP
routes, turn for turn equal to `vagen-host run`; and `vagen-host run` / `train` on a server
written with openenv-core's framework (`examples/openenv/corridor_server.py`), equal to that
env driven by its own client. VAGEN_HOST names the vagen-host binary."""

import base64
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import requests
from openenv.core import GenericEnvClient
from PIL import Image
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[3]
HOST = Path(os.environ.get("VAGEN_HOST", ROOT / "target" / "release" / "vagen-host")).resolve()
PLUGINS = ROOT / "target" / "plugins"
HOSTILE = ROOT / "target" / "test-plugins" / "hostile.wasm"
CORRIDOR = ROOT / "examples" / "openenv" / "corridor_server.py"
PICTURED = json.dumps({"observation": "text-and-image"})


@contextmanager
def serve_env(plugin, *extra):
    server = subprocess.Popen(
        [str(HOST), "serve-env", "--plugin", str(plugin), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline()
        assert line.startswith("listening on "), (line, server.stderr.read() if server.poll() is not None else "")
        yield line.split()[-1]
        assert server.poll() is None, "the server died"
    finally:
        server.kill()
        server.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def corridor(tmp_path):
    port = free_port()
    # Its log goes to a file: a pipe nobody reads would fill and stall the server.
    log = open(tmp_path / "corridor.log", "w")
    server = subprocess.Popen([sys.executable, str(CORRIDOR), "--port", str(port)], stderr=log, stdout=log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                if requests.get(f"{base}/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                pass
            assert server.poll() is None and time.time() < deadline, "the corridor server did not start"
            time.sleep(0.2)
        yield base, server
    finally:
        server.kill()
        server.wait()
        log.close()


def transcript(tmp_path, plugin, seed, episodes, config="", name="t"):
    """`vagen-host run`'s rows for random answers, by episode: turn 0 is the reset."""
    out = tmp_path / f"{name}.jsonl"
    cmd = [str(HOST), "run", "--plugin", str(plugin), "--policy", "random", "--seed", str(seed)]
    cmd += ["--episodes", str(episodes), "--out", str(out), "--env-config", config]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_episode = {}
    for row in rows:
        by_episode.setdefault(row["episode"], []).append(row)
    return [by_episode[e] for e in sorted(by_episode)], out.parent


def pixels_of_url(url):
    assert url.startswith("data:image/png;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))


def assert_turn_equal(row, observation, reward, done, folder):
    assert observation["text"] == row["observation"], row
    assert len(observation["images"]) == len(row["images"])
    for url, path in zip(observation["images"], row["images"]):
        expected = np.asarray(Image.open(folder / path).convert("RGB"))
        assert np.array_equal(pixels_of_url(url), expected), path
    if row["turn"] > 0:
        assert (reward, done) == (row["reward"], row["done"]), row
        assert observation["success"] == row["success"]
        assert (observation["valid_actions"], observation["effective_actions"]) == (
            row["valid_actions"],
            row["effective_actions"],
        )


def replay_ws(base, rows, folder, client=None):
    with GenericEnvClient(base_url=base).sync() as env:
        for episode in rows:
            result = env.reset(seed=episode[0]["seed"])
            assert_turn_equal(episode[0], result.observation, None, False, folder)
            for row in episode[1:]:
                result = env.step({"answer": row["answer"]})
                assert_turn_equal(row, result.observation, result.reward, result.done, folder)


def replay_http(base, rows, folder):
    for episode in rows:
        r = requests.post(f"{base}/reset", json={"seed": episode[0]["seed"]}, timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        episode_id = body["observation"]["episode_id"]
        assert_turn_equal(episode[0], body["observation"], None, False, folder)
        for row in episode[1:]:
            r = requests.post(f"{base}/step", json={"action": {"answer": row["answer"]}, "episode_id": episode_id}, timeout=30)
            assert r.status_code == 200, r.text
            body = r.json()
            assert_turn_equal(row, body["observation"], body["reward"], body["done"], folder)
        state = requests.get(f"{base}/state", params={"episode_id": episode_id}, timeout=30).json()
        assert (state["episode_id"], state["step_count"], state["seed"]) == (episode_id, len(episode) - 1, episode[0]["seed"])


@pytest.mark.parametrize("plugin", ["frozenlake", "sokoban"])
def test_openenvs_client_plays_as_run_does_over_websocket_and_http(tmp_path, plugin):
    path = PLUGINS / f"{plugin}.wasm"
    rows, folder = transcript(tmp_path, path, seed=40, episodes=6, config=PICTURED)
    assert any(len(r["images"]) > 0 for e in rows for r in e), "the transcript has pictures to compare"
    with serve_env(path, "--config", PICTURED) as base:
        replay_ws(base, rows, folder)
        replay_http(base, rows, folder)
        schema = requests.get(f"{base}/schema", timeout=10).json()
        assert schema["action"]["required"] == ["answer"]
        assert schema["action"]["x-vagen"]["action_names"], "the schema lists the action names"
        meta = requests.get(f"{base}/metadata", timeout=10).json()
        assert meta["name"] == plugin


def test_64_concurrent_clients_each_play_their_seeded_transcript(tmp_path):
    path = PLUGINS / "frozenlake.wasm"
    rows, folder = transcript(tmp_path, path, seed=100, episodes=64)
    with serve_env(path) as base:
        errors, health = [], []
        stop = threading.Event()

        def poll_health():
            while not stop.is_set():
                try:
                    health.append(requests.get(f"{base}/health", timeout=5).status_code)
                except requests.RequestException as e:
                    health.append(repr(e))
                time.sleep(0.02)

        def client(i):
            try:
                replay_ws(base, [rows[i]], folder)
            except Exception as e:  # noqa: BLE001 - gathered and asserted below
                errors.append((i, repr(e)))

        poller = threading.Thread(target=poll_health)
        poller.start()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(64)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stop.set()
        poller.join()
    assert errors == []
    assert len(health) > 0 and all(h == 200 for h in health), health


@pytest.mark.parametrize("mode,kind", [("panic", "trap"), ("loop", "timeout"), ("alloc", "out-of-memory")])
def test_a_plugin_fault_ends_only_its_clients_episode(mode, kind):
    with serve_env(HOSTILE, "--limit", "call_timeout_ms=300", "--limit", "memory_mib=32") as base:
        healthy = [GenericEnvClient(base_url=base).sync() for _ in range(3)]
        for c in healthy:
            c.connect()
            assert c.reset(seed=1).observation["text"] == "seed 1"
        with GenericEnvClient(base_url=base).sync() as hostile:
            hostile.reset(seed=2, config={"mode": mode})
            with pytest.raises(RuntimeError) as e:
                hostile.step({"answer": "go"})
            message = str(e.value)
            assert "EXECUTION_ERROR" in message and f"({kind})" in message, message
            # The others play on; the faulted client's episode is over until it resets.
            for c in healthy:
                assert c.step({"answer": "go"}).observation["text"] == "step 1"
            with pytest.raises(RuntimeError, match="INVALID_STATE"):
                hostile.step({"answer": "go"})
            assert hostile.reset(seed=3, config={"mode": "healthy"}).observation["text"] == "seed 3"
            assert hostile.step({"answer": "go"}).observation["turn"] == 1
        for c in healthy:
            c.close()
        assert requests.get(f"{base}/health", timeout=5).json() == {"status": "healthy"}


def test_bad_input_gets_a_4xx_naming_it_and_the_server_goes_on():
    with serve_env(PLUGINS / "frozenlake.wasm") as base:
        cases = [
            ("invalid JSON", "post", "/reset", {"data": b"{not json", "headers": {"content-type": "application/json"}}, 400, "not JSON"),
            ("unknown episode", "post", "/step", {"json": {"action": {"answer": "Up"}, "episode_id": "nope"}}, 404, "no episode \"nope\""),
            ("step with no episode", "post", "/step", {"json": {"action": {"answer": "Up"}}}, 400, "send its episode_id"),
            ("negative seed", "post", "/reset", {"json": {"seed": -1}}, 422, "seed must be an integer from 0"),
            ("10 MB action", "post", "/step", {"json": {"action": {"answer": "x" * 10_000_000}, "episode_id": "e"}}, 413, "KiB"),
            ("unknown reset argument", "post", "/reset", {"json": {"sede": 1}}, 422, "no argument \"sede\""),
            ("a config the env refuses", "post", "/reset", {"json": {"config": {"size": "huge"}}}, 422, "refused the config"),
            ("an unknown route", "get", "/stepp", {}, 404, "no such route"),
        ]
        for name, method, route, kwargs, status, needle in cases:
            r = getattr(requests, method)(f"{base}{route}", timeout=30, **kwargs)
            assert r.status_code == status, (name, r.status_code, r.text)
            assert needle in r.json()["detail"], (name, r.text)
        started = requests.post(f"{base}/reset", json={"seed": 3, "episode_id": "mine"}, timeout=30).json()
        assert started["observation"]["episode_id"] == "mine"
        for action, needle in [({"move": "Up"}, "no field \"move\""), ("Up", "must be a JSON object"), ({"answer": 3}, "must be a string")]:
            r = requests.post(f"{base}/step", json={"action": action, "episode_id": "mine"}, timeout=30)
            assert r.status_code == 422 and needle in r.json()["detail"], r.text
        # A step before reset, on a WebSocket session; a malformed action there.
        with GenericEnvClient(base_url=base).sync() as env:
            with pytest.raises(RuntimeError, match="INVALID_STATE.*|step before reset"):
                env.step({"answer": "Up"})
            env.reset(seed=0)
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                env.step({"move": "Up"})
            with pytest.raises(RuntimeError, match="ACTION_TOO_LARGE"):
                env.step({"answer": "x" * 1_000_000})
            assert env.step({"answer": "Up"}).observation["turn"] == 1
        assert requests.get(f"{base}/health", timeout=5).status_code == 200


def test_sessions_past_max_envs_are_turned_away_and_their_place_comes_back():
    with serve_env(PLUGINS / "frozenlake.wasm", "--max-envs", "2") as base:
        first = GenericEnvClient(base_url=base).sync()
        first.connect()
        first.reset(seed=0)
        r = requests.post(f"{base}/reset", json={"seed": 1}, timeout=30)
        assert r.status_code == 200, r.text
        # Two instances live: a third session, WebSocket or HTTP, is refused by name.
        with connect(base.replace("http://", "ws://") + "/ws") as third:
            frame = json.loads(third.recv(timeout=10))
            assert frame["type"] == "error" and frame["data"]["code"] == "CAPACITY_REACHED", frame
            assert "--max-envs" in frame["data"]["message"]
        r = requests.post(f"{base}/reset", json={"seed": 2}, timeout=30)
        assert r.status_code == 503 and "--max-envs" in r.json()["detail"], r.text
        first.close()
        # The closed session's place is free again.
        deadline = time.time() + 10
        while True:
            try:
                with GenericEnvClient(base_url=base).sync() as again:
                    assert again.reset(seed=3).observation["seed"] == 3
                break
            except (RuntimeError, ConnectionError):
                assert time.time() < deadline, "the place never came back"
                time.sleep(0.1)


def test_the_example_client_plays_frozenlake_against_serve_env():
    with serve_env(PLUGINS / "frozenlake.wasm") as base:
        script = ROOT / "examples" / "openenv" / "play_frozenlake.py"
        out = subprocess.run([sys.executable, str(script), "--url", base, "--episodes", "3"], capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "/3 episodes reached the goal" in out.stdout


def test_run_on_an_openenv_server_equals_its_own_client(tmp_path):
    with corridor(tmp_path) as (base, _):
        rows, _ = transcript(tmp_path, f"openenv+{base}", seed=5, episodes=8)
        with GenericEnvClient(base_url=base).sync() as env:
            for episode in rows:
                result = env.reset(seed=episode[0]["seed"])
                assert result.observation["board"] == episode[0]["observation"]
                for row in episode[1:]:
                    result = env.step({"move": row["answer"]})
                    assert result.observation["board"] == row["observation"]
                    assert (result.reward, result.done) == (row["reward"], row["done"])
                    assert row["success"] == (result.done and result.reward > 0)
        assert all(len(e) > 1 for e in rows)


def test_a_server_killed_mid_run_fails_the_episodes_in_flight_and_the_run_says_so(tmp_path):
    out = tmp_path / "t.jsonl"
    with corridor(tmp_path) as (base, server):
        cmd = [str(HOST), "run", "--plugin", f"openenv+{base}?retries=0&timeout_s=5", "--policy", "random"]
        cmd += ["--episodes", "20000", "--parallel", "4", "--out", str(out)]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        deadline = time.time() + 60
        while not (out.exists() and out.stat().st_size > 0):
            assert run.poll() is None and time.time() < deadline, "the run did not start playing"
            time.sleep(0.05)
        server.kill()
        stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1, (stdout, stderr)
    said = stdout + stderr
    assert "remote" in said and "OpenEnv server" in said, said


def test_train_runs_rl_steps_on_an_openenv_server(tmp_path):
    with corridor(tmp_path) as (base, _):
        config = ROOT / "examples" / "openenv" / "corridor-cpu.toml"
        cmd = [str(HOST), "train", "--config", str(config), "--run-dir", str(tmp_path / "run")]
        cmd += ["--set", f'env.plugin="openenv+{base}"', "--set", "schedule.steps=2", "--set", "env.val_episodes=8"]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        assert out.returncode == 0, out.stderr[-3000:]
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(m.get("step") == 2 for m in metrics), metrics[-1]


class HostileServer:
    """An OpenEnv server that describes itself as `serve-env` does (its /schema and /metadata
    replayed) and then misbehaves on its WebSocket: `images` answers reset with 40 pictures of
    4096x4096 (the limit is 16), `drip` sends a whole reply one byte every half second,
    `ping` sends pings and never a reply. A raw socket, so the bytes are paced at will."""

    def __init__(self, described, reply, mode):
        self.described, self.reply, self.mode = described, reply, mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.base = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.stop.set()
        self.sock.close()

    def _accept(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        try:
            self._play(conn)
        except OSError:
            pass  # the client gave up (the point of drip and ping)

    def _play(self, conn):
        import hashlib

        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            lines = head.decode().split("\r\n")
            path = lines[0].split()[1]
            headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
            if path in self.described:
                body = json.dumps(self.described[path]).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
                conn.sendall(f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body)
                return
            key = headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
            accept = base64.b64encode(hashlib.sha1(key.encode()).digest()).decode()
            conn.sendall(
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
                + f"sec-websocket-accept: {accept}\r\n\r\n".encode()
            )
            conn.recv(65536)  # the client's reset frame
            frame = ws_frame(0x1, self.reply.encode())
            while not self.stop.is_set():
                if self.mode == "ping":
                    conn.sendall(ws_frame(0x9, b"x"))
                    time.sleep(0.5)
                elif self.mode == "drip":
                    for b in frame:
                        conn.sendall(bytes([b]))
                        time.sleep(0.5)
                else:
                    conn.sendall(frame)
                    conn.recv(65536)
                    return


def ws_frame(opcode, payload):
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, n])
    elif n < 1 << 16:
        head = bytes([0x80 | opcode, 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 127]) + n.to_bytes(8, "big")
    return head + payload


def run_measured(cmd, cwd, timeout=60):
    """`cmd`'s exit code, output, seconds and peak resident memory (MiB, from wait4), run in
    `cwd` (a failed run writes its reproducer there)."""
    started = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=cwd)
    chunks = []
    reader = threading.Thread(target=lambda: chunks.append(proc.stdout.read()), daemon=True)
    reader.start()
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.time() - started > timeout:
            proc.kill()
            os.wait4(proc.pid, 0)
            raise AssertionError(f"{cmd} ran past {timeout} s")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join(5)
    return proc.returncode, b"".join(chunks).decode(errors="replace"), time.time() - started, usage.ru_maxrss / 1024


def test_a_hostile_openenv_server_cannot_stretch_a_call_or_make_us_decode_past_the_image_limit(tmp_path):
    # What serve-env says of itself, and one real reset reply to distort.
    with serve_env(PLUGINS / "frozenlake.wasm", "--config", PICTURED) as base:
        described = {p: requests.get(f"{base}{p}", timeout=10).json() for p in ("/schema", "/metadata")}
        with connect(base.replace("http", "ws") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"seed": 0}}))
            reply = json.loads(ws.recv())
    buf = io.BytesIO()
    Image.new("RGB", (4096, 4096)).save(buf, format="PNG")
    huge = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    flooded = json.loads(json.dumps(reply))
    flooded["data"]["observation"]["images"] = [huge] * 40
    env_tool = HOST.parent / "vagen-env"
    for mode, body, says in (
        ("images", json.dumps(flooded), "40 images (limit 16)"),
        ("drip", json.dumps(reply), "timeout"),
        ("ping", json.dumps(reply), "timeout"),
    ):
        server = HostileServer(described, body, mode)
        try:
            spec = f"openenv+{server.base}?timeout_s=3&retries=0"
            code, out, seconds, peak = run_measured([str(env_tool), "run", "--plugin", spec, "--episodes", "1"], tmp_path)
        finally:
            server.close()
        assert code != 0 and says in out, (mode, out)
        assert seconds < 20, f"{mode}: {seconds:.0f} s for a 3 s timeout"
        if mode == "images":
            assert peak < 400, f"peak {peak:.0f} MiB: the pictures were decoded"


def test_one_client_holds_its_share_of_http_episodes_and_only_it_continues_them():
    import http.client
    from websockets.exceptions import ConnectionClosed

    def reset_from(source, port, body):
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=(source, 0))
        c.request("POST", "/reset", json.dumps(body), {"content-type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())

    with serve_env(PLUGINS / "frozenlake.wasm", "--max-envs", "8") as base:
        port = int(base.rsplit(":", 1)[1])
        # A client that never sends its ids back: two episodes (8 / 4), then 429.
        codes = [reset_from("127.0.0.2", port, {"seed": i})[0] for i in range(10)]
        assert codes == [200, 200] + [429] * 8, codes
        status, flooded = reset_from("127.0.0.2", port, {"seed": 0})
        assert status == 429 and "--max-episodes-per-client" in flooded["detail"], flooded
        # Everyone else still gets places, and a known id is no key to another's episode.
        status, mine = reset_from("127.0.0.1", port, {"seed": 5})
        assert status == 200, mine
        theirs = requests.post(f"{base}/reset", json={"seed": 1}, timeout=30)  # from 127.0.0.1 too
        assert theirs.status_code == 200
        with GenericEnvClient(base_url=base).sync() as ws_client:
            assert ws_client.reset(seed=3).observation["seed"] == 3
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=("127.0.0.3", 0))
        c.request("POST", "/step", json.dumps({"action": {"answer": "Left"}, "episode_id": mine["observation"]["episode_id"]}), {"content-type": "application/json"})
        r = c.getresponse()
        assert r.status == 404, r.read()
        # A frame past the cap ends the session with close code 1009, not a dropped socket.
        # The close may reach a client still sending, whose kernel then sees the socket reset
        # before it reads the close frame (a loaded machine): a few tries, one must read 1009.
        codes = []
        for _ in range(3):
            with connect(base.replace("http://", "ws://") + "/ws", max_size=None) as ws:
                with pytest.raises(ConnectionClosed) as closed:
                    ws.send("x" * (3 << 20))
                    ws.recv(timeout=10)
            codes.append(closed.value.rcvd and closed.value.rcvd.code)
            if codes[-1] == 1009:
                break
        assert codes[-1] == 1009 and set(codes) <= {None, 1009}, codes
