// A reward function in JavaScript: asks the judge whether each turn's answer is a sensible
// move in the state it was made in, and pays `weight` for a YES. Build it with
//   sdk/js/build.sh examples/sensible-js target/rewards/sensible-js.wasm
// and name it in a training config as [[reward]] plugin = "target/rewards/sensible-js.wasm".
import { JudgeFailed, Reward, exportReward } from "vagen";

class Sensible extends Reward {
  static NAME = "sensible";
  static DESCRIPTION = "Asks the judge whether each answer is a sensible move; a YES pays `weight`.";
  static DEFAULT_CONFIG = { weight: 0.5, max_tokens: 4 };

  score(turns, judge) {
    const asked = turns.map((t, i) => [t, i]).filter(([t]) => t.answer !== undefined);
    const answers = judge.complete(
      asked.map(([t]) => ({
        messages: [{ role: "user", content: [`State: ${t.stateBefore}\nMove: ${t.answer}\nIs this move sensible? Answer YES or NO.`] }],
        maxTokens: this.config.max_tokens,
        temperature: 0,
      })),
    );
    const scores = turns.map(() => ({ reward: 0, metrics: [["asked", 0]] }));
    asked.forEach(([, i], k) => {
      const a = answers[k];
      if (a instanceof JudgeFailed) {
        scores[i] = `the judge failed: ${a.message}`;
        return;
      }
      const yes = a.trim().toUpperCase().startsWith("YES");
      scores[i] = { reward: yes ? this.config.weight : 0, metrics: [["asked", 1], ["yes", yes ? 1 : 0]] };
    });
    return scores;
  }
}

exportReward(Sensible);
