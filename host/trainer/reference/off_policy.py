"""The off-policy corrections of the PPO loss as their sources write them, on the data the
Rust test sends (JSON on stdin): prints each variant's loss and logged figures as JSON.

- `tis`: truncated importance sampling (Yao et al. 2025, "Your efficient RL framework
  secretly brings you off-policy RL training"; verl's `compute_policy_loss_vanilla` with
  `rollout_is_weights`): the clipped PPO loss per token times min(exp(old - behaviour), C),
  detached.
- `decoupled`: decoupled PPO (Hilton et al. 2022, "Batch size-invariance for policy
  optimization"; AReaL's `ppo_actor_loss_fn`): the clip around the proximal policy (old), the
  loss per token times exp(old - behaviour); tokens whose weight passes the cap count zero.

Written from the papers' formulas, in plain torch, independently of the Rust code.
"""
import json
import sys

import torch


def ppo(logp, old, adv, clip_low, clip_high, dual):
    ratio = torch.exp(logp - old)
    losses = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high))
    if dual is not None:
        losses = torch.where(adv < 0, torch.minimum(losses, -adv * dual), losses)
    return losses


def main():
    x = json.load(sys.stdin)
    t = lambda k: torch.tensor(x[k], dtype=torch.float64)
    logp, old, behav, adv, mask = t("logp"), t("old"), t("behav"), t("adv"), t("mask")
    losses = ppo(logp, old, adv, x["clip_low"], x["clip_high"], x["dual_clip"])
    n = mask.sum()
    weight = torch.exp(old - behav)
    out = {"none": {"loss": float((losses * mask).sum() / n)}}
    tis = torch.clamp(weight, max=x["cap"])
    out["tis"] = {
        "loss": float((losses * tis * mask).sum() / n),
        "weight": float((tis * mask).sum() / n),
        "capped": float(((weight > x["cap"]).double() * mask).sum() / n),
    }
    keep = (weight <= x["cap"]).double() * mask
    dec = weight * keep
    out["decoupled"] = {
        "loss": float((losses * dec * mask).sum() / n),
        "weight": float((dec * mask).sum() / n),
        "capped": float(((weight > x["cap"]).double() * mask).sum() / n),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
