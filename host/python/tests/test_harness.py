"""The harness examples (examples/harness/python and js): agents on the official `openai`
clients, unchanged, trained by `vagen-host train` through their episodes' recording
endpoint. A short run each: SFT from its chats file, one RL step, one evaluation.
VAGEN_HOST names the vagen-host binary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_serve import HOST

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "harness"


def installed(example):
    """The JavaScript example's `openai` package, installed from its lock once per checkout."""
    if example.name == "js" and not (example / "node_modules" / "openai").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=example, check=True)
    return example


@pytest.mark.parametrize("language", ["python", "js"])
def test_an_agent_trains_unchanged(tmp_path, language):
    example = installed(EXAMPLES / language)
    run = tmp_path / "run"
    settings = ["sft.steps=20", "schedule.steps=1", "env.groups=1", "env.group_size=2", "env.val_episodes=2", "model.device=\"cpu\""]
    # `python` in the config is this interpreter, which has the `openai` package.
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = [str(HOST), "train", "--config", str(example / "train.toml"), "--run-dir", str(run)]
    for s in settings:
        command += ["--set", s]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if m.get("step") == 1 and "train/reward" in m)
    assert step["train/failed_trajectories"] == 0, step
    # Every episode made at least one call, recorded as one sequence (its calls extend it),
    # and reported its metric (stdout for Python, POST for JavaScript).
    assert step["harness/calls"] >= 1 and step["harness/prefix_breaks"] == 0, step
    assert "harness/tried" in step and 0 <= step["train/reward"] <= 1 and "val/success" in step
