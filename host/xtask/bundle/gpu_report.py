"""The GPU bundle's checks, section by section, into gpu-report.json and gpu-report.md.

usage (through run.sh, which sets the library path): gpu_report.py OUT_DIR [--cpu] [--quick]
       [--sections machine,parity,generation,rollout,training,lora,data_parallel,asynchronous,primitive_skill]

Each section has its own time budget; a section that fails or runs out of time is recorded
with its error and the next one runs. Both reports are rewritten after every section, so a
run cut short still leaves what it measured. Every figure carries the command that produced
it. Sizes: full (a GPU, minutes) or --quick (tiny shapes: the CPU dry run that
`cargo xtask test` runs so the bundle cannot rot between GPU runs).
"""

import argparse
import atexit
import json
import os
import pathlib
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

BUNDLE = pathlib.Path(__file__).resolve().parent
HOST = BUNDLE / "bin" / "vagen-host"
REFERENCE = BUNDLE / "reference"
SECTIONS = ["machine", "parity", "generation", "rollout", "training", "lora", "data_parallel", "asynchronous",
            "primitive_skill"]
# Seconds per section: full on a GPU (over 10 minutes in all: a device run takes two calls,
# `--sections machine,parity,generation,rollout,training,lora` then the rest); quick, the CPU dry run that
# `cargo xtask test` ends with (about 70 s on 2 idle cores), three times what it needs there:
# it checks that the bundle works, and a loaded test machine must not fail it.
BUDGETS = {
    "full": {"machine": 10, "parity": 85, "generation": 330, "rollout": 90, "training": 120, "lora": 120,
             "data_parallel": 40, "asynchronous": 150, "primitive_skill": 120},
    "quick": {"machine": 30, "parity": 180, "generation": 90, "rollout": 60, "training": 180, "lora": 120,
              "data_parallel": 60, "asynchronous": 150, "primitive_skill": 180},
}


class SectionError(Exception):
    pass


class Section:
    """One section's record: status, seconds, figures, the commands run and their output."""

    def __init__(self, name, budget):
        self.name, self.budget, self.started = name, budget, time.time()
        self.figures, self.commands, self.tables = {}, [], []

    def left(self):
        return self.budget - (time.time() - self.started)

    def run(self, args, env=None, watch_gpu=False):
        """Runs a command within what is left of the budget; its stdout. With `watch_gpu`,
        the peak of GPU memory in use while it ran (nvidia-smi, polled) is left in
        `self.peak_gpu_mib`."""
        left = self.left()
        if left <= 1:
            raise SectionError(f"out of time before: {shlex.join(map(str, args))}")
        started = time.time()
        poller = GpuPeak() if watch_gpu else None
        try:
            done = subprocess.run(
                [str(a) for a in args],
                capture_output=True,
                text=True,
                timeout=left,
                env={**os.environ, **(env or {})},
            )
        except subprocess.TimeoutExpired as e:
            raise SectionError(f"timed out after {left:.0f} s (the section's budget): {shlex.join(map(str, args))}") from e
        finally:
            self.peak_gpu_mib = poller.stop() if poller else None
        record = {
            "command": shlex.join(map(str, args)),
            "seconds": round(time.time() - started, 2),
            "rc": done.returncode,
            # The head names a failure (a C++ frame list can follow for pages), the tail
            # holds the figures.
            "output_head": (done.stdout + done.stderr)[:1500],
            "output_tail": (done.stdout + done.stderr)[-1500:],
        }
        self.commands.append(record)
        if done.returncode != 0:
            raise SectionError(f"exit {done.returncode}: {record['command']}\n{done.stderr[:1500]}")
        return done.stdout

    def figure(self, key, value, command=None):
        self.figures[key] = value if command is None else {"value": value, "command": command}


class GpuPeak:
    """Polls nvidia-smi for the memory in use while a command runs (the process's own
    allocator is not reachable from outside); None where there is no nvidia-smi."""

    def __init__(self):
        self.peak, self.ok, self.stopping = 0.0, True, threading.Event()
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()

    def poll(self):
        while not self.stopping.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=5,
                )
                self.peak = max(self.peak, float(out.stdout.split()[0]))
            except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
                self.ok = False
                return
            self.stopping.wait(0.25)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        return round(self.peak, 0) if self.ok and self.peak > 0 else None


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return json.dumps(v) if isinstance(v, str) else str(v)


def last_json(text):
    lines = [l for l in text.splitlines() if l.startswith("{")]
    if not lines:
        raise SectionError("the command printed no JSON line")
    return json.loads(lines[-1])


# ---------------------------------------------------------------- sections


def machine(s, ctx):
    import torch

    s.figure("torch", torch.__version__)
    s.figure("cuda", torch.version.cuda)
    s.figure("python", platform.python_version())
    try:
        import transformers

        s.figure("transformers", transformers.__version__)
    except ImportError:
        s.figure("transformers", None)
    if ctx.cpu:
        s.figure("device", f"cpu ({os.cpu_count()} cores, {platform.processor() or platform.machine()})")
        device = "cpu"
    else:
        if not torch.cuda.is_available():
            raise SectionError("torch sees no CUDA device (use --cpu for the dry run)")
        p = torch.cuda.get_device_properties(0)
        s.figure("device", p.name)
        s.figure("memory_gib", round(p.total_memory / 2**30, 1))
        s.figure("multiprocessors", p.multi_processor_count)
        smi = s.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        s.figure("driver", smi.strip())
        device = "cuda"
    mib = 64 if ctx.quick else 1024
    command = f"torch: copy a {mib} MiB tensor on {device} 10 times after 3 warm-ups (bytes read + written)"
    x = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        y.copy_(x)
    sync()
    started = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    sync()
    seconds = time.perf_counter() - started
    ctx.bandwidth = 2 * 10 * x.numel() / seconds
    s.figure("copy_bandwidth_gb_s", round(ctx.bandwidth / 1e9, 1), command)


def parity(s, ctx):
    sweeps = [("f32", "--vl 2 --text 1 --prompts 2" if ctx.quick else "--vl 24 --text 12 --prompts 3")]
    sweeps.append(("bf16", "--vl 1 --text 1 --prompts 2" if ctx.quick else "--vl 8 --text 4 --prompts 3"))
    for dtype, sizes in sweeps:
        report = ctx.scratch / f"parity-{dtype}.json"
        args = [sys.executable, REFERENCE / "parity_sweep.py", "--host", HOST, "--device", ctx.device, "--dtype", dtype]
        args += sizes.split() + ["--json", report]
        try:
            s.run(args)
        finally:
            # A failed sweep still wrote its report: its figures are what the section shows.
            if report.exists():
                parity_figures(s, dtype, json.loads(report.read_text()), shlex.join(map(str, args)))


def parity_figures(s, dtype, r, command):
    summary = {k: v for k, v in r["summary"].items() if k != "command"}
    summary["failed_cases"] = [{"case": c["case"], "failures": c["failures"]} for c in r["cases"] if not c["passed"]]
    s.figure(dtype, summary, command)
    rows = [
        (c["case"], p["prompt"], p["tokens"], f"{p['relative_error']:.2e}", f"{p['transformers_drift']:.2e}",
         "yes" if p["greedy_equal"] else ("tie" if p["greedy_tie_broken"] else "NO"),
         f"{p['forward_vs_generation']:.1e}", f"{p['transformers_forward_vs_generation']:.1e}")
        for c in r["cases"] for p in c["prompts"]
    ]
    worst = sorted(rows, key=lambda row: -float(row[3]))[:8]
    s.tables.append((f"{dtype}: the 8 prompts with the largest logits error",
                     ["case", "prompt", "tokens", "relative error", "transformers' bf16 drift", "greedy equal",
                      "generation vs forward", "transformers' generation vs forward"], worst))


def bench_model_args(ctx, shape):
    if ctx.quick:
        return ["--model", "default" if shape == "text" else "default-vl", "--device", ctx.device, "--batch", "1,2",
                "--prompt-len", "16", "--new-tokens", "8", "--image-size", "56"]
    config = "qwen2.5-0.5b" if shape == "text" else "qwen2.5-vl-3b"
    batch = "1,8,64" if shape == "text" else "1,8"
    return ["--config", config, "--dtype", "bf16", "--device", ctx.device, "--batch", batch]


def generation(s, ctx):
    rows = []
    # The continuous engine (rollouts' and serve's: CUDA graphs, flash attention, steps
    # launched ahead) beside transformers; the same with each step read first, with SDPA,
    # without graphs, and the static one (the baseline of 2026-11-26), on the text shape.
    runs = [("text", "continuous", "graphs", True), ("text", "continuous", "read-first", False),
            ("text", "continuous", "sdpa", False), ("text", "continuous", "eager", False),
            ("text", "static", "graphs", False), ("vl", "continuous", "graphs", True)]
    for shape, engine, decode, transformers in runs:
        args = [HOST, "bench", "model", *bench_model_args(ctx, shape), "--engine", engine, "--json"]
        args += {"graphs": [], "read-first": ["--no-step-ahead"], "sdpa": ["--no-flash-attention"],
                 "eager": ["--no-cuda-graphs"]}[decode]
        if transformers:
            args += ["--transformers", "--python", sys.executable]
        out = last_json(s.run(args))
        command = shlex.join(map(str, args))
        s.figure(f"{shape}_{engine}{'' if decode == 'graphs' else '_' + decode}_model", out["model"], command)
        for r in out["rows"]:
            # Per decode step every weight is read once and each row reads its cache.
            kv_read = r["batch"] * out["model"]["kv_bytes_per_token"] * (out["prompt_len"] + out["new_tokens"] / 2)
            step_bytes = out["model"]["weight_bytes"] + kv_read
            floor_ms = 1e3 * step_bytes / ctx.bandwidth if ctx.bandwidth else None
            step_ms = 1e3 * r["batch"] / r["decode_tok_s"]
            row = {
                "shape": out["model"]["name"],
                "engine": engine,
                "cuda_graphs": out.get("cuda_graphs") and engine == "continuous",
                "batch": r["batch"],
                "prefill_tok_s": round(r["prefill_tok_s"]),
                "decode_tok_s": round(r["decode_tok_s"]),
                "hf_prefill_tok_s": r.get("hf_prefill_tok_s") and round(r["hf_prefill_tok_s"]),
                "hf_decode_tok_s": r.get("hf_decode_tok_s") and round(r["hf_decode_tok_s"]),
                "vision_img_s": r.get("vision_img_s"),
                "hf_vision_img_s": r.get("hf_vision_img_s"),
                "decode_ms_per_step": round(step_ms, 3),
                "floor_ms_per_step": floor_ms and round(floor_ms, 3),
                "floor_fraction": floor_ms and round(floor_ms / step_ms, 3),
                # Counted on the continuous engine whichever was timed.
                "ops_per_step": r.get("ops_per_decode_step"),
                "computing_ops_per_step": r.get("computing_ops_per_decode_step"),
                "waits_per_step": r.get("waits_per_decode_step"),
                "host_reads_per_step": r.get("host_reads_per_decode_step"),
                "graph_captures": r.get("graph_captures"),
                "graph_capture_s": r.get("graph_capture_s") and round(r["graph_capture_s"], 3),
                "flash_attention": r.get("flash_attention"),
                "step_ahead": r.get("step_ahead"),
            }
            rows.append(row)
    s.figure("rows", rows)
    keys = list(rows[0].keys()) if rows else []
    s.tables.append(("ours and transformers' generate (floor: weights + KV read per step at the measured copy "
                     "bandwidth)", keys, [[r[k] for k in keys] for r in rows]))


def rollout(s, ctx):
    if ctx.quick:
        size = ["--model", "default", "--groups", "2", "--members", "2", "--turns", "2", "--new-tokens", "8"]
    else:
        size = ["--config", "qwen2.5-0.5b", "--dtype", "bf16"]
    args = [HOST, "bench", "rollout", *size, "--device", ctx.device, "--transformers", "--python", sys.executable,
            "--json"]
    out = last_json(s.run(args))
    s.figure("workload", out["workload"], shlex.join(map(str, args)))
    s.figure("engines", out["engines"])
    keys = ["engine", "seconds", "gen_tok_s", "prefill_tokens", "tokens_saved", "peak_kv_mib", "graph_captures", "graph_capture_s", "flash_steps",
            "steps_ahead", "discarded_tokens", "kv_allocations"]
    s.tables.append(("multi-turn rollouts", keys, [[e.get(k) for k in keys] for e in out["engines"]]))


def train_command(config, run_dir, sets):
    """`vagen-host train` on a bundled config, with `--set` overrides and the bundled plugin."""
    sets = {**sets, "env.plugin": str(BUNDLE / "plugins" / "frozenlake.wasm")}
    args = [HOST, "train", "--config", BUNDLE / "examples" / config, "--run-dir", run_dir]
    for k, v in sets.items():
        args += ["--set", f"{k}={toml_value(v)}"]
    return args


def logged(run_dir, name):
    """A run's metrics lines, its RL steps' lines, and the mean of a figure over them."""
    metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if l.strip()]
    rl = [m for m in metrics if "timing_s/step" in m]
    if not rl:
        raise SectionError(f"{name}: metrics.jsonl has no RL step")
    return metrics, rl, lambda k: round(sum(m.get(k, 0.0) for m in rl) / len(rl), 4)


def training(s, ctx):
    runs = [("text", "frozenlake-cpu.toml"), ("vision", "frozenlake-vision-cpu.toml")]
    sizes = (
        {"sft.steps": 2, "schedule.steps": 2, "env.val_episodes": 8, "env.groups": 2, "env.group_size": 2}
        if ctx.quick
        else {"sft.steps": 10, "schedule.steps": 5, "env.val_episodes": 32}
    )
    rows = []
    for name, config in runs:
        run_dir = ctx.scratch / f"train-{name}"
        steps = sizes["schedule.steps"]
        # Generation's log-probs compared with the training forward's (not reused).
        sets = {**sizes, "model.device": ctx.device, "rollout.reuse_logprobs": False,
                "schedule.eval_every": steps, "schedule.save_every": steps}
        args = train_command(config, run_dir, sets)
        s.run(args, watch_gpu=not ctx.cpu)
        peak = s.peak_gpu_mib
        metrics, rl, mean = logged(run_dir, name)
        evals = [m for m in metrics if any(k.startswith("val/") for k in m)]
        checkpoint = sorted((run_dir / "checkpoints").glob("step-*"), key=lambda p: int(p.name.split("-")[1]))[-1]
        reload = [HOST, "eval", "--model", checkpoint / "actor", "--config", run_dir / "config.toml",
                  "--episodes", "4", "--json"]
        reloaded = last_json(s.run(reload))
        row = {
            "run": name,
            "rl_steps": len(rl),
            "step_s": mean("timing_s/step"),
            "rollout_s": mean("timing_s/rollout"),
            "score_s": mean("timing_s/old_log_prob"),
            "update_s": mean("timing_s/update"),
            "vision_s": mean("timing_s/vision_forward"),
            "tokens_per_s": mean("throughput/tokens_per_s"),
            "logprob_diff_max": max(m.get("rollout/logprob_diff_max", 0.0) for m in rl),
            "peak_gpu_mib": peak,
            "held_out_success": evals[-1].get("val/success") if evals else None,
            "checkpoint_reloads": reloaded.get("success") is not None,
        }
        rows.append(row)
        s.figure(name, row, shlex.join(map(str, args)))
    rows += update_steps(s, ctx)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    s.tables.append(("bounded training runs (means over RL steps)", keys, [[r.get(k) for k in keys] for r in rows]))


def random_checkpoint(folder, shape, dtype):
    """A Qwen2 folder of `shape` with transformers' random weights and the embedded
    tokenizer (its ids fit any vocabulary of the shape), saved in `dtype`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    assets = BUNDLE / "assets"
    tokenizer_config = json.loads((assets / "tokenizer_config.json").read_text())
    vocab = json.loads((assets / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in vocab}
    config = Qwen2Config(**shape, bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.save_pretrained(folder)
    (folder / "tokenizer.json").write_text((assets / "tokenizer.json").read_text())
    tokenizer_config["chat_template"] = (assets / "chat_template.jinja").read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))


# Qwen2.5-0.5B-Instruct's shape (`bench model`'s `qwen2.5-0.5b`); quick: a tiny one.
SHAPE_0_5B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
SHAPE_TINY = dict(vocab_size=1032, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)


def update_steps(s, ctx):
    """A few RL steps of the 0.5B shape in bf16 (its tokens/s and the device's peak memory),
    with the LM head in bf16 and in f32 (`model.lm_head_f32`): generation's log-probs against
    the training forward's in each (old log-probs recomputed, as `reuse_logprobs = "auto"`
    does in bf16)."""
    folder = ctx.scratch / "random-0.5b"
    shape = SHAPE_TINY if ctx.quick else SHAPE_0_5B
    random_checkpoint(folder, shape, "bfloat16")
    rows = []
    for head_f32 in [False, True]:
        run_dir = ctx.scratch / f"train-0.5b-head-{'f32' if head_f32 else 'bf16'}"
        sets = {"model.path": str(folder), "model.dtype": "bf16", "model.device": ctx.device, "sft.steps": 0,
                "schedule.steps": 3, "schedule.eval_every": 0, "schedule.save_every": 0, "env.val_episodes": 4,
                "model.lm_head_f32": head_f32}
        args = train_command("frozenlake-cpu.toml", run_dir, sets)
        s.run(args, watch_gpu=not ctx.cpu)
        _, rl, mean = logged(run_dir, "the bf16 run")
        row = {"run": f"{shape['hidden_size']}x{shape['num_hidden_layers']} bf16" + (", f32 head" if head_f32 else ""),
               "rl_steps": len(rl), "step_s": mean("timing_s/step"), "rollout_s": mean("timing_s/rollout"),
               "score_s": mean("timing_s/old_log_prob"), "update_s": mean("timing_s/update"),
               "tokens_per_s": mean("throughput/tokens_per_s"),
               "logprob_diff_max": max(m.get("rollout/logprob_diff_max", 0.0) for m in rl),
               "off_policy_weight": mean("actor/off_policy_weight"), "peak_gpu_mib": s.peak_gpu_mib}
        s.figure(f"update_bf16{'_head_f32' if head_f32 else ''}", row, shlex.join(map(str, args)))
        rows.append(row)
    return rows


def lora(s, ctx):
    """Update steps full against LoRA ranks (`bench train`), then the LoRA demo config for a
    few steps with the adapters unmerged and merged for generation (`engine.merge_lora`)."""
    if ctx.quick:
        bench = ["--shapes", "default", "--variants", "full,16", "--steps", "1"]
    else:
        bench = ["--shapes", "qwen2.5-0.5b,qwen2.5-vl-3b", "--variants", "full,8,16,64", "--dtype", "bf16",
                 "--batch", "8", "--seq", "512"]
    args = [HOST, "bench", "train", *bench, "--device", ctx.device, "--json"]
    cells = last_json(s.run(args))["bench_train"]
    s.figure("bench_train", cells, shlex.join(map(str, args)))
    keys = ["shape", "variant", "trainable", "optimizer_bytes", "peak_rss_bytes", "step_seconds", "tokens_per_second"]
    s.tables.append(("update steps, full against LoRA (host RSS; the device's memory in the training section)",
                     keys + ["skipped"], [[c.get(k) for k in keys + ["skipped"]] for c in cells]))
    sizes = ({"sft.steps": 1, "schedule.steps": 2, "env.val_episodes": 4, "env.groups": 2, "env.group_size": 2}
             if ctx.quick else {"sft.steps": 5, "schedule.steps": 4, "env.val_episodes": 16})
    rows = []
    for merged in [False, True]:
        run_dir = ctx.scratch / f"train-lora-{'merged' if merged else 'unmerged'}"
        sets = {**sizes, "model.device": ctx.device, "engine.merge_lora": merged, "schedule.eval_every": 0,
                "schedule.save_every": 0}
        args = train_command("frozenlake-lora-cpu.toml", run_dir, sets)
        s.run(args, watch_gpu=not ctx.cpu)
        _, rl, mean = logged(run_dir, "the LoRA run")
        row = {"merge_lora": merged, "rl_steps": len(rl), "step_s": mean("timing_s/step"),
               "rollout_s": mean("timing_s/rollout"), "update_s": mean("timing_s/update"),
               "tokens_per_s": mean("throughput/tokens_per_s"), "peak_gpu_mib": s.peak_gpu_mib}
        rows.append(row)
        s.figure(f"demo_merge_{str(merged).lower()}", row, shlex.join(map(str, args)))
    keys = list(rows[0].keys())
    s.tables.append(("the LoRA demo config, adapters unmerged and merged for generation", keys,
                     [[r[k] for k in keys] for r in rows]))


def data_parallel(s, ctx):
    """The data-parallel collectives (`dist-check`: each checked against its definition, and
    the all-reduce's bandwidth): NCCL in a world of one GPU and gloo over CUDA tensors with two
    ranks sharing it; NCCL across every GPU where there are several. The dry run: gloo, two
    ranks on the CPU."""
    if ctx.cpu:
        runs = [["--backend", "gloo", "--device", "cpu", "--nproc", "2"]]
    else:
        import torch

        runs = [["--backend", "nccl", "--device", "cuda:0"],
                ["--backend", "gloo", "--device", "cuda:0", "--nproc", "2"]]
        if torch.cuda.device_count() > 1:
            runs.append(["--backend", "nccl", "--device", "cuda", "--nproc", str(torch.cuda.device_count())])
    rows = []
    for extra in runs:
        args = [HOST, "dist-check", *extra, "--mib", "16" if ctx.quick else "256"]
        lines = [json.loads(l) for l in s.run(args).splitlines() if l.startswith("{")]
        if not lines or any(l.get("collectives") != "ok" for l in lines):
            raise SectionError(f"dist-check printed {lines}")
        row = {"backend": extra[1], "device": extra[3], "ranks": lines[0]["world"],
               "all_reduce_mib": lines[0]["all_reduce_mib"],
               "all_reduce_s": max(l["all_reduce_s"] for l in lines),
               "bus_gib_per_s": min(l["bus_gib_per_s"] for l in lines)}
        rows.append(row)
        s.figure(f"dist_check_{extra[1]}_{row['ranks']}", row, shlex.join(map(str, args)))
    keys = list(rows[0].keys())
    s.tables.append(("collectives checked, and the all-reduce timed", keys, [[r[k] for k in keys] for r in rows]))


def asynchronous(s, ctx):
    """RL steps per minute synchronously and with the generator thread one update behind
    (`bench async`, same device): the text demo's config (also with the newest weights
    loaded before every decode step), then the 0.5B shape in bf16."""
    runs = [("text demo", {}, "0,1"), ("text demo decode-step", {"async.refresh": '"decode-step"'}, "1")]
    folder = ctx.scratch / "random-0.5b"
    shape = SHAPE_TINY if ctx.quick else SHAPE_0_5B
    if not (folder / "config.json").is_file():
        random_checkpoint(folder, shape, "bfloat16")
    runs.append((f"{shape['hidden_size']}x{shape['num_hidden_layers']} bf16",
                 {"model.path": str(folder), "model.dtype": "bf16"}, "0,1"))
    rows = []
    for name, extra, staleness in runs:
        sets = {**extra, "model.device": ctx.device, "env.plugin": str(BUNDLE / "plugins" / "frozenlake.wasm")}
        if ctx.quick:
            sets.update({"env.groups": 2, "env.group_size": 2})
        args = [HOST, "bench", "async", "--config", BUNDLE / "examples" / "frozenlake-cpu.toml",
                "--staleness", staleness, "--steps", "3" if ctx.quick else "5", "--json"]
        for k, v in sets.items():
            args += ["--set", f"{k}={v}"]
        new = [{"run": name, **row} for row in last_json(s.run(args, watch_gpu=not ctx.cpu))["bench_async"]]
        if staleness == "1":
            # Against the synchronous run of the same config, measured just before.
            base = next(r for r in rows if r["run"] == "text demo" and r["max_staleness"] == 0)
            for r in new:
                r["speed_up"] = base["step_s"] / r["step_s"]
        rows += new
        s.figure(f"bench_async_{name.replace(' ', '_')}", new, shlex.join(map(str, args)))
    keys = list(rows[0].keys())
    s.tables.append(("RL steps, synchronous (k = 0) and one update ahead (k = 1)", keys,
                     [[r[k] for k in keys] for r in rows]))


def primitive_skill(s, ctx):
    """PrimitiveSkill's ManiSkill worker rendering on this machine's Vulkan driver (a GPU's;
    in the CPU dry run, the CPU renderer `cargo xtask maniskill` installs): worker start,
    reset and one primitive per step, text and image, and the pipe's round trip
    (`bench-primitive-skill`), then oracle episodes with images through vagen-host. Needs a
    Python with mani-skill 3.0.1 (VAGEN_MANISKILL_PYTHON): a device machine cannot download
    one, so there the section fails naming what is missing."""
    python = os.environ.get("VAGEN_MANISKILL_PYTHON")
    if not python or not pathlib.Path(python).is_file():
        raise SectionError("no ManiSkill worker Python: set VAGEN_MANISKILL_PYTHON to one with mani-skill 3.0.1 "
                           "and sapien 3.0.3 (`cargo xtask maniskill` makes .venv-maniskill)")
    episodes = 1 if ctx.quick else 5
    out = s.run([BUNDLE / "bin" / "bench-primitive-skill", "StackThreeCube", episodes])
    rows = [l.strip() for l in out.splitlines() if l.strip().startswith(("text:", "image:"))]
    if len(rows) != 2:
        raise SectionError(f"bench-primitive-skill printed no timings:\n{out[-800:]}")
    s.figure("bench_text", rows[0])
    s.figure("bench_image", rows[1])
    run_dir = ctx.scratch / "primitive-skill-run"
    config = json.dumps({"task": "StackThreeCube", "observation": "image"})
    args = [HOST, "run", "--plugin", BUNDLE / "plugins" / "primitive-skill.so", "--policy", "oracle",
            "--episodes", episodes, "--env-config", config, "--out", run_dir / "run.jsonl"]
    summary = s.run(args)
    rate = next((l.split()[-1] for l in summary.splitlines() if "success rate" in l), None)
    frames = len(list((run_dir / "run.images").glob("*.png")))
    s.figure("oracle_success_with_images", rate, shlex.join(map(str, args)))
    s.figure("frames_written", frames)
    if not frames:
        raise SectionError("the oracle run wrote no frames")


# ---------------------------------------------------------------- report


def write_reports(out, ctx, records):
    doc = {"bundle": str(BUNDLE), "mode": "quick" if ctx.quick else "full", "device": ctx.device,
           "started": ctx.started_at, "sections": records}
    (out / "gpu-report.json").write_text(json.dumps(doc, indent=1, default=str))
    md = [f"# GPU bundle report ({doc['mode']}, {ctx.device}, {ctx.started_at})", ""]
    for r in records:
        md += [f"## {r['name']}: {r['status']} ({r['seconds']} s)", ""]
        if r.get("error"):
            md += ["```", r["error"][-1200:], "```", ""]
        plain = {k: v for k, v in r["figures"].items() if not isinstance(v, dict) or "value" in v}
        if plain:
            md += ["| figure | value | command |", "|---|---|---|"]
            for k, v in plain.items():
                value, command = (v["value"], v.get("command", "")) if isinstance(v, dict) else (v, "")
                if isinstance(value, (dict, list)):
                    value = json.dumps(value, default=str)
                md.append(f"| {k} | {value} | `{command}` |" if command else f"| {k} | {value} | |")
            md.append("")
        for title, keys, rows in r.get("tables", []):
            md += [f"{title}:", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
            md += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
            md.append("")
        if r["commands"]:
            md += ["Commands:", ""] + [f"- `{c['command']}` ({c['seconds']} s, exit {c['rc']})" for c in r["commands"]]
            md.append("")
    (out / "gpu-report.md").write_text("\n".join(md))


class Context:
    pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (the dry run)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    args = ap.parse_args()
    wanted = args.sections.split(",")
    unknown = [w for w in wanted if w not in SECTIONS]
    if unknown:
        sys.exit(f"--sections: unknown {unknown}; known: {','.join(SECTIONS)}")
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = Context()
    ctx.cpu, ctx.quick, ctx.device = args.cpu, args.quick, "cpu" if args.cpu else "cuda"
    ctx.bandwidth = None
    ctx.started_at = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    ctx.scratch = pathlib.Path(tempfile.mkdtemp(prefix="gpu-bundle-"))
    # Models and runs the sections write (about 200 MB on a dry run): gone when the report is.
    atexit.register(shutil.rmtree, ctx.scratch, ignore_errors=True)
    budgets = BUDGETS["quick" if args.quick else "full"]
    records = []
    for name in SECTIONS:
        if name not in wanted:
            continue
        s = Section(name, budgets[name])
        record = {"name": name, "status": "passed", "error": None}
        try:
            globals()[name](s, ctx)
        except Exception as e:  # a failed section is recorded; the next one runs
            record["status"] = "failed"
            record["error"] = f"{type(e).__name__}: {e}"
        record.update(seconds=round(time.time() - s.started, 1), figures=s.figures, commands=s.commands, tables=s.tables)
        records.append(record)
        print(f"{name}: {record['status']} ({record['seconds']} s)" + (f": {record['error']}" if record["error"] else ""),
              flush=True)
        write_reports(out, ctx, records)
    failed = [r["name"] for r in records if r["status"] != "passed"]
    print(f"report: {out / 'gpu-report.md'}; {len(records) - len(failed)}/{len(records)} sections passed", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
