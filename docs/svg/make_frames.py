"""Writes the frames in this folder: for a few seeds, the target icon and the renderings of
three imperfect answers (the icon's first shape only, the icon shifted, the icon in grey),
with their scores, by playing them through `vagen-host run --policy human`.

Usage (from the repository root, after `cargo xtask plugins` and a release build):
    python3 docs/svg/make_frames.py
"""

import json
import os
import re
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = os.path.join(ROOT, "target/release/vagen-host")
PLUGIN = os.path.join(ROOT, "target/plugins/svg.wasm")
OUT = os.path.join(ROOT, "docs/svg")
SEEDS = [0, 1, 2]


def run(seed, policy, answer=None):
    """The JSONL rows of one episode, and the folder holding its images."""
    tmp = tempfile.mkdtemp()
    log = os.path.join(tmp, "run.jsonl")
    cmd = [HOST, "run", "--plugin", PLUGIN, "--policy", policy, "--seed", str(seed), "--episodes", "1", "--out", log]
    subprocess.run(cmd, input=(answer or "") + "\n", text=True, check=True, capture_output=True)
    return [json.loads(line) for line in open(log)], tmp


def variants(svg):
    body = svg[svg.index(">") + 1 : svg.rindex("</svg>")]
    head = svg[: svg.index(">") + 1]
    first = re.match(r"\s*(<(path|circle|ellipse|g)\b.*?(/>|</g>))", body, re.S).group(1)
    return [
        ("first shape only", head + first + "</svg>"),
        ("shifted by 1.5 × 1 units", head + '<g transform="translate(1.5 1)">' + body + "</g></svg>"),
        ("in grey", re.sub(r'fill="#[0-9A-Fa-f]+"', 'fill="#9E9E9E"', svg)),
    ]


def main():
    table = ["| seed | icon | answer | score | edges | SSIM | colour |", "|---|---|---|---|---|---|---|"]
    for seed in SEEDS:
        rows, tmp = run(seed, "oracle")
        target = os.path.join(tmp, rows[0]["images"][0])
        shutil.copy(target, os.path.join(OUT, f"seed{seed}-target.png"))
        table.append(f"| {seed} | ![](seed{seed}-target.png) | the target (the oracle scores 1.00) | | | | |")
        for i, (what, answer) in enumerate(variants(rows[1]["answer"])):
            rows, tmp = run(seed, "human", answer)
            step = rows[-1]
            m = {x["name"]: x["value"] for x in step["metrics"]}
            name = f"seed{seed}-answer{i}.png"
            shutil.copy(os.path.join(tmp, step["images"][0]), os.path.join(OUT, name))
            table.append(
                f"| {seed} | ![]({name}) | {what} | {m['score']:.2f} | {m['edge-iou']:.2f} | {m['ssim']:.2f} | {m['colour']:.2f} |"
            )
    with open(os.path.join(OUT, "frames.md"), "w") as f:
        f.write("# SVG frames\n\nWritten by `python3 docs/svg/make_frames.py`: targets and renderings of imperfect answers, 256 × 256, with the plugin's default weights (edges 0.4, SSIM 0.3, colour 0.3).\n\n")
        f.write("\n".join(table) + "\n")


if __name__ == "__main__":
    main()
