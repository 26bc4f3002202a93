// The component's `vagen:env/reward` export over vagen.js's Reward (a reward build's entry
// re-exports it), and the host's judge. Do not edit; write app.js.
import { complete } from "vagen:env/judge@0.3.0";
import { BadConfig, JudgeFailed, resolveConfig, rewardClass } from "vagen";

function describe(e) {
  return `${e && e.name ? e.name : "Error"}: ${e && e.message ? e.message : e}`;
}

const judge = {
  complete(requests) {
    const part = (p) =>
      typeof p === "string"
        ? { tag: "text", val: p }
        : { tag: "image", val: { width: p.width, height: p.height, rgb: Uint8Array.from(p.rgb) } };
    const asked = requests.map((r) => ({
      messages: r.messages.map((m) => ({ role: m.role, content: m.content.map(part) })),
      maxTokens: r.maxTokens ?? 16,
      temperature: r.temperature ?? 0,
    }));
    return complete(asked).map((a) => (a.tag === "ok" ? a.val : new JudgeFailed(a.val)));
  },
};

const image = (i) => ({ width: i.width, height: i.height, rgb: i.rgb });

export const reward = {
  getManifest() {
    const cls = rewardClass();
    return {
      name: cls.NAME || cls.name.toLowerCase(),
      version: cls.VERSION,
      description: cls.DESCRIPTION,
      defaultConfig: JSON.stringify(cls.DEFAULT_CONFIG),
    };
  },
  Scorer: class Scorer {
    static create(config) {
      const cls = rewardClass();
      try {
        const instance = new Scorer();
        instance.scorer = new cls(resolveConfig(cls, config));
        return instance;
      } catch (e) {
        const tag = e instanceof BadConfig ? "bad-config" : "failed";
        const err = new Error(e instanceof BadConfig ? e.message : describe(e));
        err.payload = { tag, val: err.message };
        throw err;
      }
    }
    score(turns) {
      const mine = turns.map((t) => ({ ...t, imagesBefore: t.imagesBefore.map(image), imagesAfter: t.imagesAfter.map(image) }));
      let scores;
      try {
        scores = Array.from(this.scorer.score(mine, judge));
      } catch (e) {
        // The author's code threw: every turn of the batch fails with it.
        return turns.map(() => ({ tag: "err", val: describe(e) }));
      }
      return scores.map((s) =>
        typeof s === "string" || s === undefined || s === null
          ? { tag: "err", val: String(s) }
          : { tag: "ok", val: { reward: Number(s.reward), metrics: (s.metrics || []).map(([name, value]) => ({ name, value: Number(value) })) } },
      );
    }
  },
};
