"""Randomized parity sweep: Qwen2.5-VL and Qwen2 models of random shapes, built and run by
transformers, against `vagen-host parity-dump` on the same folders.

usage: parity_sweep.py --host PATH/vagen-host [--vl 24] [--text 12] [--prompts 3] [--seed 0]
                       [--device cpu|cuda] [--dtype f32|bf16] [--only NAME[,NAME]] [--out DIR]
                       [--json REPORT.json]

Each case is a seeded draw (case `vl-7` of seed 0 is the same model, images and prompts on
every machine): heads and kv heads, head sizes, M-RoPE sections, rope theta, window sizes,
full-attention blocks, tied or untied head, norm epsilon present or left to the default,
every parameter (norms and biases too) drawn N(0, sigma); images of random sizes (partial
windows along either axis), several images per prompt, multi-turn conversations, text-only
prompts. `vl-issue` is the shape issue 39 reported (84 x 56 image, window 56).

Checked per prompt: our input ids equal the processor's; logits' relative error
(max |ours - theirs| / max |theirs|) within the tolerance (f32: 1e-5; bf16: within
transformers' own bf16 drift from its f32 logits); greedy ids equal (in bf16 a divergence
after a step whose top-2 margin is within the drift is reported, not failed); our
generation log-probs equal our training forward's (1e-4).

A failing case prints its config and image sizes and the command that replays it alone.
Exit status 0 when every case passes, 1 otherwise.
"""

import argparse
import json
import pathlib
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)

HERE = pathlib.Path(__file__).resolve().parent
ASSETS = HERE.parent / "assets"
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
NEW_TOKENS = 8
# Our generation log-probs against our own training forward over the same tokens.
FORWARD_TOLERANCE = 1e-4
F32_TOLERANCE = 1e-5


def tokenizer(vl):
    config = json.loads((ASSETS / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class", None)
    template = "vl_chat_template.jinja" if vl else "chat_template.jinja"
    config["chat_template"] = (ASSETS / template).read_text()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ASSETS / "tokenizer.json"), **config)
    if vl:
        tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    return tok


def partition(rng, total, parts):
    """`parts` positive integers summing to `total`, uniformly among compositions."""
    cuts = sorted(rng.sample(range(1, total), parts - 1))
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def special_ids(tok):
    end, pad = tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")
    return dict(bos_token_id=pad, eos_token_id=end, pad_token_id=pad)


def text_shape(rng, tok, vl):
    head_dim = rng.choice([8, 12, 16, 24, 32] if vl else [4, 8, 12, 16, 32])
    heads = rng.choice([2, 3, 4, 6])
    kv = rng.choice([d for d in range(1, heads + 1) if heads % d == 0])
    shape = dict(
        **special_ids(tok),
        vocab_size=len(tok),
        hidden_size=heads * head_dim,
        intermediate_size=rng.choice([32, 48, 96, 160]),
        num_hidden_layers=rng.choice([1, 2, 3]),
        num_attention_heads=heads,
        num_key_value_heads=kv,
        max_position_embeddings=1024,
    )
    if rng.random() < 0.7:
        shape["rms_norm_eps"] = rng.choice([1e-6, 1e-5])
    return shape


def vision_shape(rng, out_hidden):
    heads = rng.choice([1, 2, 3, 4])
    depth = rng.choice([1, 2, 3])
    return dict(
        depth=depth,
        hidden_size=heads * rng.choice([8, 12, 16]),
        intermediate_size=rng.choice([24, 48, 64]),
        num_heads=heads,
        out_hidden_size=out_hidden,
        window_size=rng.choice([28, 56, 84, 112]),
        fullatt_block_indexes=sorted(rng.sample(range(depth), rng.randint(0, depth))),
    )


def vl_config(tok, text, vision):
    """A Qwen2.5-VL config of these halves, the head tied as the text half says, with the
    tokenizer's vision token ids."""
    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    return dict(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=text["tie_word_embeddings"],
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )


def vl_case(rng, tok):
    text = text_shape(rng, tok, vl=True)
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    theta = rng.choice([1e4, 1e5, 5e5, 1e6])
    text["rope_parameters"] = {"type": "mrope", "mrope_section": partition(rng, head_dim // 2, 3), "rope_theta": theta}
    text["tie_word_embeddings"] = rng.random() < 0.4
    return vl_config(tok, text, vision_shape(rng, text["hidden_size"]))


def issue_case(tok):
    """Issue 39's shape: text 96 wide, 6 heads over 3 kv heads, theta 1e6, sections
    [4, 2, 2], untied; vision depth 2, 48 wide, 4 heads, window 56, full attention in 1."""
    text = dict(
        **special_ids(tok),
        vocab_size=len(tok),
        hidden_size=96,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=3,
        max_position_embeddings=1024,
        rope_parameters={"type": "mrope", "mrope_section": [4, 2, 2], "rope_theta": 1e6},
        tie_word_embeddings=False,
    )
    vision = dict(
        depth=2,
        hidden_size=48,
        intermediate_size=64,
        num_heads=4,
        out_hidden_size=96,
        window_size=56,
        fullatt_block_indexes=[1],
    )
    return vl_config(tok, text, vision)


def text_case(rng, tok):
    shape = text_shape(rng, tok, vl=False)
    shape["rope_theta"] = rng.choice([1e4, 1e5, 1e6])
    shape["tie_word_embeddings"] = rng.random() < 0.4
    return shape


def draw_image(rng, height, width):
    nrng = np.random.default_rng(rng.randrange(2**32))
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width - 1, 1), y * 255 // max(height - 1, 1), (x * 3 + y * 5) % 256], -1)
    rgb = ((base + nrng.integers(0, 96, size=(height, width, 3))) % 256).astype(np.uint8)
    return Image.fromarray(rgb, "RGB")


def image_size(rng):
    """(height, width): multiples of 28 (no resize; often a partial window on one axis)
    or any size (resized to them)."""
    if rng.random() < 0.6:
        return rng.randint(1, 7) * 28, rng.randint(1, 7) * 28
    return rng.randint(20, 200), rng.randint(20, 200)


WORDS = "the goal box player left right up down hole ice target move push you see where is".split()


def sentence(rng, n):
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "?"


def vl_prompts(rng, count):
    """`count` prompts, the kinds in turn from a random start: one image before the text,
    a system prompt and two images between words, a multi-turn conversation with an image
    in each user turn, text only. Images as `<image>` markers with their sizes."""
    kinds = ["one", "two", "turns", "text"]
    start = rng.randrange(len(kinds))
    prompts = []
    for i in range(count):
        kind = kinds[(start + i) % len(kinds)]
        if kind == "one":
            messages = [{"role": "user", "content": "<image>" + sentence(rng, 4)}]
        elif kind == "two":
            messages = [
                {"role": "system", "content": "You are an agent."},
                {"role": "user", "content": f"Before: <image> after: <image> {sentence(rng, 3)}"},
            ]
        elif kind == "turns":
            messages = [
                {"role": "user", "content": "<image>" + sentence(rng, 3)},
                {"role": "assistant", "content": "<think>The box is left.</think><answer>Left</answer>"},
                {"role": "user", "content": sentence(rng, 2) + " <image>"},
            ]
        else:
            messages = [{"role": "user", "content": sentence(rng, 6)}]
        markers = sum(m["content"].count("<image>") for m in messages)
        prompts.append({"messages": messages, "image_sizes": [image_size(rng) for _ in range(markers)]})
    return prompts


def text_prompts(rng, count):
    prompts = []
    for i in range(count):
        messages = [{"role": "user", "content": sentence(rng, rng.randint(2, 9))}]
        if i % 2:
            messages = [{"role": "system", "content": "You are an agent."}] + messages
            messages += [{"role": "assistant", "content": "<answer>Up</answer>"}, {"role": "user", "content": "Next?"}]
        prompts.append({"messages": messages, "image_sizes": []})
    return prompts


def as_hf(messages):
    """`<image>` markers as transformers' list content."""
    out = []
    for m in messages:
        if "<image>" not in m["content"]:
            out.append(m)
            continue
        parts = []
        for i, piece in enumerate(m["content"].split("<image>")):
            if i > 0:
                parts.append({"type": "image"})
            if piece:
                parts.append({"type": "text", "text": piece})
        out.append({"role": m["role"], "content": parts})
    return out


def randomize(model, rng, sigma=None):
    """Every parameter N(0, sigma), sigma drawn per case: large enough that rounding and
    any mismatch grow through the layers instead of vanishing, and that the head's
    distribution is peaked (a flat one hides differences in the log-probs)."""
    sigma = sigma or rng.choice([0.3, 0.4, 0.5, 0.6])
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * sigma)
    return sigma


def build_case(name, seed, folder, prompts_per_case):
    """Writes the case folder (model, tokenizer, processor, images, case.json) and returns
    (model, processor or tokenizer, prompts with their images, description)."""
    rng = random.Random(f"{seed}:{name}")
    vl = name.startswith("vl")
    tok = tokenizer(vl)
    if vl:
        config = issue_case(tok) if name == "vl-issue" else vl_case(rng, tok)
        model = Qwen2_5_VLForConditionalGeneration(Qwen2_5_VLConfig(**config)).eval()
    else:
        config = text_case(rng, tok)
        model = Qwen2ForCausalLM(Qwen2Config(**config)).eval()
    sigma = randomize(model, rng, 0.4 if name == "vl-issue" else None)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    if vl:
        if name == "vl-issue":
            prompts = [
                {"messages": [{"role": "user", "content": "<image>Where is the goal?"}], "image_sizes": [(56, 84)]},
                {"messages": [{"role": "user", "content": "Where is the goal?"}], "image_sizes": []},
                {
                    "messages": [{"role": "user", "content": "<image> then <image> what changed?"}],
                    "image_sizes": [(84, 56), (56, 84)],
                },
            ][:prompts_per_case]
        else:
            prompts = vl_prompts(rng, prompts_per_case)
        max_pixels = 28 * 28 * rng.choice([16, 36, 64])
        processor = Qwen2_5_VLProcessor(
            image_processor=Qwen2VLImageProcessor(min_pixels=28 * 28, max_pixels=max_pixels),
            tokenizer=tok,
            video_processor=Qwen2VLVideoProcessor(),
            chat_template=tok.chat_template,
        )
        processor.save_pretrained(folder)
    else:
        prompts = text_prompts(rng, prompts_per_case)
        processor = tok
        tok.save_pretrained(folder)
    for p_index, p in enumerate(prompts):
        p["images"] = []
        for i, (h, w) in enumerate(p["image_sizes"]):
            file = f"p{p_index}-{i}.png"
            draw_image(rng, h, w).save(folder / file)
            p["images"].append(file)
    case = {"name": name, "kind": "vl" if vl else "text", "new_tokens": NEW_TOKENS, "prompts": prompts}
    (folder / "case.json").write_text(json.dumps(case, indent=1))
    describe = {"config": config, "sigma": sigma, "image_sizes": [p["image_sizes"] for p in prompts]}
    if vl:
        describe["max_pixels"] = max_pixels
    return model, processor, prompts, describe


def encode(processor, prompt, folder, vl, device):
    if vl:
        text = processor.apply_chat_template(as_hf(prompt["messages"]), add_generation_prompt=True, tokenize=False)
        images = [Image.open(folder / f).convert("RGB") for f in prompt["images"]] or None
        enc = processor(text=[text], images=images, return_tensors="pt")
    else:
        ids = processor.apply_chat_template(prompt["messages"], add_generation_prompt=True, tokenize=True)
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        enc = {"input_ids": torch.tensor([list(ids)]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long)}
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in enc.items()}


def reference(model, processor, prompts, folder, vl, device, eos, placeholders):
    """transformers' input ids, f32 logits and greedy continuation per prompt, with the
    top-1 / top-2 margin at each greedy step. A VL model's image placeholders are
    suppressed in generation, as ours never writes them."""
    gen = GenerationConfig(
        do_sample=False,
        max_new_tokens=NEW_TOKENS,
        eos_token_id=eos,
        pad_token_id=eos,
        suppress_tokens=placeholders or None,
        output_scores=True,
        return_dict_in_generate=True,
    )
    out = []
    with torch.no_grad():
        for p in prompts:
            enc = encode(processor, p, folder, vl, device)
            logits = model(**enc).logits[0].float().cpu()
            g = model.generate(**enc, generation_config=gen)
            width = enc["input_ids"].shape[1]
            margins = [float(s[0].float().topk(2).values.diff().abs()) for s in g.scores]
            greedy = g.sequences[0, width:].tolist()
            logprobs = [float(torch.log_softmax(s[0].float(), -1)[t]) for s, t in zip(g.scores, greedy)]
            forward = forward_logprobs(model, enc, greedy, placeholders)
            out.append(
                {
                    "input_ids": enc["input_ids"][0].tolist(),
                    "logits": logits,
                    "greedy": greedy,
                    "logprobs": logprobs,
                    "margins": margins,
                    "placeholders": placeholders,
                    "forward_gap": max((abs(a - b) for a, b in zip(forward, logprobs)), default=0.0),
                }
            )
    return out


def forward_logprobs(model, enc, greedy, placeholders):
    """transformers' log-probs of its greedy tokens from one forward over prompt + answer
    (placeholders suppressed as in its generation): its own generation-vs-forward drift."""
    if not greedy:
        return []
    width = enc["input_ids"].shape[1]
    extra = torch.tensor([greedy], device=enc["input_ids"].device)
    whole = dict(enc)
    for key, value in enc.items():
        if torch.is_tensor(value) and value.dim() == 2 and value.shape == (1, width):
            fill = extra if key == "input_ids" else torch.full_like(extra, 1 if key == "attention_mask" else 0)
            whole[key] = torch.cat([value, fill.to(value.dtype)], 1)
    logits = model(**whole).logits[0, width - 1 : width - 1 + len(greedy)].float()
    if placeholders:
        logits[:, placeholders] = float("-inf")
    logp = torch.log_softmax(logits, -1)
    return [float(logp[j, t]) for j, t in enumerate(greedy)]


def relative_error(a, b):
    return float((a - b).abs().max() / b.abs().max())


def compare(name, ref, ref_low, ours, dtype):
    """Failures (strings) and figures for one case."""
    failures, figures = [], []
    if ours.get("error"):
        return [f"vagen-host failed on this case: {ours['error']}"], []
    for i, (r, o) in enumerate(zip(ref, ours["prompts"])):
        if o.get("error"):
            failures.append(f"prompt {i}: vagen-host failed: {o['error']}")
            continue
        if o["input_ids"] != r["input_ids"]:
            failures.append(f"prompt {i}: input ids differ: ours {o['input_ids']} theirs {r['input_ids']}")
            continue
        err = relative_error(o["logits"], r["logits"])
        if dtype == "f32":
            tolerance = F32_TOLERANCE
            drift = 0.0
        else:
            # transformers' own bf16 logits against its f32 ones on this prompt.
            drift = relative_error(ref_low[i]["logits"], r["logits"])
            tolerance = 1.5 * drift + 1e-3
        if not err <= tolerance:
            failures.append(f"prompt {i}: logits' relative error {err:.3e} > {tolerance:.3e}")
        first_diff = next((j for j, (a, b) in enumerate(zip(o["greedy"], r["greedy"])) if a != b), None)
        if first_diff is None and len(o["greedy"]) != len(r["greedy"]):
            first_diff = min(len(o["greedy"]), len(r["greedy"]))
        tie = None
        if first_diff is not None and first_diff < len(r["margins"]):
            tie = r["margins"][first_diff]
        excused = False
        if first_diff is not None:
            # A step whose top-2 margin is within the logits' difference (ours against
            # theirs; in bf16 also transformers' own drift) is a tie either may break.
            slack = 2 * max(float((o["logits"] - r["logits"]).abs().max()), drift * float(r["logits"].abs().max()))
            excused = tie is not None and tie <= slack
            line = (
                f"prompt {i}: greedy ids differ at step {first_diff} (ours {o['greedy']}, theirs {r['greedy']}; "
                f"their top-2 margin there {tie})"
            )
            if not excused:
                failures.append(line)
        # Our generation log-probs against transformers' (placeholders suppressed) over the
        # steps both took alike; and the first against transformers' unsuppressed
        # distribution renormalised over the tokens that are not placeholders: the whole of
        # the difference a plain `generate` shows (issue 39).
        same = first_diff if first_diff is not None else len(o["greedy"])
        lp_err = max((abs(a - b) for a, b in zip(o["gen_logprobs"][:same], r["logprobs"][:same])), default=0.0)
        if dtype == "f32" and not lp_err <= FORWARD_TOLERANCE:
            failures.append(f"prompt {i}: generation log-probs differ from transformers' by {lp_err:.3e}")
        raw = torch.log_softmax(r["logits"][-1].double(), -1)
        mass = float(raw[r["placeholders"]].exp().sum()) if r["placeholders"] else 0.0
        unsuppressed = float(raw[o["greedy"][0]]) if o["greedy"] else 0.0
        renormalised = unsuppressed - float(torch.log1p(torch.tensor(-mass, dtype=torch.float64)))
        if dtype == "f32" and o["greedy"] and not abs(o["gen_logprobs"][0] - renormalised) <= FORWARD_TOLERANCE:
            failures.append(
                f"prompt {i}: first log-prob {o['gen_logprobs'][0]:.6f} is not transformers' unsuppressed "
                f"{unsuppressed:.6f} renormalised over non-placeholders ({renormalised:.6f})"
            )
        forward = max((abs(a - b) / max(abs(b), 1.0) for a, b in zip(o["forward_logprobs"], o["gen_logprobs"])), default=0.0)
        # bf16: within twice transformers' own generation-vs-forward drift on this prompt.
        forward_tolerance = FORWARD_TOLERANCE if dtype == "f32" else 2 * ref_low[i]["forward_gap"] + 5e-3
        if not forward <= forward_tolerance:
            failures.append(
                f"prompt {i}: generation log-probs differ from the training forward by {forward:.3e} "
                f"> {forward_tolerance:.3e}"
            )
        figures.append(
            {
                "prompt": i,
                "tokens": len(r["input_ids"]),
                "relative_error": err,
                "transformers_drift": drift,
                "greedy_equal": first_diff is None,
                "greedy_tie_broken": excused,
                "forward_vs_generation": forward,
                "transformers_forward_vs_generation": ref_low[i]["forward_gap"] if ref_low else r["forward_gap"],
                "logprob_vs_transformers": lp_err,
                "placeholder_mass": mass,
                "first_logprob_unsuppressed_gap": o["gen_logprobs"][0] - unsuppressed if o["greedy"] else 0.0,
            }
        )
    return failures, figures


def run_ours(host, cases_dir, device, dtype):
    cmd = [str(host), "parity-dump", "--cases", str(cases_dir), "--device", device, "--dtype", dtype]
    started = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[:3000]}")
    return time.time() - started, " ".join(cmd)


def read_ours(folder):
    summary = json.loads((folder / "ours.json").read_text())
    tensors = load_file(folder / "ours.safetensors") if (folder / "ours.safetensors").exists() else {}
    for i, p in enumerate(summary["prompts"]):
        if f"logits.{i}" in tensors:
            p["logits"] = tensors[f"logits.{i}"].float()
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", required=True)
    ap.add_argument("--vl", type=int, default=24)
    ap.add_argument("--text", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--only", default="")
    ap.add_argument("--out", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    names = ["vl-issue"] + [f"vl-{i}" for i in range(args.vl)] + [f"text-{i}" for i in range(args.text)]
    if args.only:
        wanted = args.only.split(",")
        unknown = [n for n in wanted if n not in names]
        if unknown:
            sys.exit(f"--only {','.join(unknown)}: no such case (cases: vl-issue, vl-0.., text-0..)")
        names = wanted
    out = pathlib.Path(args.out) if args.out else pathlib.Path(tempfile.mkdtemp(prefix="parity-sweep-"))
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    device = args.device
    started = time.time()
    built = {}
    for name in names:
        model, processor, prompts, describe = build_case(name, args.seed, out / name, args.prompts)
        vl = name.startswith("vl")
        tok = processor.tokenizer if vl else processor
        eos = tok.convert_tokens_to_ids("<|im_end|>")
        placeholders = tok.convert_tokens_to_ids(VISION_TOKENS) if vl else []
        model = model.to(device)
        ref = reference(model, processor, prompts, out / name, vl, device, eos, placeholders)
        ref_low = None
        if args.dtype == "bf16":
            ref_low = reference(model.to(torch.bfloat16), processor, prompts, out / name, vl, device, eos, placeholders)
        built[name] = (ref, ref_low, describe)
        del model
    reference_seconds = time.time() - started
    ours_seconds, command = run_ours(args.host, out, device, args.dtype)
    failed, report = [], []
    for name in names:
        ref, ref_low, describe = built[name]
        failures, figures = compare(name, ref, ref_low, read_ours(out / name), args.dtype)
        report.append({"case": name, "passed": not failures, "failures": failures, "prompts": figures})
        if failures:
            failed.append(name)
            print(f"FAIL {name}:", file=sys.stderr)
            for f in failures:
                print(f"  {f}", file=sys.stderr)
            print(f"  case: {json.dumps(describe)}", file=sys.stderr)
            print(
                f"  replay: python {pathlib.Path(__file__).name} --host {args.host} --seed {args.seed} "
                f"--prompts {args.prompts} --device {device} --dtype {args.dtype} --only {name}",
                file=sys.stderr,
            )
    errors = [p["relative_error"] for r in report for p in r["prompts"]]
    prompts = sum(len(r["prompts"]) for r in report)
    summary = {
        "cases": len(names),
        "vl_cases": sum(n.startswith("vl") for n in names),
        "text_cases": sum(n.startswith("text") for n in names),
        "prompts": prompts,
        "failed": failed,
        "max_relative_error": max(errors, default=0.0),
        "greedy_equal": sum(p["greedy_equal"] for r in report for p in r["prompts"]),
        "greedy_ties_broken": sum(p["greedy_tie_broken"] for r in report for p in r["prompts"]),
        "max_logprob_vs_transformers": max((p["logprob_vs_transformers"] for r in report for p in r["prompts"]), default=0.0),
        "max_placeholder_mass": max((p["placeholder_mass"] for r in report for p in r["prompts"]), default=0.0),
        "max_forward_vs_generation": max((p["forward_vs_generation"] for r in report for p in r["prompts"]), default=0.0),
        "device": device,
        "dtype": args.dtype,
        "reference_seconds": round(reference_seconds, 2),
        "ours_seconds": round(ours_seconds, 2),
        "command": command,
    }
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"summary": summary, "cases": report}, indent=1))
    print(
        f"parity sweep ({device}, {args.dtype}, seed {args.seed}): {len(names) - len(failed)}/{len(names)} cases passed "
        f"({summary['vl_cases']} VL, {summary['text_cases']} text, {prompts} prompts); max relative error "
        f"{summary['max_relative_error']:.2e}; greedy equal {summary['greedy_equal']}/{prompts}; "
        f"transformers {reference_seconds:.1f} s, ours {ours_seconds:.1f} s"
    )
    if not args.out:
        shutil.rmtree(out, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
