"""Writes the Qwen2.5-VL test fixtures with transformers (run by `cargo xtask fixtures`).

- tests/fixtures/tiny-qwen2-vl-a   random Qwen2.5-VL: window 56 (2 x 2 merged units), full
                                   attention in block 1, mrope_section [2, 3, 3], 2 kv heads,
                                   untied head
- tests/fixtures/tiny-qwen2-vl-b   window 112 (4 x 4), full attention in blocks 0 and 2,
                                   mrope_section [4, 2, 2], 4 kv heads (no grouping), tied head
- tests/fixtures/vl-expected.safetensors  logits per prompt and model, the processor's
                                   pixel_values per image
- tests/fixtures/vl-expected.json  the prompts (messages with `<image>` markers and the images'
                                   files), rendered text, input ids, image_grid_thw, M-RoPE
                                   positions and deltas, greedy continuations alone and as one
                                   left-padded batch
- tests/fixtures/vl-images/*.png   the images (drawn here, deterministic)

Both checkpoints share the embedded default tokenizer with Qwen2-VL's vision special tokens
added, Qwen2.5-VL's chat template and a `preprocessor_config.json` whose pixel bounds keep
the images small.
"""

import json
import pathlib

import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import (
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    Qwen2VLVideoProcessor,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from parity_sweep import as_hf  # noqa: F401  (reload_vl.py imports it from here too)

HERE = pathlib.Path(__file__).resolve().parent
CRATE = HERE.parent
ASSETS = CRATE / "assets"
FIXTURES = CRATE / "tests" / "fixtures"
IMAGES = FIXTURES / "vl-images"
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
MIN_PIXELS = 28 * 28
MAX_PIXELS = 112 * 140


def tokenizer():
    config = json.loads((ASSETS / "tokenizer_config.json").read_text())
    config.pop("tokenizer_class", None)
    config["chat_template"] = (ASSETS / "vl_chat_template.jinja").read_text()
    tok = PreTrainedTokenizerFast(tokenizer_file=str(ASSETS / "tokenizer.json"), **config)
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    return tok


def draw_images():
    """(height, width) chosen so that some need no resize (multiples of 28) and some do,
    one with a .5 rounding (Python rounds half to even) and one above MAX_PIXELS."""
    sizes = {"a": (56, 84), "b": (84, 112), "c": (100, 70), "d": (150, 200), "e": (28, 28)}
    rng = np.random.default_rng(7)
    IMAGES.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, (h, w) in sizes.items():
        y, x = np.mgrid[0:h, 0:w]
        base = np.stack([(x * 255 // max(w - 1, 1)), (y * 255 // max(h - 1, 1)), ((x + y) * 7) % 256], -1)
        noise = rng.integers(0, 64, size=(h, w, 3))
        rgb = ((base + noise) % 256).astype(np.uint8)
        Image.fromarray(rgb, "RGB").save(IMAGES / f"{name}.png")
        out[name] = Image.open(IMAGES / f"{name}.png").convert("RGB")
    return out


def configs(tok):
    ids = {t: tok.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    common = dict(
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    text = dict(
        vocab_size=1032,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        initializer_range=0.5,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    vision = dict(depth=3, hidden_size=32, intermediate_size=48, num_heads=2, out_hidden_size=64, initializer_range=0.5)
    a = Qwen2_5_VLConfig(
        text_config=dict(text, num_key_value_heads=2, rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
        vision_config=dict(vision, window_size=56, fullatt_block_indexes=[1]),
        tie_word_embeddings=False,
        **common,
    )
    b = Qwen2_5_VLConfig(
        text_config=dict(
            text,
            num_key_value_heads=4,
            rope_scaling={"type": "mrope", "mrope_section": [4, 2, 2], "rope_theta": 10000.0},
            tie_word_embeddings=True,
        ),
        vision_config=dict(vision, window_size=112, fullatt_block_indexes=[0, 2]),
        tie_word_embeddings=True,
        **common,
    )
    return {"tiny-qwen2-vl-a": a, "tiny-qwen2-vl-b": b}


# Each prompt: messages whose string content holds `<image>` markers, and the images in order.
PROMPTS = [
    {"messages": [{"role": "user", "content": "Which way is the goal?"}], "images": []},
    {
        "messages": [
            {"role": "system", "content": "You are a FrozenLake agent."},
            {"role": "user", "content": "<image>Where is the goal?"},
        ],
        "images": ["a"],
    },
    {
        "messages": [{"role": "user", "content": "Before: <image> after: <image> what changed?"}],
        "images": ["b", "c"],
    },
    {
        "messages": [
            {"role": "user", "content": "<image>Move."},
            {"role": "assistant", "content": "<think>The box is left.</think><answer>Left</answer>"},
            {"role": "user", "content": "You moved. <image>"},
        ],
        "images": ["e", "a"],
    },
]


def main():
    tok = tokenizer()
    images = draw_images()
    image_processor = Qwen2VLImageProcessor(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    pil_processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    template = (ASSETS / "vl_chat_template.jinja").read_text()
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor,
        tokenizer=tok,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=template,
    )
    tensors = {}
    expected = {"images": {}, "prompts": [], "greedy": {}, "greedy_batched": {}, "min_margin": {}}

    for name, img in images.items():
        out = image_processor(images=[img], return_tensors="pt")
        pil = pil_processor(images=[img], return_tensors="pt")
        tensors[f"pixels.{name}"] = out["pixel_values"].contiguous()
        tensors[f"pixels_pil.{name}"] = pil["pixel_values"].contiguous()
        expected["images"][name] = {
            "file": f"vl-images/{name}.png",
            "height": img.height,
            "width": img.width,
            "grid_thw": out["image_grid_thw"][0].tolist(),
        }

    inputs = []
    for p in PROMPTS:
        text = processor.apply_chat_template(as_hf(p["messages"]), add_generation_prompt=True, tokenize=False)
        imgs = [images[n] for n in p["images"]] or None
        enc = processor(text=[text], images=imgs, return_tensors="pt")
        inputs.append((text, imgs, enc))
        expected["prompts"].append({**p, "text": text, "input_ids": enc["input_ids"][0].tolist()})

    gen = GenerationConfig(
        do_sample=False,
        max_new_tokens=10,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
    )
    for name, config in configs(tok).items():
        torch.manual_seed(3 if name.endswith("a") else 4)
        model = Qwen2_5_VLForConditionalGeneration(config).eval()
        path = FIXTURES / name
        path.mkdir(parents=True, exist_ok=True)
        for old in path.glob("*"):
            old.unlink()
        model.save_pretrained(path)
        processor.save_pretrained(path)
        margin = float("inf")
        expected["greedy"][name] = []
        with torch.no_grad():
            for i, (text, imgs, enc) in enumerate(inputs):
                tensors[f"{name}.logits.{i}"] = model(**enc).logits[0].contiguous()
                if name.endswith("a"):
                    positions, deltas = model.model.get_rope_index(
                        enc["input_ids"], enc["mm_token_type_ids"], image_grid_thw=enc.get("image_grid_thw")
                    ) if imgs else (None, None)
                    if positions is not None:
                        expected["prompts"][i]["positions"] = positions[:, 0].tolist()
                        expected["prompts"][i]["delta"] = int(deltas[0, 0])
                out = model.generate(**enc, generation_config=gen, output_scores=True, return_dict_in_generate=True)
                expected["greedy"][name].append(out.sequences[0, enc["input_ids"].shape[1]:].tolist())
                for s in out.scores:
                    top = s[0].topk(2).values
                    margin = min(margin, float(top[0] - top[1]))
            texts = [t for t, _, _ in inputs]
            all_images = [img for _, imgs, _ in inputs for img in (imgs or [])]
            tok.padding_side = "left"
            batch = processor(text=texts, images=all_images, padding=True, return_tensors="pt")
            out = model.generate(**batch, generation_config=gen)
            width = batch["input_ids"].shape[1]
            expected["greedy_batched"][name] = [row[width:].tolist() for row in out]
        expected["min_margin"][name] = margin

    save_file(tensors, FIXTURES / "vl-expected.safetensors")
    (FIXTURES / "vl-expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print("min top-1/top-2 logit margin in greedy steps:", expected["min_margin"])


if __name__ == "__main__":
    main()
