"""A reward function in Python: pays a turn for thinking briefly, and (with `ask_judge`)
for an answer the judge calls sensible. Build it with

    sdk/python/build.sh examples/concise-py target/rewards/concise-py.wasm

and name it in a training config as `[[reward]] plugin = "target/rewards/concise-py.wasm"`.
"""

import vagen


@vagen.export_reward
class Concise(vagen.Reward):
    NAME = "concise"
    DESCRIPTION = "Pays for short thinking; optionally asks the judge whether the answer is sensible."
    DEFAULT_CONFIG = {"budget_words": 40, "penalty_per_word": 0.01, "ask_judge": False, "judge_weight": 0.5}

    def __init__(self, config):
        if config["budget_words"] < 0 or config["penalty_per_word"] < 0:
            raise vagen.BadConfig("budget_words and penalty_per_word must be >= 0")
        super().__init__(config)

    def score(self, turns, judge):
        c = self.config
        scores = []
        for t in turns:
            words = len((t.think or "").split())
            over = max(0, words - c["budget_words"])
            scores.append(vagen.TurnScore(-c["penalty_per_word"] * over, [("think_words", float(words))]))
        if c["ask_judge"]:
            asked = [i for i, t in enumerate(turns) if t.answer]
            requests = [
                vagen.JudgeRequest(
                    [vagen.Message("user", [f"State: {turns[i].state_before}\nMove: {turns[i].answer}\n"
                                            "Is this move sensible? Answer YES or NO."])],
                    max_tokens=4,
                )
                for i in asked
            ]
            for i, answer in zip(asked, judge.complete(requests)):
                if isinstance(answer, vagen.JudgeFailed):
                    scores[i] = f"the judge failed: {answer}"
                elif answer.strip().upper().startswith("YES"):
                    scores[i].reward += c["judge_weight"]
                    scores[i].metrics.append(("sensible", 1.0))
                else:
                    scores[i].metrics.append(("sensible", 0.0))
        return scores
