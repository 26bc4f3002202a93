"""`vagen.Prompter`: a Python loop over the env prompts and reads answers exactly as
`vagen-host eval --config` does, turn by turn, and with a served model scores what eval
scores. VAGEN_HOST names the vagen-host binary."""

import json
import subprocess

import pytest

import vagen
from test_serve import HOST, ROOT, serving
from test_vagen import plugin

# The CPU demo's prompt settings (one sequence per turn, state descriptions), and one with
# everything a prompt can carry: history, feedback, reminder, a thinking format.
DEMO = (ROOT / "examples" / "frozenlake-cpu.toml").read_text()
FULL = """
[env]
plugin = "PLUGIN"
max_turns = 5
val_episodes = 6
val_seed_start = 1000000
[env.config]
size = 4
[model]
path = "default"
[rollout]
format = "free-think"
history = 2
max_new_tokens = 24
val_temperature = 0.0
"""


def config(tmp_path, text, name):
    text = text.replace('"../target/plugins/frozenlake.wasm"', '"PLUGIN"').replace("PLUGIN", str(plugin("frozenlake")))
    if "val_episodes = 256" in text:
        text = text.replace("val_episodes = 256", "val_episodes = 8")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def evaluate(path, out, model="default"):
    """`eval --config`'s figures and episodes."""
    cmd = [str(HOST), "eval", "--config", str(path), "--model", str(model), "--device", "cpu", "--out", str(out), "--json"]
    summary = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return summary, [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_prompts_equal_evals_turn_by_turn_when_fed_its_answers(tmp_path):
    for name, text in (("demo", DEMO), ("full", FULL)):
        path = config(tmp_path, text, name)
        _, episodes = evaluate(path, tmp_path / name)
        for ep in episodes:
            p = vagen.Prompter.from_config(path)
            obs, info = p.env.reset(seed=ep["seed"])
            messages = p.reset(obs, info)
            assert messages[0] == {"role": "system", "content": ep["system"]}, name
            for k, turn in enumerate(ep["steps"]):
                assert messages[-1] == {"role": "user", "content": turn["prompt"]}, (name, ep["seed"], k)
                kept = ep["steps"][max(0, k - 2) : k] if name == "full" else []
                earlier = [m for t in kept for m in ({"role": "user", "content": t["prompt"]}, {"role": "assistant", "content": t["answer"]})]
                assert messages[1:-1] == earlier, (name, k)
                action = p.act(turn["answer"])
                assert action == turn["sent"] and p.parsed()["format_ok"] == turn["format_valid"]
                obs, reward, terminated, truncated, info = p.env.step(action)
                assert reward == turn["env_reward"] and p.format_reward(info) == turn["format_reward"]
                if terminated or truncated:
                    break
                messages = p.observe(obs, info)
            assert bool(info["success"]) == ep["success"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run of the CPU demo cut short (20 SFT steps, one RL step: ~10 s): its folder's
    config.toml and its checkpoint, which answers something (a quarter of the held-out
    episodes won) where the untrained model writes noise."""
    tmp = tmp_path_factory.mktemp("run")
    run = tmp / "run"
    sets = ["sft.steps=20", "schedule.steps=1", "schedule.eval_every=0", "schedule.save_every=1", "env.groups=1"]
    cmd = [str(HOST), "train", "--config", str(config(tmp, DEMO, "demo")), "--run-dir", str(run)]
    subprocess.run(cmd + [a for s in sets for a in ("--set", s)], capture_output=True, check=True)
    return run / "config.toml", run / "checkpoints" / "step-000001" / "actor"


def test_a_loop_with_the_served_checkpoint_answers_and_scores_as_eval(tmp_path, trained):
    path, checkpoint = trained
    summary, episodes = evaluate(path, tmp_path / "e", checkpoint)
    with serving("--model", str(checkpoint), "--served-name", "m") as client:
        successes = play(vagen.Prompter.from_config(path), client, episodes)
    assert summary["success"]["value"] > 0, "the checkpoint wins some episodes: a score to reproduce"
    assert abs(sum(successes) / len(successes) - summary["success"]["value"]) <= 0.01


def test_eval_compare_shows_two_checkpoints_of_the_run(tmp_path, trained):
    path, rl = trained
    sft = sorted((rl.parents[1]).glob("sft-*"))[-1] / "actor"
    for name, model in (("sft", sft), ("rl", rl)):
        evaluate(path, tmp_path / name, model)
    shown = subprocess.run([str(HOST), "eval-compare", str(tmp_path / "sft"), str(tmp_path / "rl")], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    rows = shown.stdout.splitlines()
    assert "sft-" in rows[1] and "step-000001" in rows[2], shown.stdout


def play(p, client, episodes):
    """Each of eval's episodes played again by a loop of the env, `p` and `client`, every
    answer equal to eval's; the episodes' successes."""
    assert p.val_seeds()[: len(episodes)] == [ep["seed"] for ep in episodes]
    successes = []
    for ep in episodes:
        obs, info = p.env.reset(seed=ep["seed"])
        messages = p.reset(obs, info)
        for turn in ep["steps"]:
            r = client.chat.completions.create(model="m", messages=messages, **p.sampling())
            answer = r.choices[0].message.content
            assert answer == turn["answer"], ep["seed"]
            obs, _, terminated, truncated, info = p.env.step(p.act(answer))
            if terminated or truncated:
                break
            messages = p.observe(obs, info)
        successes.append(bool(info["success"]))
    return successes
