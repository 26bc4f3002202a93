// Write a vagen environment in JavaScript.
//
// Subclass `Env` (only `reset` and `step` are required), call `exportEnv(YourEnv)`, and
// build with `sdk/js/build.sh YOUR_ENV_DIR OUT.wasm` (your `app.js` imports from "vagen").
// Helpers mirror the Rust SDK: ActionSpec, a seeded Rng, gridText, Canvas, turnFeedback,
// relativePosition, echo. Seeds arrive as BigInt; everything random in an episode must
// come from `new Rng(seed)`.

export class EnvError extends Error {}
export class BadConfig extends EnvError {}
export class InvalidState extends EnvError {}
export class Failed extends EnvError {}

export class Observation {
  constructor(text = "") {
    this.text = text;
    this.images = [];
  }
  /** Appends an image ({width, height, rgb: Uint8Array}) and its "<image>" marker. */
  pushImage(image) {
    this.text += "<image>";
    this.images.push(image);
  }
}

/** A step result with every field defaulted. */
export function makeStep(fields = {}) {
  return {
    observation: new Observation(),
    reward: 0,
    done: false,
    success: false,
    validActions: 0,
    effectiveActions: 0,
    metrics: [],
    ...fields,
  };
}

export class Env {
  static NAME = "";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  /** Every option with its default; a config may set only these, with the same types. */
  static DEFAULT_CONFIG = {};
  /** Named partial configs: {"preset": "NAME", ...} starts from one. */
  static PRESETS = {};
  /** modalities, actionNames, actionSeparator, maxActionsPerTurn, defaultMaxTurns, hasOracle */
  static manifest() {
    return {};
  }
  /** Check values here; throw BadConfig naming the field. */
  constructor(config) {
    this.config = config;
  }
  reset(seed) {
    throw new Failed("reset is not implemented");
  }
  step(answer) {
    throw new Failed("step is not implemented");
  }
  systemPrompt() {
    return "";
  }
  describeState() {
    return "";
  }
  /** An expert answer, or undefined; set hasOracle in the manifest when provided. */
  oracle() {
    return undefined;
  }
}

let exported = null;

export function exportEnv(cls) {
  if (!(cls.prototype instanceof Env)) throw new TypeError("exportEnv takes a subclass of Env");
  exported = cls;
  return cls;
}

function envClass() {
  if (!exported) throw new Failed("no environment exported: call exportEnv(YourEnv) in app.js");
  return exported;
}

/** defaults ← preset ← the caller's fields, as the Rust SDK does. */
export function resolveConfig(cls, text) {
  let given;
  try {
    given = text.trim() ? JSON.parse(text) : {};
  } catch (e) {
    throw new BadConfig(`not valid JSON: ${e.message}`);
  }
  if (given === null || typeof given !== "object" || Array.isArray(given)) {
    throw new BadConfig("expected a JSON object");
  }
  const config = JSON.parse(JSON.stringify(cls.DEFAULT_CONFIG));
  if ("preset" in given) {
    const { preset, ...rest } = given;
    if (!(preset in cls.PRESETS)) {
      throw new BadConfig(`unknown preset \`${preset}\` (known: ${Object.keys(cls.PRESETS).join(", ")})`);
    }
    given = { ...cls.PRESETS[preset], ...rest };
  }
  for (const [key, value] of Object.entries(given)) {
    if (!(key in config)) {
      throw new BadConfig(`unknown field \`${key}\`, expected one of ${Object.keys(config).join(", ")}`);
    }
    const want = typeof config[key];
    const ok =
      config[key] === null ||
      (want === "number" && Number.isInteger(config[key]) ? Number.isInteger(value) : typeof value === want);
    if (!ok) throw new BadConfig(`\`${key}\` must be ${Number.isInteger(config[key]) ? "an integer" : want}, got ${JSON.stringify(value)}`);
    config[key] = value;
  }
  return config;
}

// ---- helpers -------------------------------------------------------------------------

const MASK = (1n << 64n) - 1n;

/** SplitMix64: the same stream as the Python and C SDKs' Rng. */
export class Rng {
  constructor(seed) {
    this.state = BigInt(seed) & MASK;
  }
  nextU64() {
    this.state = (this.state + 0x9e3779b97f4a7c15n) & MASK;
    let z = this.state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & MASK;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & MASK;
    return z ^ (z >> 31n);
  }
  /** Uniform in 0..n (a Number) without modulo bias. */
  below(n) {
    if (n <= 0) throw new RangeError("Rng.below(0)");
    const big = BigInt(n);
    const zone = MASK - (MASK % big);
    for (;;) {
      const x = this.nextU64();
      if (x < zone) return Number(x % big);
    }
  }
  unit() {
    return Number(this.nextU64() >> 11n) / 2 ** 53;
  }
  chance(p) {
    return this.unit() < p;
  }
  choose(items) {
    return items.length ? items[this.below(items.length)] : undefined;
  }
  shuffle(items) {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.below(i + 1);
      [items[i], items[j]] = [items[j], items[i]];
    }
  }
}

/** ActionSpec's default maxAnswerLen (UTF-16 units, as `length` counts): far above any list of action names. */
export const MAX_ANSWER_LEN = 1024;

/** What stands for an over-long answer among the invalid pieces (the feedback echoes it). */
export function tooLong(length, most) {
  return `(an answer of ${length} characters; at most ${most} are read)`;
}

export class ActionSpec {
  constructor(names, separator = ",", maxPerTurn = 1, { ignoreCase = true, stopAtInvalid = true, maxAnswerLen = MAX_ANSWER_LEN } = {}) {
    Object.assign(this, { names, separator, maxPerTurn, ignoreCase, stopAtInvalid, maxAnswerLen });
  }
  /** {actions: indices, invalid: pieces, ignored: count} */
  parse(answer) {
    const out = { actions: [], invalid: [], ignored: 0 };
    // Refused before the split: a rambling model or a fuzzer's megabyte costs one length
    // check, not an array of a million pieces.
    if (answer.length > this.maxAnswerLen) {
      out.invalid.push(tooLong(answer.length, this.maxAnswerLen));
      return out;
    }
    const pieces = (this.separator ? answer.split(this.separator) : [answer]).map((p) => p.trim()).filter((p) => p);
    const taken = pieces.slice(0, this.maxPerTurn);
    for (let i = 0; i < taken.length; i++) {
      const index = this.names.findIndex((n) => (this.ignoreCase ? n.toLowerCase() === taken[i].toLowerCase() : n === taken[i]));
      if (index < 0) {
        out.invalid.push(taken[i]);
        if (this.stopAtInvalid) {
          out.ignored = pieces.length - i - 1;
          return out;
        }
      } else {
        out.actions.push(index);
      }
    }
    out.ignored = pieces.length - taken.length;
    return out;
  }
  join(actions) {
    const sep = this.separator === "," ? ", " : ` ${this.separator} `;
    return actions.map((i) => this.names[i]).join(sep);
  }
}

export function gridText(width, height, cell) {
  const rows = [];
  for (let y = 0; y < height; y++) {
    let row = "";
    for (let x = 0; x < width; x++) row += cell(x, y);
    rows.push(row);
  }
  return rows.join("\n");
}

export class Canvas {
  constructor(width, height, background = [0, 0, 0]) {
    this.width = width;
    this.height = height;
    this.rgb = new Uint8Array(width * height * 3);
    this.fillRect(0, 0, width, height, background);
  }
  fillRect(x, y, w, h, color) {
    const [x0, y0] = [Math.max(x, 0), Math.max(y, 0)];
    const [x1, y1] = [Math.min(x + w, this.width), Math.min(y + h, this.height)];
    for (let yy = y0; yy < y1; yy++) {
      for (let xx = x0; xx < x1; xx++) this.rgb.set(color, (yy * this.width + xx) * 3);
    }
  }
  intoImage() {
    return { width: this.width, height: this.height, rgb: this.rgb };
  }
}

/** A piece of the agent's answer, safe to show back (64 characters, "<image>" defused). */
export function echo(answer) {
  // The first 64 code points only: a megabyte answer is not copied into an array.
  let out = "";
  let n = 0;
  for (const ch of answer) {
    if (n++ === 64) return `${out.replaceAll("<image>", "[image]")}…`;
    out += ch;
  }
  return out.replaceAll("<image>", "[image]");
}

export function turnFeedback(executed, blocked, blockedBy, invalid, valid) {
  let s = executed.length ? `Executed actions: ${executed.join(", ")}.` : "No valid action was executed.";
  if (blocked) s += ` ${blocked} of them ${blockedBy}.`;
  if (invalid !== undefined) s += ` Invalid action "${echo(invalid)}": valid actions are ${valid.join(", ")}.`;
  return s;
}

export function relativePosition(from, to) {
  const [dx, dy] = [to[0] - from[0], to[1] - from[1]];
  const count = (n, w) => `${Math.abs(n)} ${w}${Math.abs(n) === 1 ? "" : "s"}`;
  const v = dy === 0 ? null : `${count(dy, "row")} ${dy < 0 ? "above" : "below"}`;
  const h = dx === 0 ? null : `${count(dx, "column")} to the ${dx < 0 ? "left" : "right"}`;
  if (!v && !h) return "where you are";
  if (!h) return `${v} you (same column)`;
  if (!v) return `${h} of you (same row)`;
  return `${v} and ${h} of you`;
}

// ---- the component's `vagen:env/env` export (the build's entry re-exports it) ------------

function wireError(e) {
  const tag = e instanceof BadConfig ? "bad-config" : e instanceof InvalidState ? "invalid-state" : "failed";
  const message = e instanceof EnvError ? e.message : `${e && e.name ? e.name : "Error"}: ${e && e.message ? e.message : e}`;
  // componentize-js turns a thrown value's `payload` into the result's error.
  const err = new Error(message);
  err.payload = { tag, val: message };
  return err;
}

function guard(f) {
  try {
    return f();
  } catch (e) {
    throw wireError(e);
  }
}

function wireObservation(o) {
  return {
    text: o.text,
    images: o.images.map((i) => ({ width: i.width, height: i.height, rgb: Uint8Array.from(i.rgb) })),
  };
}

export const env = {
  getManifest() {
    const cls = envClass();
    const m = cls.manifest();
    return {
      name: m.name || cls.NAME || cls.name.toLowerCase(),
      version: m.version || cls.VERSION,
      description: m.description || cls.DESCRIPTION,
      modalities: m.modalities || ["text"],
      actionNames: m.actionNames || [],
      actionSeparator: m.actionSeparator || ",",
      maxActionsPerTurn: m.maxActionsPerTurn || 1,
      defaultMaxTurns: m.defaultMaxTurns || 10,
      defaultConfig: JSON.stringify(cls.DEFAULT_CONFIG),
      hasOracle: Boolean(m.hasOracle),
    };
  },
  Environment: class Environment {
    static create(config) {
      return guard(() => {
        const cls = envClass();
        const instance = new Environment();
        instance.env = new cls(resolveConfig(cls, config));
        instance.phase = "before-reset";
        return instance;
      });
    }
    systemPrompt() {
      return this.env.systemPrompt();
    }
    reset(seed) {
      return guard(() => {
        const obs = this.env.reset(seed);
        this.phase = "running";
        return wireObservation(obs);
      });
    }
    step(answer) {
      return guard(() => {
        if (this.phase === "before-reset") throw new InvalidState("step called before reset");
        if (this.phase === "done") throw new InvalidState("step called after the episode ended; call reset");
        const s = makeStep(this.env.step(answer));
        if (s.done) this.phase = "done";
        return {
          observation: wireObservation(s.observation),
          reward: s.reward,
          done: s.done,
          success: s.success,
          validActions: s.validActions,
          effectiveActions: s.effectiveActions,
          metrics: s.metrics.map(([name, value]) => ({ name, value })),
        };
      });
    }
    describeState() {
      // Nothing to describe before the first episode; the author's code never sees that call.
      return this.phase === "before-reset" ? "" : this.env.describeState();
    }
    oracle() {
      return this.phase === "running" ? (this.env.oracle() ?? undefined) : undefined;
    }
  },
};

// ---- reward functions -------------------------------------------------------------------
// Subclass Reward (only score is required), call exportReward(YourReward) in app.js, and build
// with the same sdk/js/build.sh: an app that exports a reward becomes a `vagen:env/reward`
// component (the glue is vagen-reward.js).

// The judge gave no answer to one request (the reason is the message).
export class JudgeFailed extends Error {}

// A reward function: score(turns, judge) returns one entry per turn, {reward, metrics:
// [[name, value], ...]} or a string saying why that turn could not be scored (the host counts
// it, never reads it as 0). judge.complete(requests) answers [{messages: [{role, content:
// [text or {width, height, rgb}]}], maxTokens, temperature}] with a string or a JudgeFailed
// per request.
export class Reward {
  static NAME = "";
  static VERSION = "0.1.0";
  static DESCRIPTION = "";
  static DEFAULT_CONFIG = {};
  static PRESETS = {};
  constructor(config) {
    this.config = config;
  }
  score(_turns, _judge) {
    throw new Failed("a Reward must implement score(turns, judge)");
  }
}

let exportedReward = null;

export function exportReward(cls) {
  if (!(cls.prototype instanceof Reward)) throw new TypeError("exportReward takes a subclass of Reward");
  exportedReward = cls;
}

export function rewardClass() {
  if (!exportedReward) throw new Failed("no reward exported: call exportReward(YourReward)");
  return exportedReward;
}
