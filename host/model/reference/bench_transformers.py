"""transformers' side of `vagen-host bench-model --transformers`: the same shape, batch sizes
and lengths through `model.generate` (sampling at temperature 1, every row making exactly
--new-tokens). Prints one JSON line per batch size.
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
    p.add_argument("--batch", default="1,8,64")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--dtype", default="f32")
    p.add_argument("--device", default="auto")
    a = p.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    dtype = DTYPES[a.dtype]
    if a.model:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype)
    else:
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(AutoConfig.from_pretrained(a.config)).to(dtype)
    model = model.to(device).eval()
    vocab = model.config.vocab_size

    def run(batch, prompt_len, new):
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(0, vocab, (batch, prompt_len), generator=g).to(device)
        mask = torch.ones_like(ids)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=new, min_new_tokens=new, pad_token_id=0,
            )
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - t

    run(1, min(a.prompt_len, 8), 2)  # warm-up
    for b in [int(x) for x in a.batch.split(",")]:
        prefill = run(b, a.prompt_len, 1)
        total = run(b, a.prompt_len, a.new_tokens)
        decode = max(total - prefill, 1e-9)
        print(json.dumps({
            "batch": b,
            "prefill_tokens_per_s": b * a.prompt_len / prefill,
            "decode_tokens_per_s": b * (a.new_tokens - 1) / decode,
        }), flush=True)


if __name__ == "__main__":
    main()
