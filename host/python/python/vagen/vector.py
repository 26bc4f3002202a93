"""Many instances of one plugin as a `gymnasium.vector.VectorEnv`, stepped on native threads."""

import json

import numpy as np
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode
from gymnasium.vector import VectorEnv as GymVectorEnv
from gymnasium.vector.utils import batch_space

from . import _plugin
from ._native import InvalidState


class VectorEnv(GymVectorEnv):
    """`num_envs` instances of one plugin config. Each `step` runs every instance's call in
    parallel on native threads with the GIL released.

    Behaves as `gymnasium.vector.SyncVectorEnv` over `vagen.make(...)` instances does (the
    tests compare them): next-step autoreset (an instance that ended is reset by the next
    `step`, which ignores its action and returns the reset observation with reward 0),
    `reset(seed=s)` seeds instance i with `s + i`, later resets draw each instance's seed
    from its own generator. Infos are batched with Gymnasium's `_key` masks and hold what
    `Env`'s do (`extras=False` leaves out `describe_state` and `oracle`, two plugin calls
    per instance and step).
    """

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array", "ansi"]}

    def __init__(
        self,
        path,
        num_envs,
        config=None,
        limits=None,
        *,
        allow_native=False,
        render_mode=None,
        max_turns=None,
        extras=True,
    ):
        if num_envs < 1:
            raise ValueError(f"num_envs must be at least 1, not {num_envs}")
        self.plugin = _plugin.load(path, limits, allow_native)
        self.manifest = json.loads(self.plugin.manifest())
        self.num_envs = num_envs
        self._pool = self.plugin.create_pool(_plugin.config_json(config), num_envs)
        self.max_turns = int(max_turns or self.plugin.max_turns())
        self.extras = extras
        self.system_prompt = self._pool.system_prompt()
        self._rngs = [None] * num_envs
        self._rng_seeds = [None] * num_envs
        self._last_obs = None
        self._turns = np.zeros(num_envs, dtype=np.int64)
        self._autoreset = np.zeros(num_envs, dtype=np.bool_)
        self._seeds = [0] * num_envs
        text_limit = json.loads(self.plugin.limits())["max_text_bytes"]
        first = self._run([("reset", 0)] * num_envs)[0][1]
        self._layout = _plugin.Layout(text_limit, first[1])
        self.single_observation_space = self._layout.space
        self.single_action_space = _plugin.AnyText(text_limit)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        modes = ["rgb_array", "ansi"] if self._layout.shapes else ["ansi"]
        self.metadata = {**self.metadata, "render_modes": modes}
        if render_mode is not None and render_mode not in modes:
            raise ValueError(f"render_mode must be one of {modes} for this config, not {render_mode!r}")
        self.render_mode = render_mode

    def render(self):
        """Each member's frame, as `SyncVectorEnv` gives them: its observation's (first)
        image with "rgb_array", its text with "ansi"; `None` before the first reset or
        without a render mode."""
        if self.render_mode is None or self._last_obs is None:
            return None
        if self.render_mode == "ansi":
            return tuple(o["text"] for o in self._last_obs)
        return tuple(o["image"] if "image" in o else o["images"][0] for o in self._last_obs)

    def close_extras(self, **kwargs):
        """Releases every instance and its sandbox; the vector env cannot be used after."""
        self._pool = None

    def reset(self, *, seed=None, options=None):
        """Resets every instance, or with `options={"reset_mask": mask}` (a bool array, one
        per instance) only the masked ones: the others keep their episode and observation."""
        # The base class seeds the vector env's own generator from one int; a list seeds
        # the members only.
        super().reset(seed=seed if seed is None or isinstance(seed, int) else None)
        if seed is None:
            seeds = [None] * self.num_envs
        elif isinstance(seed, int):
            seeds = [seed + i for i in range(self.num_envs)]
        else:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"{len(seeds)} seeds for {self.num_envs} envs")
        mask = np.ones(self.num_envs, dtype=np.bool_)
        if options is not None and "reset_mask" in options:
            mask = np.asarray(options["reset_mask"])
            if mask.shape != (self.num_envs,):
                raise ValueError(f"options['reset_mask'] must have shape ({self.num_envs},), got {mask.shape}")
            if mask.dtype != np.bool_:
                raise ValueError(f"options['reset_mask'] must be a bool array, got dtype {mask.dtype}")
            if not mask.any():
                raise ValueError("options['reset_mask'] selects no instance")
            if self._last_obs is None and not mask.all():
                raise ValueError("the first reset must reset every instance")
        ops = [("reset", self._plugin_seed(i, s)) if mask[i] else ("skip", None) for i, s in enumerate(seeds)]
        results = self._run(ops)
        obs, infos = [], []
        for i, (what, raw, extra) in enumerate(results):
            if what == "skip":
                obs.append(self._last_obs[i])
                infos.append(None)
                continue
            self._turns[i] = 0
            self._autoreset[i] = False
            obs.append(self._layout.observation(raw))
            infos.append(self._reset_info(i, extra))
        self._last_obs = obs
        return self._batch(obs), batch_infos(self.num_envs, infos)

    @property
    def np_random_seed(self):
        """Each instance's generator seed, as `SyncVectorEnv` reports them."""
        return tuple(self._rng_seeds)

    def step(self, actions):
        if isinstance(actions, str) or not hasattr(actions, "__len__"):
            raise TypeError(f"a vector env steps with one action per instance, not {type(actions).__name__}")
        if len(actions) != self.num_envs:
            raise ValueError(f"{len(actions)} actions for {self.num_envs} envs")
        ops = []
        for i, action in enumerate(actions):
            ops.append(("reset", self._plugin_seed(i, None)) if self._autoreset[i] else ("step", str(action)))
        results = self._run(ops)
        obs = []
        rewards = np.zeros(self.num_envs, dtype=np.float64)
        terminations = np.zeros(self.num_envs, dtype=np.bool_)
        truncations = np.zeros(self.num_envs, dtype=np.bool_)
        infos = []
        for i, (what, result, extra) in enumerate(results):
            if what == "reset":
                self._turns[i] = 0
                obs.append(self._layout.observation(result))
                infos.append(self._reset_info(i, extra))
                continue
            raw, reward, done, success, valid, effective, metrics = result
            self._turns[i] += 1
            obs.append(self._layout.observation(raw))
            rewards[i] = reward
            terminations[i] = bool(done)
            truncations[i] = not done and self._turns[i] >= self.max_turns
            info = _plugin.step_info(success, valid, effective, metrics, self._turns[i])
            self._add_extras(info, extra)
            infos.append(info)
        self._autoreset = terminations | truncations
        self._last_obs = obs
        return self._batch(obs), rewards, terminations, truncations, batch_infos(self.num_envs, infos)

    def _plugin_seed(self, i, seed):
        """Instance i's plugin seed: `seed` as given (its generator reseeded, as
        `Env.reset(seed=...)` does), or drawn from its generator."""
        if seed is not None or self._rngs[i] is None:
            self._rngs[i], self._rng_seeds[i] = seeding.np_random(seed)
        if seed is None:
            seed = int(self._rngs[i].integers(0, 2**63))
        self._seeds[i] = seed
        return seed

    def _reset_info(self, i, extra):
        info = {"system_prompt": self.system_prompt, "seed": self._seeds[i], **_plugin.reset_info()}
        self._add_extras(info, extra)
        return info

    def _add_extras(self, info, extra):
        if extra is not None:
            info["describe_state"] = extra[0]
            if self.manifest["has_oracle"]:
                info["oracle"] = extra[1]

    def _run(self, ops):
        if self._pool is None:
            raise InvalidState("this vector env is closed")
        results = self._pool.run(ops, self.extras, self.extras and self.manifest["has_oracle"])
        for i, (what, result, _) in enumerate(results):
            if what == "error":
                # The instance was re-created when it faulted: the vector env must be reset.
                self._autoreset[:] = False
                result.env_index = i
                raise result
        return results

    def _batch(self, obs):
        batched = {"text": tuple(o["text"] for o in obs)}
        if "image" in self.single_observation_space.spaces:
            batched["image"] = np.stack([o["image"] for o in obs])
        elif "images" in self.single_observation_space.spaces:
            batched["images"] = tuple(np.stack([o["images"][k] for o in obs]) for k in range(len(obs[0]["images"])))
        return batched


def batch_infos(n, infos):
    """The members' info dicts batched as `VectorEnv._add_info` batches them one by one
    (arrays typed by the first member that has a key, `_key` masks, nested dicts
    recursively; `None` for a member without one), built a key at a time."""
    keys = {}
    for info in infos:
        if info is not None:
            keys.update(dict.fromkeys(info))
    out = {}
    for key in keys:
        present = [i for i, info in enumerate(infos) if info is not None and key in info]
        first = infos[present[0]][key]
        if isinstance(first, dict):
            array = batch_infos(n, [info.get(key) if info is not None else None for info in infos])
        else:
            if type(first) in (int, float, bool) or issubclass(type(first), np.number):
                array = np.zeros(n, dtype=type(first))
            elif isinstance(first, np.ndarray):
                array = np.zeros((n, *first.shape), dtype=first.dtype)
            else:
                array = np.full(n, fill_value=None, dtype=object)
            for i in present:
                array[i] = infos[i][key]
        mask = np.zeros(n, dtype=np.bool_)
        mask[present] = True
        out[key], out[f"_{key}"] = array, mask
    return out


def make_vec(path, num_envs, config=None, limits=None, **kwargs):
    """`num_envs` instances of a plugin as one Gymnasium vector env (see `VectorEnv`)."""
    return VectorEnv(path, num_envs, config, limits, **kwargs)
