"""Writes the model crate's committed assets and test fixtures with Hugging Face libraries.

Run by `cargo xtask fixtures` (inside the project venv, transformers from PyPI):

- assets/tokenizer.json           the embedded default model's tokenizer: byte-level BPE in
                                  Qwen2's layout (same pre-tokenizer, decoder and chat special
                                  tokens), trained on a built-in corpus of env-style text
- tests/fixtures/tiny-qwen2       a random Qwen2 checkpoint (untied head, sharded)
- tests/fixtures/tiny-qwen2-tied  a random Qwen2 checkpoint (tied head, one file)
- tests/fixtures/expected.safetensors  logits of both for a batch of token sequences
- tests/fixtures/expected.json    greedy continuations, chat renderings, token ids
"""

import json
import pathlib

import torch
from safetensors.torch import save_file
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

HERE = pathlib.Path(__file__).resolve().parent
CRATE = HERE.parent
ASSETS = CRATE / "assets"
FIXTURES = CRATE / "tests" / "fixtures"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Qwen2's pre-tokenizer split pattern.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB = 1024


def corpus():
    """Env-style text: prompts, grids, actions and reasoning formats, deterministic."""
    words = (
        "you are an agent playing a game on a grid . the goal is to reach the target without falling "
        "into a hole . push every box onto a target . actions : left right up down . your answer "
        "must be in the format . reply with the action you take next . the player is at row column "
        "the box is above below left of right of the target . observation reward done success "
        "invalid action valid effective you moved you pushed the box is stuck think answer "
        "navigate to the table sofa chair bed fridge lamp plant laptop mug move ahead back rotate "
        "look up down the state of the environment after your action predicted grounding world model "
        "a helpful assistant created by alibaba cloud system user assistant format correct "
        "number guess higher lower equal equation countdown target numbers using each once"
    ).split()
    lines = []
    for i in range(400):
        a, b, c = words[i % len(words)], words[(i * 7) % len(words)], words[(i * 13) % len(words)]
        lines.append(f"{a.capitalize()} {b} {c}, {i % 10} {i * 37 % 1000}.")
        lines.append(f"<think>The {a} is {b} the {c}.</think><answer>{['Left', 'Right', 'Up', 'Down'][i % 4]}</answer>")
        lines.append(f"<observation>{b} {c}</observation><prediction>{a}</prediction>")
    grids = ["_ _ G\n_ O _\nP _ _", "# # # #\n# P X #\n# _ O #\n# # # #", "S F F F\nF H F H\nF F F H\nH F F G"]
    lines += grids * 40
    return lines


def build_tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer)
    tok.add_special_tokens(SPECIALS)
    return tok


def tokenizer_config(template):
    return {
        "add_prefix_space": False,
        "bos_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 32768,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


THINKING_TEMPLATE = """{%- set ns = namespace(last_user=-1) %}
{%- for message in messages[::-1] %}
    {%- if ns.last_user == -1 and message.role == 'user' %}
        {%- set ns.last_user = (messages|length - 1) - loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant'] %}
        {{- raise_exception('unknown role ' + message.role) }}
    {%- endif %}
    {%- if message.content is string %}
        {%- set content = message.content.strip() %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if message.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in content %}
        {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
    {%- endif %}
    {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n<think>\\n' }}
{%- endif %}"""

# No whitespace control: relies on trim_blocks and lstrip_blocks, as transformers sets them.
BLOCKS_TEMPLATE = """{{ bos_token }}{% for message in messages %}
  {% if message['role'] == 'system' %}
[SYS] {{ message['content'] | trim }}
  {% elif message['role'] == 'user' %}
[USER] {{ message['content'] }}
  {% else %}
[BOT] {{ message['content'] }}{{ eos_token }}
  {% endif %}
{% endfor %}
{% if add_generation_prompt %}
[BOT]{% endif %}"""


CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}],
    [
        {"role": "system", "content": "You are a FrozenLake agent."},
        {"role": "user", "content": "S F F\nF H F\nF F G\nYour move?"},
    ],
    [
        {"role": "system", "content": "You are a Sokoban solver.  "},
        {"role": "user", "content": "# P X O #"},
        {"role": "assistant", "content": "<think>The box is right of me.</think><answer>Right</answer>"},
        {"role": "user", "content": "You pushed the box. Reward 1.0"},
        {"role": "assistant", "content": "<think>\nDone?</think>\n<answer>Left</answer>"},
    ],
    [{"role": "user", "content": "héllo 世界 🎉\ttabs\nnew lines  and  spaces "}],
    [{"role": "user", "content": ""}, {"role": "assistant", "content": "  "}],
]


def write_checkpoint(path, tokenizer, config, tie, shard):
    torch.manual_seed(1 if tie else 0)
    model = Qwen2ForCausalLM(config).eval()
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*"):
        old.unlink()
    model.save_pretrained(path, max_shard_size="200KB" if shard else "50GB")
    tokenizer.save_pretrained(path)
    return model


def main():
    ASSETS.mkdir(exist_ok=True)
    FIXTURES.mkdir(parents=True, exist_ok=True)
    template = (ASSETS / "chat_template.jinja").read_text()
    raw = build_tokenizer()
    raw.save(str(ASSETS / "tokenizer.json"))
    # The Rust side retrains this tokenizer on an env's texts plus this corpus
    # (default_model::tokenizer_for); with no env texts it gives tokenizer.json back.
    (ASSETS / "base_corpus.json").write_text(json.dumps(corpus(), indent=0, ensure_ascii=False))
    (ASSETS / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(template), indent=2) + "\n")
    hf_tok = PreTrainedTokenizerFast(tokenizer_file=str(ASSETS / "tokenizer.json"), **{
        k: v for k, v in tokenizer_config(template).items() if k not in ("tokenizer_class",)
    })
    im_end = hf_tok.convert_tokens_to_ids("<|im_end|>")
    endoftext = hf_tok.convert_tokens_to_ids("<|endoftext|>")

    def config(tie):
        return Qwen2Config(
            vocab_size=VOCAB,
            hidden_size=64,
            intermediate_size=160,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            rope_theta=10000.0 if tie else 1000000.0,
            rms_norm_eps=1e-6,
            tie_word_embeddings=tie,
            initializer_range=0.5,
            bos_token_id=endoftext,
            eos_token_id=im_end,
            use_sliding_window=False,
        )

    models_ = {
        "tiny-qwen2": write_checkpoint(FIXTURES / "tiny-qwen2", hf_tok, config(False), tie=False, shard=True),
        "tiny-qwen2-tied": write_checkpoint(FIXTURES / "tiny-qwen2-tied", hf_tok, config(True), tie=True, shard=False),
    }

    texts = [
        "The agent moves Left.",
        "<|im_start|>user\nS F F\nF H G<|im_end|>\n<|im_start|>assistant\n",
        "push the box onto the target 12345",
    ]
    ids = [hf_tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    tensors = {}
    expected = {"texts": texts, "ids": ids, "greedy": {}, "greedy_batched": {}, "chat": [], "min_margin": {}}
    for name, model in models_.items():
        margin = float("inf")
        with torch.no_grad():
            for i, seq in enumerate(ids):
                tensors[f"{name}.logits.{i}"] = model(torch.tensor([seq])).logits[0].contiguous()
            gen = GenerationConfig(do_sample=False, max_new_tokens=12, eos_token_id=im_end, pad_token_id=endoftext)
            expected["greedy"][name] = []
            for seq in ids:
                out = model.generate(
                    torch.tensor([seq]), generation_config=gen, output_scores=True, return_dict_in_generate=True
                )
                expected["greedy"][name].append(out.sequences[0, len(seq):].tolist())
                for s in out.scores:
                    top = s[0].topk(2).values
                    margin = min(margin, float(top[0] - top[1]))
            width = max(len(s) for s in ids)
            padded = torch.tensor([[endoftext] * (width - len(s)) + s for s in ids])
            mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in ids])
            out = model.generate(padded, attention_mask=mask, generation_config=gen)
            expected["greedy_batched"][name] = [
                [t for t in row[width:].tolist()] for row in out
            ]
        expected["min_margin"][name] = margin
    save_file(tensors, FIXTURES / "expected.safetensors")

    templates = {"qwen2.5": template, "thinking": THINKING_TEMPLATE, "blocks": BLOCKS_TEMPLATE}
    specials = {"bos_token": "<s>", "eos_token": "</s>"}
    for tname, tsrc in templates.items():
        for conv in CONVERSATIONS:
            for gen_prompt in (False, True):
                text = hf_tok.apply_chat_template(
                    conv, chat_template=tsrc, add_generation_prompt=gen_prompt, tokenize=False, **specials
                )
                expected["chat"].append(
                    {
                        "template": tname,
                        "messages": conv,
                        "add_generation_prompt": gen_prompt,
                        "text": text,
                        "ids": hf_tok(text, add_special_tokens=False)["input_ids"],
                    }
                )
    (FIXTURES / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    (FIXTURES / "templates.json").write_text(json.dumps(templates, indent=1) + "\n")
    print("min top-1/top-2 logit margin in greedy steps:", expected["min_margin"])


if __name__ == "__main__":
    main()
