// Codebreaker: find a hidden code of coloured pegs in a few guesses, Mastermind-like, with
// each peg's feedback given in place (right colour here, or not). Written from the JS
// template (sdk/js/template/app.js) as a new author would: unlike the reference envs, its
// words (colour names) are ones the embedded model's shipped tokenizer never saw.
import { ActionSpec, BadConfig, Env, Observation, Rng, echo, exportEnv, makeStep } from "vagen";

const COLOURS = ["red", "blue", "green", "yellow"];

class Codebreaker extends Env {
  static NAME = "codebreaker-js";
  static DESCRIPTION = "Guess a hidden code of coloured pegs; each guess tells which pegs are right.";
  static DEFAULT_CONFIG = { pegs: 3, max_guesses: 6 };

  static manifest() {
    return { actionNames: COLOURS, maxActionsPerTurn: 5, defaultMaxTurns: 6, hasOracle: true };
  }

  constructor(config) {
    super(config);
    if (config.pegs < 1 || config.pegs > 5) throw new BadConfig(`pegs must be in 1..=5, got ${config.pegs}`);
    if (config.max_guesses < 1 || config.max_guesses > 20) {
      throw new BadConfig(`max_guesses must be in 1..=20, got ${config.max_guesses}`);
    }
    this.spec = new ActionSpec(COLOURS, ",", config.pegs);
  }

  reset(seed) {
    const rng = new Rng(seed);
    this.code = Array.from({ length: this.config.pegs }, () => rng.below(COLOURS.length));
    // Per peg: the colour found there, or the colours ruled out.
    this.found = this.code.map(() => -1);
    this.ruledOut = this.code.map(() => []);
    this.guesses = 0;
    return new Observation(`A code of ${this.config.pegs} pegs is hidden.\n${this.knowledge()}`);
  }

  knowledge() {
    const lines = this.code.map((_, i) => {
      if (this.found[i] >= 0) return `${i + 1}: ${COLOURS[this.found[i]]}`;
      const not = this.ruledOut[i].map((c) => `not ${COLOURS[c]}`);
      return `${i + 1}: ${not.length ? not.join(", ") : "?"}`;
    });
    return `Guesses left: ${this.config.max_guesses - this.guesses}.\n${lines.join("\n")}`;
  }

  step(answer) {
    const parsed = this.spec.parse(answer);
    const step = makeStep();
    this.guesses++;
    step.done = this.guesses >= this.config.max_guesses;
    if (parsed.invalid.length || parsed.actions.length !== this.config.pegs) {
      const why = parsed.invalid.length ? `\`${echo(parsed.invalid[0])}\` is not a colour` : `it names ${parsed.actions.length} colours`;
      step.observation = new Observation(`Not a guess: ${why}; name ${this.config.pegs} of ${COLOURS.join(", ")}.\n${this.knowledge()}`);
      return step;
    }
    step.validActions = parsed.actions.length;
    const marks = parsed.actions.map((c, i) => {
      if (c === this.code[i]) {
        this.found[i] = c;
        return `${COLOURS[c]} is right`;
      }
      if (!this.ruledOut[i].includes(c)) this.ruledOut[i].push(c);
      return `${COLOURS[c]} is wrong`;
    });
    step.effectiveActions = parsed.actions.filter((c, i) => c === this.code[i]).length;
    // The whole code in one guess, as in Mastermind: finding pegs one by one is not enough.
    step.success = step.effectiveActions === this.config.pegs;
    step.reward = step.success ? 10 : 0;
    step.done = step.done || step.success;
    step.observation = new Observation(`${marks.join(", ")}.\n${this.knowledge()}`);
    return step;
  }

  systemPrompt() {
    return `Guess the hidden code: one colour per peg, ${COLOURS.join(", ")}, separated by ','.`;
  }

  describeState() {
    return this.knowledge();
  }

  // Each peg: its colour when found, else the first colour not yet ruled out there.
  oracle() {
    return this.code
      .map((_, i) => (this.found[i] >= 0 ? COLOURS[this.found[i]] : COLOURS.find((_, c) => !this.ruledOut[i].includes(c))))
      .join(", ");
  }
}

exportEnv(Codebreaker);
