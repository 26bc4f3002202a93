"""Maze with a key: reach the exit; a locked door on the way opens only with the key.

Written in Python with the vagen SDK; build with
`sdk/python/build.sh examples/maze-keys-py target/examples/maze-keys-py.wasm`.
Mazes are perfect (one path between any two cells), drawn from the seed by a randomised
depth-first search; the door sits on the path from the start to the exit, the key on a
dead end the start reaches without passing the door.
"""

from collections import deque

import vagen

ACTIONS = ["Up", "Down", "Left", "Right"]
MOVES = {0: (0, -1), 1: (0, 1), 2: (-1, 0), 3: (1, 0)}
WALL, FLOOR, KEY, DOOR, EXIT = "#", "_", "K", "D", "E"
COLOURS = {WALL: (60, 60, 70), FLOOR: (225, 225, 215), KEY: (230, 190, 30), DOOR: (140, 80, 30), EXIT: (40, 170, 70)}


@vagen.export_env
class MazeKeys(vagen.Env):
    NAME = "maze-keys-py"
    DESCRIPTION = "Maze with a key and a locked door, written in Python."
    DEFAULT_CONFIG = {
        "size": 9,
        "max_actions_per_turn": 3,
        "max_actions_per_episode": 80,
        "key_reward": 1.0,
        "exit_reward": 10.0,
        "image": False,
    }
    PRESETS = {"small": {"size": 7}, "large": {"size": 13, "max_actions_per_episode": 200}}

    @classmethod
    def manifest(cls):
        return vagen.Manifest(
            modalities=("text", "image"),
            action_names=ACTIONS,
            max_actions_per_turn=3,
            default_max_turns=30,
            has_oracle=True,
        )

    def __init__(self, config):
        size = config["size"]
        if size < 5 or size > 31 or size % 2 == 0:
            raise vagen.BadConfig(f"size must be odd and in 5..=31, got {size}")
        if config["max_actions_per_turn"] < 1 or config["max_actions_per_episode"] < 1:
            raise vagen.BadConfig("max_actions_per_turn and max_actions_per_episode must be at least 1")
        self.config = config
        self.spec = vagen.ActionSpec(ACTIONS, ",", config["max_actions_per_turn"])
        self.reset(0)

    # -- the maze ---------------------------------------------------------------------

    def _generate(self, seed):
        n = self.config["size"]
        rng = vagen.Rng(seed)
        grid = [[WALL] * n for _ in range(n)]
        start = (1 + 2 * rng.below(n // 2), 1 + 2 * rng.below(n // 2))
        grid[start[1]][start[0]] = FLOOR
        stack = [start]
        while stack:
            x, y = stack[-1]
            options = [(dx, dy) for dx, dy in ((0, -2), (0, 2), (-2, 0), (2, 0))
                       if 0 < x + dx < n - 1 and 0 < y + dy < n - 1 and grid[y + dy][x + dx] == WALL]
            if not options:
                stack.pop()
                continue
            dx, dy = rng.choose(options)
            grid[y + dy // 2][x + dx // 2] = FLOOR
            grid[y + dy][x + dx] = FLOOR
            stack.append((x + dx, y + dy))
        self.grid = grid
        self.player = start
        # The exit: the cell farthest from the start.
        dist, parent = self._bfs(start, lambda c: grid[c[1]][c[0]] != WALL)
        exit_ = max(dist, key=lambda c: (dist[c], c[1], c[0]))
        path = [exit_]
        while path[-1] != start:
            path.append(parent[path[-1]])
        path.reverse()
        # The door: a corridor cell on that path, past the first third.
        corridor = [c for c in path[max(2, len(path) // 3):-1]]
        door = corridor[rng.below(len(corridor))] if corridor else path[-2]
        # The key: a dead end (or any cell) the start reaches without the door.
        reach, _ = self._bfs(start, lambda c: grid[c[1]][c[0]] != WALL and c != door)
        ends = sorted(c for c in reach if c != start and self._open_sides(c) == 1)
        spots = ends or sorted(c for c in reach if c != start)
        key = spots[rng.below(len(spots))]
        grid[door[1]][door[0]] = DOOR
        grid[key[1]][key[0]] = KEY
        grid[exit_[1]][exit_[0]] = EXIT

    def _open_sides(self, c):
        return sum(self.grid[c[1] + dy][c[0] + dx] != WALL for dx, dy in MOVES.values())

    def _bfs(self, start, passable):
        dist, parent, queue = {start: 0}, {}, deque([start])
        while queue:
            c = queue.popleft()
            for dx, dy in MOVES.values():
                d = (c[0] + dx, c[1] + dy)
                if d not in dist and passable(d):
                    dist[d] = dist[c] + 1
                    parent[d] = c
                    queue.append(d)
        return dist, parent

    def _find(self, tile):
        return next(((x, y) for y, row in enumerate(self.grid) for x, t in enumerate(row) if t == tile), None)

    # -- the episode ------------------------------------------------------------------

    def reset(self, seed):
        self._generate(seed)
        self.has_key = False
        self.actions_taken = 0
        return self._observe("")

    def step(self, answer):
        parsed = self.spec.parse(answer)
        step = vagen.Step()
        executed, blocked = [], 0
        for a in parsed.actions:
            if self.actions_taken >= self.config["max_actions_per_episode"] or step.success:
                break
            self.actions_taken += 1
            step.valid_actions += 1
            executed.append(ACTIONS[a])
            dx, dy = MOVES[a]
            nx, ny = self.player[0] + dx, self.player[1] + dy
            tile = self.grid[ny][nx]
            if tile == WALL or (tile == DOOR and not self.has_key):
                blocked += 1
                continue
            step.effective_actions += 1
            self.player = (nx, ny)
            if tile == KEY:
                self.has_key = True
                self.grid[ny][nx] = FLOOR
                step.reward += self.config["key_reward"]
            elif tile == DOOR:
                self.grid[ny][nx] = FLOOR
            elif tile == EXIT:
                step.success = True
                step.reward += self.config["exit_reward"]
        step.done = step.success or self.actions_taken >= self.config["max_actions_per_episode"]
        feedback = vagen.turn_feedback(executed, blocked, "were blocked by a wall or the locked door",
                                       parsed.invalid[0] if parsed.invalid else None, ACTIONS)
        if step.success:
            feedback += " You reached the exit: solved."
        elif step.done:
            feedback += " No actions are left in this episode."
        step.observation = self._observe(feedback)
        step.metrics = [("has-key", float(self.has_key))]
        return step

    def _cell(self, x, y):
        return "P" if (x, y) == self.player else self.grid[y][x]

    def _observe(self, feedback):
        n = self.config["size"]
        obs = vagen.Observation((feedback + "\n" if feedback else "") + "Current observation:\n")
        obs.text += vagen.grid_text(n, n, self._cell) + "\n"
        if self.config["image"]:
            tile = 16
            canvas = vagen.Canvas(n * tile, n * tile)
            for y in range(n):
                for x in range(n):
                    c = self._cell(x, y)
                    canvas.fill_rect(x * tile, y * tile, tile, tile, (30, 90, 220) if c == "P" else COLOURS[c])
            obs.push_image(canvas.into_image())
        return obs

    def system_prompt(self):
        c = self.config
        return (
            "You are in a maze seen from above.\n"
            f"Symbols: {WALL} wall, {FLOOR} floor, P you, {KEY} key, {DOOR} locked door, {EXIT} exit.\n"
            "Goal: reach the exit. The door on the way opens only once you carry the key; walk onto the key to take it.\n"
            f"Rewards: {c['key_reward']:+} for the key, {c['exit_reward']:+} at the exit.\n"
            f"Actions: {', '.join(ACTIONS)}. Up to {c['max_actions_per_turn']} per turn, separated by ','."
        )

    def describe_state(self):
        parts = [f"You {'carry' if self.has_key else 'do not carry'} the key."]
        for name, tile in (("key", KEY), ("door", DOOR), ("exit", EXIT)):
            at = self._find(tile)
            if at is not None:
                parts.append(f"The {name} is {vagen.relative_position(self.player, at)}.")
        return " ".join(parts)

    def oracle(self):
        # Shortest path over (position, carrying the key, door open).
        door = self._find(DOOR)
        start = (self.player, self.has_key)
        prev, queue = {start: None}, deque([start])
        while queue:
            state = queue.popleft()
            (x, y), key = state
            if self.grid[y][x] == EXIT:
                moves = []
                while prev[state] is not None:
                    state, a = prev[state]
                    moves.append(a)
                moves.reverse()
                return self.spec.join(moves[: self.spec.max_per_turn]) if moves else None
            for a, (dx, dy) in MOVES.items():
                nxt = (x + dx, y + dy)
                tile = self.grid[nxt[1]][nxt[0]]
                if tile == WALL or (nxt == door and not key):
                    continue
                s = (nxt, key or tile == KEY)
                if s not in prev:
                    prev[s] = (state, a)
                    queue.append(s)
        return None
