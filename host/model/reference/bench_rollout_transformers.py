"""transformers' side of `vagen-host bench rollout --transformers`: the same multi-turn
workload through `model.generate`, turn by turn, as a rollout on transformers runs it: each
turn's prompts left-padded into one batch and prefilled whole, every row making exactly
`new_tokens` (sampling at temperature 1), its answer and the next observation appended for
the next turn. Prints one JSON line: seconds, generated and prefilled tokens.
"""

import argparse
import json
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Qwen2ForCausalLM

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config")
    p.add_argument("--model")
    p.add_argument("--workload", required=True)
    a = p.parse_args()
    with open(a.workload) as f:
        w = json.load(f)
    device = w["device"]
    device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    dtype = DTYPES[w["dtype"]]
    if a.model:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    else:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(AutoConfig.from_pretrained(a.config)).to(dtype)
    model = model.to(device).eval()

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def turn(prompts, new):
        longest = max(len(x) for x in prompts)
        ids = torch.tensor([[0] * (longest - len(x)) + x for x in prompts], device=device)
        mask = torch.tensor([[0] * (longest - len(x)) + [1] * len(x) for x in prompts], device=device)
        with torch.no_grad():
            out = model.generate(
                ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
            )
        return [row[longest:].tolist() for row in out]

    turn([w["first"][0]], 2)  # warm-up
    prompts = [list(x) for x in w["first"]]
    prefill = 0
    sync()
    t = time.perf_counter()
    for k in range(w["turns"]):
        prefill += sum(len(x) for x in prompts)
        answers = turn(prompts, w["new_tokens"])
        if k < len(w["between"]):
            prompts = [x + y + z for x, y, z in zip(prompts, answers, w["between"][k])]
    sync()
    seconds = time.perf_counter() - t
    print(json.dumps({
        "seconds": seconds,
        "generated_tokens": len(prompts) * w["turns"] * w["new_tokens"],
        "prefill_tokens": prefill,
    }), flush=True)


if __name__ == "__main__":
    main()
