// Tests of the helper module, run by `cargo xtask test` (host/cli/tests/languages.rs) with
// the machine's node: `node --test sdk/js/test_vagen.mjs`.
import assert from "node:assert/strict";
import test from "node:test";

import { ActionSpec, BadConfig, Canvas, Env, echo, env, exportEnv, relativePosition, resolveConfig, Rng, tooLong } from "./vagen.js";

test("Rng is SplitMix64", () => {
  // SplitMix64's published first output for seed 0; the C and Python SDKs match it.
  assert.equal(new Rng(0n).nextU64(), 0xe220a8397b1dcdafn);
  const r = new Rng(7n);
  const counts = [0, 0, 0];
  for (let i = 0; i < 3000; i++) counts[r.below(3)]++;
  assert.ok(counts.every((c) => c > 900 && c < 1100), String(counts));
});

test("actions split, trim, cap and stop at the first invalid one", () => {
  const spec = new ActionSpec(["Left", "Down", "Right", "Up"], ",", 3);
  assert.deepEqual(spec.parse(" left ,DOWN,, Right ").actions, [0, 1, 2]);
  assert.deepEqual(spec.parse("Up, Up, Up, Up, Up").ignored, 2);
  assert.deepEqual(spec.parse("Up, jump, Left"), { actions: [3], invalid: ["jump"], ignored: 1 });
  assert.equal(spec.join([0, 3]), "Left, Up");
});

test("an answer over the cap is refused before it is split", () => {
  const spec = new ActionSpec(["Left", "Right"], ",", 2, { maxAnswerLen: 10 });
  assert.deepEqual(spec.parse("Left, Left, Left"), { actions: [], invalid: [tooLong(16, 10)], ignored: 0 });
  assert.deepEqual(spec.parse("Left, Left").actions, [0, 0]);
  const big = new ActionSpec(["Left"], ",", 2);
  assert.deepEqual(big.parse(",".repeat(1 << 20)).actions, []);
  assert.equal(big.parse(",".repeat(1 << 20)).invalid.length, 1);
});

test("config resolution names the problem", () => {
  class E extends Env {
    static DEFAULT_CONFIG = { size: 4, rate: 0.5, name: "x" };
    static PRESETS = { big: { size: 8 } };
  }
  assert.deepEqual(resolveConfig(E, '{"preset": "big", "rate": 1}'), { size: 8, rate: 1, name: "x" });
  for (const [text, needle] of [['{"sise": 3}', "sise"], ['{"size": 2.5}', "size"], ['{"preset": "huge"}', "huge"], ["[1]", "object"], ["{", "JSON"]]) {
    assert.throws(() => resolveConfig(E, text), (e) => e instanceof BadConfig && e.message.includes(needle));
  }
});

test("the export glue keeps the episode protocol and types its errors", () => {
  class E extends Env {
    reset() {
      return { text: "start", images: [] };
    }
    step() {
      return { done: true };
    }
  }
  exportEnv(E);
  const inst = env.Environment.create("");
  assert.equal(inst.describeState(), "");
  assert.throws(() => inst.step("x"), (e) => e.payload.tag === "invalid-state");
  inst.reset(1n);
  assert.equal(inst.step("x").done, true);
  assert.throws(() => inst.step("x"), (e) => e.payload.tag === "invalid-state");
  assert.throws(() => env.Environment.create('{"x": 1}'), (e) => e.payload.tag === "bad-config");
});

test("words and drawing", () => {
  assert.equal(relativePosition([1, 1], [2, 3]), "2 rows below and 1 column to the right of you");
  assert.ok(!echo("<image>".repeat(100)).includes("<image>"));
  const c = new Canvas(4, 3, [1, 2, 3]);
  c.fillRect(-5, -5, 6, 6, [9, 9, 9]);
  const img = c.intoImage();
  assert.deepEqual([img.rgb.length, [...img.rgb.slice(0, 3)], [...img.rgb.slice(-3)]], [36, [9, 9, 9], [1, 2, 3]]);
});
