"""Steps per second of FrozenLake through `vagen-host serve-env` with openenv-core's own
client (WebSocket sessions), 1 and 16 clients on threads, beside the same plugin in-process
through the Python package (one env, and a 16-env vector env). Prints figures; not a test.

    .venv/bin/python host/python/bench_openenv.py [--seconds S]
"""

import argparse
import os
import subprocess
import threading
import time

import numpy as np
from openenv.core import GenericEnvClient

import vagen

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = os.path.join(ROOT, "target", "plugins", "frozenlake.wasm")
HOST = os.environ.get("VAGEN_HOST", os.path.join(ROOT, "target", "release", "vagen-host"))
NAMES = vagen.make(PLUGIN).manifest["action_names"]


def over_openenv(base, clients, seconds):
    counts = [0] * clients
    start = threading.Barrier(clients + 1)

    def play(i):
        rng = np.random.default_rng(i)
        with GenericEnvClient(base_url=base).sync() as env:
            env.reset(seed=i)
            start.wait()
            until = time.perf_counter() + seconds
            while time.perf_counter() < until:
                result = env.step({"answer": NAMES[rng.integers(len(NAMES))]})
                counts[i] += 1
                if result.done or result.observation["turn"] >= 100:
                    env.reset(seed=i + counts[i])

    threads = [threading.Thread(target=play, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - began)


def in_process(seconds, n):
    rng = np.random.default_rng(0)
    if n == 1:
        env = vagen.make(PLUGIN)
        env.reset(seed=0)
        steps, began = 0, time.perf_counter()
        while time.perf_counter() - began < seconds:
            _, _, terminated, truncated, _ = env.step(NAMES[rng.integers(len(NAMES))])
            steps += 1
            if terminated or truncated:
                env.reset()
        return steps / (time.perf_counter() - began)
    env = vagen.make_vec(PLUGIN, n)
    env.reset(seed=0)
    steps, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        env.step(tuple(NAMES[i] for i in rng.integers(len(NAMES), size=n)))
        steps += n
    return steps / (time.perf_counter() - began)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=5.0)
    s = parser.parse_args().seconds
    server = subprocess.Popen([HOST, "serve-env", "--plugin", PLUGIN, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        base = server.stdout.readline().split()[-1]
        rows = [
            ("serve-env + openenv-core client, 1 client", over_openenv(base, 1, s)),
            ("serve-env + openenv-core client, 16 clients", over_openenv(base, 16, s)),
        ]
    finally:
        server.kill()
        server.wait()
    rows.append(("vagen Python package in-process, 1 env", in_process(s, 1)))
    rows.append(("vagen Python package in-process, 16-env vector", in_process(s, 16)))
    print(f"{'FrozenLake (frozenlake.wasm), random moves':52} {'steps/s':>10}")
    for label, rate in rows:
        print(f"{label:52} {rate:10.0f}")
    print(f"({os.cpu_count()} CPUs; each row {s:.0f} s)")


if __name__ == "__main__":
    main()
