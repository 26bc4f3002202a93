"""Loads a folder saved by vagen with transformers and prints its outputs for token ids.

usage: reload.py DIR causal|critic < {"ids": [[...], ...]}
prints {"outputs": [[[...logits or values per position...]]], "class": "<model class>"}
"""

import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification


def main():
    folder, kind = sys.argv[1], sys.argv[2]
    ids = json.load(sys.stdin)["ids"]
    cls = AutoModelForCausalLM if kind == "causal" else AutoModelForTokenClassification
    model = cls.from_pretrained(folder, dtype=torch.float32).eval()
    outputs = []
    with torch.no_grad():
        for seq in ids:
            out = model(torch.tensor([seq])).logits[0]
            outputs.append(out.tolist())
    print(json.dumps({"outputs": outputs, "class": type(model).__name__}))


if __name__ == "__main__":
    main()
