"""Reference advantage estimators, written from the formulas in REFERENCE.md, independent of
the Rust code. Generates random multi-turn batches and writes their expected outputs to
tests/fixtures/advantages.json, which the Rust tests compare against (to 1e-6).

Run from the repository root:  .venv/bin/python host/algo/reference/advantages.py
(`cargo xtask setup` creates .venv with numpy). The fixture is committed; regenerate it only
when a formula changes on purpose.
"""

import json
import pathlib

import numpy as np

EPS_GROUP = 1e-6
EPS_WHITEN = 1e-8


def random_trajectory(rng, group, max_turn_tokens):
    """One trajectory; assistant turns have 1 to `max_turn_tokens` tokens, so with a large
    bound turns of very different lengths meet in one batch (what separates whitening over
    tokens from whitening over turn ends)."""
    rewards, values, loss_mask, adv_mask, turn_ends, turn_states = [], [], [], [], [], []

    def push(masked, reward=0.0):
        rewards.append(reward)
        values.append(float(rng.normal()))
        loss_mask.append(masked)
        adv_mask.append(masked)

    for _ in range(int(rng.integers(1, 5))):  # system prompt and first observation
        push(False)
    for turn in range(int(rng.integers(1, 5))):
        if turn > 0:
            for _ in range(int(rng.integers(0, 4))):  # observation tokens between turns
                push(False)
        for _ in range(int(rng.integers(0, max_turn_tokens))):  # assistant tokens, some rewarded
            push(True, float(rng.normal()) * 0.1 if rng.random() < 0.2 else 0.0)
        push(True, float(np.round(rng.normal() * 3, 3)))  # the turn's last token
        turn_ends.append(len(rewards) - 1)
        turn_states.append(int(rng.integers(0, 3)))  # few states, so group members share some
    return dict(rewards=rewards, values=values, loss_mask=loss_mask, adv_mask=adv_mask,
                turn_ends=turn_ends, turn_states=turn_states, group=group)


def masked_gae(t, gamma, lam):
    n = len(t["rewards"])
    adv, ret = np.zeros(n), np.zeros(n)
    next_value, running = 0.0, 0.0
    for p in reversed(range(n)):
        if not t["adv_mask"][p]:
            continue
        delta = t["rewards"][p] + gamma * next_value - t["values"][p]
        running = delta + gamma * lam * running
        adv[p], ret[p] = running, running + t["values"][p]
        next_value = t["values"][p]
    return adv, ret, list(t["adv_mask"])


def turns_of(t):
    out, start = [], 0
    for e in t["turn_ends"]:
        out.append([p for p in range(start, e + 1) if t["adv_mask"][p]])
        start = e + 1
    return out


def turn_level(t, gamma_turn, lam_turn):
    ends = t["turn_ends"]
    a = [0.0] * len(ends)
    nxt = 0.0
    for k in reversed(range(len(ends))):
        v_next = t["values"][ends[k + 1]] if k + 1 < len(ends) else 0.0
        delta = t["rewards"][ends[k]] + gamma_turn * v_next - t["values"][ends[k]]
        nxt = delta + gamma_turn * lam_turn * nxt
        a[k] = nxt
    return a


def bi_level_gae(t, gamma_turn, lam_turn, gamma_token, lam_token):
    n = len(t["rewards"])
    adv, ret, vmask = np.zeros(n), np.zeros(n), [False] * n
    for tokens, a_end in zip(turns_of(t), turn_level(t, gamma_turn, lam_turn)):
        next_adv, next_value = a_end, 0.0
        for k in reversed(range(len(tokens))):
            p = tokens[k]
            if k == len(tokens) - 1:
                a = a_end
            else:
                a = (t["rewards"][p] + gamma_token * next_value - t["values"][p]
                     + gamma_token * lam_token * next_adv)
            adv[p], ret[p], vmask[p] = a, a + t["values"][p], True
            next_adv, next_value = a, t["values"][p]
    return adv, ret, vmask


def turn_gae(t, gamma_turn, lam_turn):
    n = len(t["rewards"])
    adv, ret, vmask = np.zeros(n), np.zeros(n), [False] * n
    for tokens, a, end in zip(turns_of(t), turn_level(t, gamma_turn, lam_turn), t["turn_ends"]):
        for p in tokens:
            adv[p], ret[p] = a, a + t["values"][end]
        vmask[end] = True
    return adv, ret, vmask


def group_normalised(batch, keys):
    scores = np.array([sum(t["rewards"]) for t in batch])
    out = np.zeros(len(batch))
    for k in set(keys):
        idx = [i for i, kk in enumerate(keys) if kk == k]
        if len(idx) == 1:
            mean, std = 0.0, 1.0
        else:
            mean, std = scores[idx].mean(), scores[idx].std(ddof=1)
        out[idx] = (scores[idx] - mean) / (std + EPS_GROUP)
    return out


def gigpo(batch, gamma_turn, step_weight, eps):
    """GiGPO: the group-normalised score plus step_weight x each turn's discounted return,
    normalised among the turns of its group taken in the same state (0 for a state seen once).
    `eps` None: mean-only at both levels."""
    def norm(xs, key_of):
        xs = np.array(xs, dtype=float)
        out = np.zeros(len(xs))
        keys = [key_of(i) for i in range(len(xs))]
        for k in set(keys):
            idx = [i for i, kk in enumerate(keys) if kk == k]
            if len(idx) == 1:
                out[idx] = (xs[idx] - 0.0) / (1.0 + eps) if eps is not None else xs[idx]
                continue
            d = xs[idx] - xs[idx].mean()
            out[idx] = d / (xs[idx].std(ddof=1) + eps) if eps is not None else d
        return out, keys

    episode, _ = norm([sum(t["rewards"]) for t in batch], lambda i: batch[i]["group"])
    rets, anchors = [], []
    for t in batch:
        turn_r = [sum(t["rewards"][p] for p in tokens) for tokens in turns_of(t)]
        g, back = 0.0, []
        for r in reversed(turn_r):
            g = r + gamma_turn * g
            back.append(g)
        rets.extend(reversed(back))
        anchors.extend((t["group"], s) for s in t["turn_states"])
    step, _ = norm(rets, lambda k: anchors[k])
    step = [0.0 if anchors.count(anchors[k]) < 2 else step[k] for k in range(len(rets))]
    outs, k = [], 0
    for t, e in zip(batch, episode):
        a = np.zeros(len(t["rewards"]))
        for tokens in turns_of(t):
            for p in tokens:
                a[p] = e + step_weight * step[k]
            k += 1
        outs.append((a, a.copy(), [False] * len(a)))
    return outs


def broadcast(t, s):
    a = np.array([s if m else 0.0 for m in t["adv_mask"]])
    return a, a.copy(), [False] * len(a)


def compute(cfg, batch):
    est, gamma, lam = cfg["estimator"], cfg["gamma"], cfg["lambda"]
    lam_turn = cfg.get("lambda_turn", lam)
    lam_token = cfg.get("lambda_token", lam)
    if est == "gae":
        outs = [masked_gae(t, gamma, lam) for t in batch]
    elif est == "bi-level-gae":
        outs = [bi_level_gae(t, cfg["gamma_turn"], lam_turn, gamma, lam_token) for t in batch]
    elif est == "turn-gae":
        outs = [turn_gae(t, cfg["gamma_turn"], lam_turn) for t in batch]
    elif est == "gigpo":
        eps = EPS_GROUP if cfg.get("norm_by_std", True) else None
        outs = gigpo(batch, cfg["gamma_turn"], cfg.get("step_weight", 1.0), eps)
    else:
        if est == "grpo":
            scores = group_normalised(batch, [t["group"] for t in batch])
        elif est == "brpo":
            scores = group_normalised(batch, [0] * len(batch))
        else:
            scores = [sum(t["rewards"]) for t in batch]
        outs = [broadcast(t, s) for t, s in zip(batch, scores)]
    whiten = cfg.get("whiten", est in ("gae", "bi-level-gae", "turn-gae"))
    if whiten:
        # verl's masked_whiten over the loss mask; VAGEN's turn-gae over its reward_mask (the
        # turn ends), so a long turn counts once, not once per token.
        if est == "turn-gae":
            masked = np.array([o[0][e] for o, t in zip(outs, batch) for e in t["turn_ends"]])
        else:
            masked = np.concatenate([o[0][np.array(t["adv_mask"])] for o, t in zip(outs, batch)])
        mean = masked.mean()
        var = masked.var(ddof=1) if len(masked) > 1 else 0.0
        scale = 1.0 / np.sqrt(var + EPS_WHITEN)
        outs = [(np.where(np.array(t["adv_mask"]), (o[0] - mean) * scale, o[0]), o[1], o[2])
                for o, t in zip(outs, batch)]
    return [dict(advantages=o[0].tolist(), returns=o[1].tolist(), value_mask=list(o[2])) for o in outs]


def normalise(scores, keys, method):
    scores = np.array(scores, dtype=float)
    if method == "identity":
        return scores.tolist()
    out = np.zeros(len(scores))
    for k in set(keys):
        idx = [i for i, kk in enumerate(keys) if kk == k]
        mean = scores[idx].mean()
        std = scores[idx].std(ddof=1) if len(idx) > 1 else 0.0
        if method == "mean":
            out[idx] = scores[idx] - mean
        else:
            z = (scores[idx] - mean) / (std + 1e-6)
            out[idx] = np.clip(z, -1.0, 3.0) if method == "asym-clip" else z
    return out.tolist()


CONFIGS = [
    dict(estimator="gae", gamma=1.0, **{"lambda": 1.0}),
    dict(estimator="gae", gamma=0.99, whiten=False, **{"lambda": 0.95}),
    dict(estimator="gae", gamma=0.9, whiten=True, **{"lambda": 0.8}),
    dict(estimator="bi-level-gae", gamma=1.0, gamma_turn=0.95, whiten=False, **{"lambda": 1.0}),
    dict(estimator="bi-level-gae", gamma=0.99, gamma_turn=0.9, lambda_turn=0.7, lambda_token=0.95,
         **{"lambda": 0.5}),
    dict(estimator="turn-gae", gamma=1.0, gamma_turn=0.95, whiten=False, **{"lambda": 0.9}),
    dict(estimator="turn-gae", gamma=1.0, gamma_turn=0.8, lambda_turn=0.6, **{"lambda": 1.0}),
    dict(estimator="turn-gae", gamma=1.0, gamma_turn=0.95, whiten=True, **{"lambda": 1.0}),
    dict(estimator="bi-level-gae", gamma=1.0, gamma_turn=0.95, whiten=True, **{"lambda": 1.0}),
    dict(estimator="gae", gamma=1.0, whiten=False, **{"lambda": 1.0}),
    dict(estimator="grpo", gamma=1.0, **{"lambda": 1.0}),
    dict(estimator="grpo", gamma=1.0, whiten=True, **{"lambda": 1.0}),
    dict(estimator="brpo", gamma=1.0, **{"lambda": 1.0}),
    dict(estimator="brpo", gamma=1.0, whiten=True, **{"lambda": 1.0}),
    dict(estimator="reinforce", gamma=1.0, **{"lambda": 1.0}),
    dict(estimator="reinforce", gamma=1.0, whiten=True, **{"lambda": 1.0}),
    dict(estimator="gigpo", gamma=1.0, gamma_turn=0.95, **{"lambda": 1.0}),
    dict(estimator="gigpo", gamma=1.0, gamma_turn=0.9, step_weight=0.5, norm_by_std=False, **{"lambda": 1.0}),
    dict(estimator="gigpo", gamma=1.0, gamma_turn=0.95, whiten=True, **{"lambda": 1.0}),
]


def main():
    rng = np.random.default_rng(20261121)
    cases = []
    for case in range(16):
        groups, members = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        max_turn_tokens = 4 if case % 2 == 0 else 40
        batch = [random_trajectory(rng, g, max_turn_tokens) for g in range(groups) for _ in range(members)]
        for cfg in CONFIGS:
            cases.append(dict(config=cfg, batch=batch, expected=compute(cfg, batch)))
    norm_cases = []
    for _ in range(8):
        n = int(rng.integers(1, 12))
        scores = [float(x) for x in np.round(rng.normal(size=n) * 5, 3)]
        keys = [int(k) for k in rng.integers(0, 3, size=n)]
        for method in ["identity", "mean", "mean-std", "asym-clip"]:
            norm_cases.append(dict(scores=scores, keys=keys, method=method,
                                   expected=normalise(scores, keys, method)))
    out = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "advantages.json"
    out.write_text(json.dumps(dict(estimators=cases, normalisation=norm_cases), indent=None))
    print(f"wrote {len(cases)} estimator cases and {len(norm_cases)} normalisation cases to {out}")


if __name__ == "__main__":
    main()
