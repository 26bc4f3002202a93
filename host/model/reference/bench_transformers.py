"""transformers' side of `vagen-host bench model --transformers`: the same shape, batch sizes
and lengths through `model.generate` (sampling at temperature 1, every row making exactly
--new-tokens). Prints one JSON line per batch size.

For a Qwen2.5-VL shape, each row also holds --images random images of --image-size pixels
square ahead of its text (pixel values drawn directly, as vagen's side does), prefill counts
their tokens, and the vision encoder alone is timed over the batch's images.
"""

import argparse
import json
import time

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2ForCausalLM,
)

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
    p.add_argument("--images", type=int, default=0)
    p.add_argument("--image-size", type=int, default=448)
    a = p.parse_args()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    dtype = DTYPES[a.dtype]
    vl = a.images > 0
    if a.model:
        cls = AutoModelForImageTextToText if vl else AutoModelForCausalLM
        model = cls.from_pretrained(a.model, dtype=dtype)
    else:
        torch.manual_seed(0)
        cls = Qwen2_5_VLForConditionalGeneration if vl else Qwen2ForCausalLM
        model = cls(AutoConfig.from_pretrained(a.config)).to(dtype)
    model = model.to(device).eval()
    config = model.config.get_text_config()
    vocab = config.vocab_size

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def inputs(batch, prompt_len):
        g = torch.Generator().manual_seed(batch)
        ids = torch.randint(0, vocab, (batch, prompt_len), generator=g)
        extra = {}
        if vl:
            v = model.config.vision_config
            side = a.image_size // v.patch_size
            tokens = side * side // (v.spatial_merge_size ** 2)
            image = [model.config.vision_start_token_id] + [model.config.image_token_id] * tokens
            image += [model.config.vision_end_token_id]
            head = torch.tensor(image * a.images).repeat(batch, 1)
            ids = torch.cat([head, ids], 1)
            n = batch * a.images
            dim = 3 * v.temporal_patch_size * v.patch_size ** 2
            extra["pixel_values"] = torch.randn(n * side * side, dim, generator=g).to(device, dtype)
            extra["image_grid_thw"] = torch.tensor([[1, side, side]] * n).to(device)
            extra["mm_token_type_ids"] = (ids == model.config.image_token_id).int().to(device)
        return ids.to(device), extra

    def run(batch, prompt_len, new):
        ids, extra = inputs(batch, prompt_len)
        mask = torch.ones_like(ids)
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(
                ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                max_new_tokens=new, min_new_tokens=new, pad_token_id=0, **extra,
            )
        sync()
        return time.perf_counter() - t, ids.shape[1]

    def encode(batch):
        _, extra = inputs(batch, 1)
        sync()
        t = time.perf_counter()
        with torch.no_grad():
            model.model.visual(extra["pixel_values"], grid_thw=extra["image_grid_thw"])
        sync()
        return batch * a.images / (time.perf_counter() - t)

    run(1, min(a.prompt_len, 8), 2)  # warm-up
    for b in [int(x) for x in a.batch.split(",")]:
        images_per_s = encode(b) if vl else None
        prefill, width = run(b, a.prompt_len, 1)
        total, _ = run(b, a.prompt_len, a.new_tokens)
        decode = max(total - prefill, 1e-9)
        print(json.dumps({
            "batch": b,
            "vision_images_per_s": images_per_s,
            "prefill_tokens_per_s": b * width / prefill,
            "decode_tokens_per_s": b * (a.new_tokens - 1) / decode,
        }), flush=True)


if __name__ == "__main__":
    main()
