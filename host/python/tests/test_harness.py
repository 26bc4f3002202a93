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

from test_serve import HOST, served

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
    if language == "python":
        reproduced(run, step["val/success"], env)


def reproduced(run, val_success, env):
    """`eval --config` of the run on its last checkpoint gives the run's own held-out figure:
    with the model here, and through `serve` (the harness's calls forwarded with the run's
    evaluation sampling)."""
    actor = run / "checkpoints" / "step-000001" / "actor"
    config = str(run / "config.toml")
    local = subprocess.run([str(HOST), "eval", "--config", config, "--policy", "model", "--model", str(actor), "--device", "cpu", "--json"], env=env, capture_output=True, text=True)
    assert local.returncode == 0, local.stderr[-3000:]
    with served("--model", str(actor), "--served-name", "trained") as url:
        remote = subprocess.run([str(HOST), "eval", "--config", config, "--policy", "openai", "--base-url", url, "--model", "trained", "--json"], env=env, capture_output=True, text=True)
    assert remote.returncode == 0, remote.stderr[-3000:]
    for done in (local, remote):
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        assert (summary["episodes"], summary["failed"]) == (2, 0), summary
        assert summary["success"] == val_success and summary["mean_calls"] >= 1, (summary, val_success)
