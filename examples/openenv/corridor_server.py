"""Corridor: a small text game written with openenv-core's server framework, for
`vagen-host train` to train on through `[env] plugin = "openenv+http://HOST:PORT"`.

The agent stands somewhere in a corridor of 7 cells and must walk to the goal, one step
left or right per turn, in at most 8 turns. Reward 1 on reaching the goal, 0 otherwise;
the episode is drawn from `seed` (the same seed, the same corridor).

    python examples/openenv/corridor_server.py --port 8765

(openenv-core 0.3.0; `cargo xtask test` installs it into the project's `.venv`.)
"""

import argparse
import random
import uuid
from typing import Any, Literal, Optional

from openenv.core.env_server import Action, Environment, Observation, State, create_app
from openenv.core.env_server.types import EnvironmentMetadata

CELLS = 7
MAX_TURNS = 8


class MoveAction(Action):
    move: Literal["left", "right"]


class CorridorObservation(Observation):
    board: str = ""


class CorridorState(State):
    agent: int = 0
    goal: int = 0


def board(agent: int, goal: int, turns_left: int) -> str:
    cells = "".join("A" if i == agent else "G" if i == goal else "." for i in range(CELLS))
    return f"Corridor: {cells}\nYou are A, the goal is G. Turns left: {turns_left}."


class Corridor(Environment[MoveAction, CorridorObservation, CorridorState]):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self._state = CorridorState()

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **kwargs: Any) -> CorridorObservation:
        rng = random.Random(seed)
        agent, goal = rng.sample(range(CELLS), 2)
        self._state = CorridorState(episode_id=episode_id or str(uuid.uuid4()), agent=agent, goal=goal)
        return CorridorObservation(board=board(agent, goal, MAX_TURNS))

    def step(self, action: MoveAction, timeout_s: Optional[float] = None, **kwargs: Any) -> CorridorObservation:
        s = self._state
        s.step_count += 1
        s.agent = max(0, min(CELLS - 1, s.agent + (1 if action.move == "right" else -1)))
        won = s.agent == s.goal
        done = won or s.step_count >= MAX_TURNS
        return CorridorObservation(
            board=board(s.agent, s.goal, MAX_TURNS - s.step_count), done=done, reward=1.0 if won else 0.0
        )

    @property
    def state(self) -> CorridorState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="corridor",
            description="You walk along a corridor of 7 cells to the goal G, one step left or right per turn.",
            version="1.0.0",
        )


app = create_app(Corridor, MoveAction, CorridorObservation, env_name="corridor", max_concurrent_envs=512)

if __name__ == "__main__":
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
