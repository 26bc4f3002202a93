"""A complete environment to start from: walk along a corridor to the flag."""

import vagen

ACTIONS = ["Left", "Right"]


@vagen.export_env
class Corridor(vagen.Env):
    NAME = "corridor-py"
    DESCRIPTION = "Walk along a corridor to the flag."
    DEFAULT_CONFIG = {"length": 7, "max_actions_per_episode": 20}

    @classmethod
    def manifest(cls):
        return vagen.Manifest(action_names=ACTIONS, max_actions_per_turn=2, default_max_turns=10, has_oracle=True)

    def __init__(self, config):
        if not 3 <= config["length"] <= 50:
            raise vagen.BadConfig(f"length must be in 3..=50, got {config['length']}")
        self.config = config
        self.spec = vagen.ActionSpec(ACTIONS, ",", 2)

    def reset(self, seed):
        rng = vagen.Rng(seed)
        n = self.config["length"]
        self.me, self.flag = rng.below(n), rng.below(n)
        while self.flag == self.me:
            self.flag = rng.below(n)
        self.taken = 0
        return vagen.Observation(self.picture())

    def picture(self):
        return "".join("P" if i == self.me else "F" if i == self.flag else "_" for i in range(self.config["length"]))

    def step(self, answer):
        parsed = self.spec.parse(answer)
        step = vagen.Step()
        for a in parsed.actions:
            if step.success or self.taken >= self.config["max_actions_per_episode"]:
                break
            self.taken += 1
            step.valid_actions += 1
            target = self.me + (1 if a == 1 else -1)
            if 0 <= target < self.config["length"]:
                self.me = target
                step.effective_actions += 1
            step.success = self.me == self.flag
        step.reward = 10.0 if step.success else 0.0
        step.done = step.success or self.taken >= self.config["max_actions_per_episode"]
        executed = [ACTIONS[a] for a in parsed.actions[: step.valid_actions]]
        feedback = vagen.turn_feedback(executed, step.valid_actions - step.effective_actions, "hit the wall",
                                       parsed.invalid[0] if parsed.invalid else None, ACTIONS)
        step.observation = vagen.Observation(feedback + "\n" + self.picture())
        return step

    def system_prompt(self):
        return "P is you, F the flag, _ floor. Walk onto the flag. Actions: Left, Right (up to 2, separated by ',')."

    def describe_state(self):
        return vagen.relative_position((self.me, 0), (self.flag, 0))

    def oracle(self):
        return "Right" if self.flag > self.me else "Left"
