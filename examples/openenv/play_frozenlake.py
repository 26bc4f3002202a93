"""Plays FrozenLake through openenv-core's own client against `vagen-host serve-env`: no
training, no vagen import, only the OpenEnv protocol. Each turn draws a seeded random move
from the action names the server's schema lists.

    vagen-host serve-env --plugin target/plugins/frozenlake.wasm --port 8000 &
    python examples/openenv/play_frozenlake.py --url http://127.0.0.1:8000 --episodes 5
"""

import argparse
import random

import requests
from openenv.core import GenericEnvClient


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--episodes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    schema = requests.get(f"{args.url}/schema", timeout=10).json()
    names = schema["action"]["x-vagen"]["action_names"]
    # The server plays as long as the env does; the turn limit is the client's (Gymnasium's
    # TimeLimit), here the env's own default.
    max_turns = schema["action"]["x-vagen"]["default_max_turns"]
    rng = random.Random(args.seed)
    wins = 0
    with GenericEnvClient(base_url=args.url).sync() as env:
        for episode in range(args.episodes):
            result = env.reset(seed=args.seed + episode)
            print(result.observation["system_prompt"] if episode == 0 else "")
            print(result.observation["text"])
            for _ in range(max_turns):
                if result.done:
                    break
                move = rng.choice(names)
                result = env.step({"answer": move})
                print(f"> {move}  reward {result.reward}")
                print(result.observation["text"])
            wins += result.observation["success"]
    print(f"{wins}/{args.episodes} episodes reached the goal")


if __name__ == "__main__":
    main()
