"""Loads a Qwen2.5-VL folder saved by vagen with transformers (model and processor) and
prints its logits for one prompt of the VL fixtures.

usage: reload_vl.py DIR FIXTURES < {"messages": [...], "images": ["a", ...]}
prints {"logits": [[...per position...]], "class": "<model class>"}
"""

import json
import pathlib
import sys

import torch
from PIL import Image
from transformers import AutoModelForImageTextToText, AutoProcessor

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_vl_fixtures import as_hf  # noqa: E402


def main():
    folder, fixtures = sys.argv[1], pathlib.Path(sys.argv[2])
    prompt = json.load(sys.stdin)
    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(folder)
    text = processor.apply_chat_template(as_hf(prompt["messages"]), add_generation_prompt=True, tokenize=False)
    images = [Image.open(fixtures / "vl-images" / f"{n}.png").convert("RGB") for n in prompt["images"]] or None
    inputs = processor(text=[text], images=images, return_tensors="pt")
    with torch.no_grad():
        logits = model(**inputs).logits[0]
    print(json.dumps({"logits": logits.tolist(), "class": type(model).__name__}))


if __name__ == "__main__":
    main()
