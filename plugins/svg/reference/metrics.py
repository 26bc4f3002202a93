"""The SVG plugin's three score terms as the libraries users trust compute them.

VAGEN's structural accuracy (its `calculate_structural_accuracy`: PIL luma, OpenCV Canny
100/200, IoU of the edge maps, 0 when both are empty), scikit-image's SSIM with a Gaussian
window, and a colour histogram intersection over non-white pixels in NumPy.

Usage: python metrics.py PAIRS.json, where PAIRS.json is
{"side": S, "pairs": [[target.rgb, render.rgb], ...]} and each .rgb file holds S*S*3 bytes.
Prints per pair: edge_iou ssim colour target_edge_pixels.
"""

import json
import sys

import cv2
import numpy as np
from PIL import Image
from skimage.metrics import structural_similarity

LEVELS = 4


def load(path, side):
    return np.fromfile(path, dtype=np.uint8).reshape(side, side, 3)


def luma(rgb):
    return np.array(Image.fromarray(rgb, "RGB").convert("L"))


def edge_iou(a, b):
    ea, eb = cv2.Canny(luma(a), 100, 200), cv2.Canny(luma(b), 100, 200)
    union = np.logical_or(ea, eb).sum()
    inter = np.logical_and(ea, eb).sum()
    return (inter / union if union > 0 else 0.0), int((ea > 0).sum())


def ssim(a, b):
    return structural_similarity(
        luma(a).astype(np.float64),
        luma(b).astype(np.float64),
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=255,
    )


def histogram(rgb):
    px = rgb.reshape(-1, 3)
    px = px[~np.all(px == 255, axis=1)].astype(np.int64) * LEVELS // 256
    index = (px[:, 0] * LEVELS + px[:, 1]) * LEVELS + px[:, 2]
    return np.bincount(index, minlength=LEVELS**3), len(px)


def colour(a, b):
    (ha, na), (hb, nb) = histogram(a), histogram(b)
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    return float(np.minimum(ha / na, hb / nb).sum())


def main():
    spec = json.load(open(sys.argv[1]))
    side = spec["side"]
    for target, render in spec["pairs"]:
        a, b = load(target, side), load(render, side)
        iou, edges = edge_iou(a, b)
        print(f"{iou:.12f} {ssim(a, b):.12f} {colour(a, b):.12f} {edges}")


if __name__ == "__main__":
    main()
