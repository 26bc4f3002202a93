"""PEFT's side of the LoRA interop tests: loads adapters we save, saves adapters we load,
and merges them, with peft itself.

usage:
  peft_parity.py logits BASE ADAPTER < {"ids": [[...], ...]}
      prints {"outputs": [[[...logits per position...]]]} of PeftModel.from_pretrained
  peft_parity.py logits-vl BASE ADAPTER FIXTURES < {"messages": [...], "images": [...]}
      prints {"logits": [[...]]} for one prompt of the VL fixtures, through the processor
  peft_parity.py make BASE OUT SEED < {"r": 4, "alpha": 8, "target_modules": [...], "rslora": false,
                                       "modules_to_save": [...]}
      saves a fresh PEFT adapter whose B matrices (and whole modules) are random to OUT
  peft_parity.py merge BASE ADAPTER OUT
      writes OUT/merged.safetensors: merge_and_unload()'s state dict
"""

import json
import pathlib
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText


def base_model(folder):
    vl = "vision_config" in AutoConfig.from_pretrained(folder).to_dict()
    cls = AutoModelForImageTextToText if vl else AutoModelForCausalLM
    return cls.from_pretrained(folder, dtype=torch.float32).eval()


def logits(base, adapter):
    ids = json.load(sys.stdin)["ids"]
    model = PeftModel.from_pretrained(base_model(base), adapter).eval()
    with torch.no_grad():
        outputs = [model(input_ids=torch.tensor([seq])).logits[0].tolist() for seq in ids]
    print(json.dumps({"outputs": outputs}))


def logits_vl(base, adapter, fixtures):
    from PIL import Image
    from transformers import AutoProcessor

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from make_vl_fixtures import as_hf

    prompt = json.load(sys.stdin)
    model = PeftModel.from_pretrained(base_model(base), adapter).eval()
    processor = AutoProcessor.from_pretrained(base)
    text = processor.apply_chat_template(as_hf(prompt["messages"]), add_generation_prompt=True, tokenize=False)
    images = [Image.open(pathlib.Path(fixtures) / "vl-images" / f"{n}.png").convert("RGB") for n in prompt["images"]]
    inputs = processor(text=[text], images=images or None, return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs).logits[0]
    print(json.dumps({"logits": out.tolist()}))


def make(base, out, seed):
    spec = json.load(sys.stdin)
    torch.manual_seed(int(seed))
    config = LoraConfig(
        r=spec["r"],
        lora_alpha=spec["alpha"],
        target_modules=spec["target_modules"],
        use_rslora=spec.get("rslora", False),
        modules_to_save=spec.get("modules_to_save"),
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(base_model(base), config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.1)
            elif "modules_to_save" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(out)


def merge(base, adapter, out):
    model = PeftModel.from_pretrained(base_model(base), adapter).merge_and_unload()
    state = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    pathlib.Path(out).mkdir(parents=True, exist_ok=True)
    save_file(state, str(pathlib.Path(out) / "merged.safetensors"))


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    {"logits": logits, "logits-vl": logits_vl, "make": make, "merge": merge}[command](*args)
