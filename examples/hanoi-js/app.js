// Tower of Hanoi, written in JavaScript with the vagen SDK: move every disk onto the goal
// peg, one at a time, never a larger disk on a smaller one. The start is a legal position
// drawn from the seed (each disk on a random peg, stacked by size); the oracle plays the
// optimal recursive strategy from any position.
// Build: sdk/js/build.sh examples/hanoi-js target/examples/hanoi-js.wasm

import { ActionSpec, BadConfig, Env, Observation, Rng, exportEnv, makeStep } from "vagen";

const PEGS = ["A", "B", "C"];
const ACTIONS = ["A->B", "A->C", "B->A", "B->C", "C->A", "C->B"];
const MOVES = [[0, 1], [0, 2], [1, 0], [1, 2], [2, 0], [2, 1]];

class Hanoi extends Env {
  static NAME = "hanoi-js";
  static DESCRIPTION = "Tower of Hanoi from a seeded position, written in JavaScript.";
  static DEFAULT_CONFIG = { disks: 3, max_actions_per_turn: 3, max_actions_per_episode: 40 };
  static PRESETS = { hard: { disks: 5, max_actions_per_episode: 100 } };

  static manifest() {
    return {
      modalities: ["text"],
      actionNames: ACTIONS,
      maxActionsPerTurn: 3,
      defaultMaxTurns: 15,
      hasOracle: true,
    };
  }

  constructor(config) {
    super(config);
    if (config.disks < 1 || config.disks > 8) throw new BadConfig(`disks must be in 1..=8, got ${config.disks}`);
    if (config.max_actions_per_turn < 1 || config.max_actions_per_episode < 1) {
      throw new BadConfig("max_actions_per_turn and max_actions_per_episode must be at least 1");
    }
    this.spec = new ActionSpec(ACTIONS, ",", config.max_actions_per_turn);
  }

  reset(seed) {
    const rng = new Rng(seed);
    // where[d]: the peg of disk d (0 is the smallest).
    do {
      this.where = Array.from({ length: this.config.disks }, () => rng.below(3));
      this.goal = rng.below(3);
    } while (this.solved());
    this.actionsTaken = 0;
    return this.observe("");
  }

  solved() {
    return this.where.every((p) => p === this.goal);
  }

  top(peg) {
    const d = this.where.indexOf(peg);
    return d < 0 ? undefined : d;
  }

  step(answer) {
    const parsed = this.spec.parse(answer);
    const step = makeStep();
    const done = [];
    for (const a of parsed.actions) {
      if (this.actionsTaken >= this.config.max_actions_per_episode || step.success) break;
      this.actionsTaken++;
      step.validActions++;
      const [from, to] = MOVES[a];
      const disk = this.top(from);
      const under = this.top(to);
      if (disk === undefined || (under !== undefined && under < disk)) {
        done.push(`${ACTIONS[a]} (not allowed: ${disk === undefined ? "that peg is empty" : "a larger disk cannot go on a smaller one"})`);
        continue;
      }
      this.where[disk] = to;
      step.effectiveActions++;
      done.push(ACTIONS[a]);
      step.success = this.solved();
    }
    step.done = step.success || this.actionsTaken >= this.config.max_actions_per_episode;
    let feedback = done.length ? `Executed: ${done.join(", ")}.` : "No valid action was executed.";
    if (parsed.invalid.length) feedback += ` Invalid action "${parsed.invalid[0].slice(0, 64)}": valid actions are ${ACTIONS.join(", ")}.`;
    if (step.success) {
      step.reward = 10;
      feedback += " Every disk is on the goal peg: solved.";
    } else if (step.done) {
      feedback += " No actions are left in this episode.";
    }
    step.observation = this.observe(feedback);
    step.metrics = [["disks-on-goal", this.where.filter((p) => p === this.goal).length]];
    return step;
  }

  pegsText() {
    // Disks listed bottom to top, 1 the smallest.
    return PEGS.map((name, p) => {
      const disks = [];
      for (let d = this.config.disks - 1; d >= 0; d--) if (this.where[d] === p) disks.push(d + 1);
      return `${name}: ${disks.length ? disks.join(" ") : "(empty)"}`;
    }).join("\n");
  }

  observe(feedback) {
    return new Observation(`${feedback ? feedback + "\n" : ""}Pegs (bottom to top):\n${this.pegsText()}\nGoal: every disk on peg ${PEGS[this.goal]}.\n`);
  }

  systemPrompt() {
    const c = this.config;
    return (
      `You are solving the Tower of Hanoi with ${c.disks} disks numbered by size (1 is the smallest) on pegs A, B and C.\n` +
      "Move one top disk at a time; a disk may never go on a smaller one. Goal: all disks on the goal peg.\n" +
      `Actions: ${ACTIONS.join(", ")} (from->to). Up to ${c.max_actions_per_turn} per turn, separated by ','. Reward: +10 when solved.`
    );
  }

  describeState() {
    const wrong = this.where.map((p, d) => [p, d]).filter(([p]) => p !== this.goal).map(([, d]) => d + 1);
    return `${this.config.disks - wrong.length} of ${this.config.disks} disks are on goal peg ${PEGS[this.goal]}` +
      (wrong.length ? `; still to move: ${wrong.join(", ")}.` : ".");
  }

  oracle() {
    // Optimal: to bring disks 0..k onto peg t, if disk k is on t bring 0..k-1 onto t;
    // otherwise bring 0..k-1 onto the third peg, move k, then continue.
    const where = [...this.where];
    const moves = [];
    const bring = (k, t) => {
      if (k < 0 || moves.length >= this.spec.maxPerTurn) return;
      if (where[k] === t) return bring(k - 1, t);
      const other = 3 - where[k] - t;
      bring(k - 1, other);
      if (moves.length >= this.spec.maxPerTurn) return;
      moves.push(MOVES.findIndex(([f, to]) => f === where[k] && to === t));
      where[k] = t;
      bring(k - 1, t);
    };
    bring(this.config.disks - 1, this.goal);
    return moves.length ? this.spec.join(moves) : undefined;
  }
}

exportEnv(Hanoi);
