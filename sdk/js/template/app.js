// A complete environment to start from: walk along a corridor to the flag.
import { ActionSpec, BadConfig, Env, Observation, Rng, exportEnv, makeStep, relativePosition, turnFeedback } from "vagen";

const ACTIONS = ["Left", "Right"];

class Corridor extends Env {
  static NAME = "corridor-js";
  static DESCRIPTION = "Walk along a corridor to the flag.";
  static DEFAULT_CONFIG = { length: 7, max_actions_per_episode: 20 };

  static manifest() {
    return { actionNames: ACTIONS, maxActionsPerTurn: 2, defaultMaxTurns: 10, hasOracle: true };
  }

  constructor(config) {
    super(config);
    if (config.length < 3 || config.length > 50) throw new BadConfig(`length must be in 3..=50, got ${config.length}`);
    this.spec = new ActionSpec(ACTIONS, ",", 2);
  }

  reset(seed) {
    const rng = new Rng(seed);
    const n = this.config.length;
    this.me = rng.below(n);
    do this.flag = rng.below(n);
    while (this.flag === this.me);
    this.taken = 0;
    return new Observation(this.picture());
  }

  picture() {
    return Array.from({ length: this.config.length }, (_, i) => (i === this.me ? "P" : i === this.flag ? "F" : "_")).join("");
  }

  step(answer) {
    const parsed = this.spec.parse(answer);
    const step = makeStep();
    for (const a of parsed.actions) {
      if (step.success || this.taken >= this.config.max_actions_per_episode) break;
      this.taken++;
      step.validActions++;
      const target = this.me + (a === 1 ? 1 : -1);
      if (target >= 0 && target < this.config.length) {
        this.me = target;
        step.effectiveActions++;
      }
      step.success = this.me === this.flag;
    }
    step.reward = step.success ? 10 : 0;
    step.done = step.success || this.taken >= this.config.max_actions_per_episode;
    const executed = parsed.actions.slice(0, step.validActions).map((a) => ACTIONS[a]);
    const feedback = turnFeedback(executed, step.validActions - step.effectiveActions, "hit the wall", parsed.invalid[0], ACTIONS);
    step.observation = new Observation(`${feedback}\n${this.picture()}`);
    return step;
  }

  systemPrompt() {
    return "P is you, F the flag, _ floor. Walk onto the flag. Actions: Left, Right (up to 2, separated by ',').";
  }

  describeState() {
    return relativePosition([this.me, 0], [this.flag, 0]);
  }

  oracle() {
    return this.flag > this.me ? "Right" : "Left";
  }
}

exportEnv(Corridor);
