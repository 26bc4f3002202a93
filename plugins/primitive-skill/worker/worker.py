# The PrimitiveSkill worker: ManiSkill 3 for one plugin instance, driven over stdin/stdout
# in length-prefixed frames (src/worker.rs says the protocol). Run as
#     python -u -c "$(cat worker.py)" state|render
# The plugin carries this file inside the .so. Tasks, primitive skills and stage tests are
# VAGEN's PrimitiveSkill (vagen/env/primitive_skill/, README.md says what differs).
import json
import os
import struct
import sys
import traceback

PROTOCOL = 1
MODE = sys.argv[1] if len(sys.argv) > 1 else "state"

# Frames go out on a private copy of fd 1; whatever the libraries print goes to stderr.
_out = os.fdopen(os.dup(1), "wb")
os.dup2(2, 1)
_in = sys.stdin.buffer


def send(obj, rgb=None):
    body = json.dumps(obj).encode()
    _out.write(struct.pack("<I", len(body)) + body)
    if rgb is not None:
        _out.write(struct.pack("<I", len(rgb)) + rgb)
    _out.flush()


def receive():
    head = _in.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack("<I", head)
    return json.loads(_in.read(n))


import numpy as np  # noqa: E402
import sapien  # noqa: E402
import torch  # noqa: E402
import gymnasium as gym  # noqa: E402
import mani_skill  # noqa: E402
import mani_skill.envs  # noqa: E402,F401
from mani_skill.envs.sapien_env import BaseEnv  # noqa: E402
from mani_skill.envs.utils import randomization  # noqa: E402
from mani_skill.sensors.camera import CameraConfig  # noqa: E402
from mani_skill.utils import sapien_utils  # noqa: E402
from mani_skill.utils.building import actors  # noqa: E402
from mani_skill.utils.registration import register_env  # noqa: E402
from mani_skill.utils.scene_builder.table import TableSceneBuilder  # noqa: E402
from mani_skill.utils.structs.pose import Pose  # noqa: E402

torch.set_num_threads(1)


class _InertMaterial:
    """Stands in for sapien.render.RenderMaterial without a renderer: ManiSkill's builders
    create materials before checking for a render device, and fail without one."""

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


if MODE == "state":
    for module in list(sys.modules.values()):
        top = getattr(module, "__name__", "").split(".")[0]
        if top in ("sapien", "mani_skill") and "RenderMaterial" in getattr(module, "__dict__", {}):
            module.RenderMaterial = _InertMaterial

# VAGEN's workspace for the cube tasks (metres) and its camera.
WORKSPACE = ((-0.10, 0.15), (-0.2, 0.2), (0.01, 0.2))
RED, GREEN, PURPLE = [1, 0, 0, 1], [0, 1, 0, 1], [1, 0, 1, 1]
HALF = 0.02
CAMERA = ([1.0, 0.0, 0.6], [-0.2, 0.0, 0.2])


class _CubeTask(BaseEnv):
    """What the three cube tasks share: a Panda at (-0.615, 0, 0) on ManiSkill's table,
    cubes with a random yaw, VAGEN's render camera."""

    SUPPORTED_ROBOTS = ["panda"]
    # (name, colour, sampling region [[xlo, ylo], [xhi, yhi]] or None for the shared one)
    CUBES = []
    REGION = None

    def __init__(self, *args, robot_uids="panda", robot_init_qpos_noise=0.02, image_size=300, **kwargs):
        self.robot_init_qpos_noise = robot_init_qpos_noise
        self.image_size = image_size
        super().__init__(*args, robot_uids=robot_uids, **kwargs)

    @property
    def _default_sensor_configs(self):
        return []

    @property
    def _default_human_render_camera_configs(self):
        pose = sapien_utils.look_at(*CAMERA)
        return CameraConfig("render_camera", pose, self.image_size, self.image_size, 1, 0.01, 100)

    def _load_agent(self, options):
        super()._load_agent(options, sapien.Pose(p=[-0.615, 0, 0]))

    def _load_scene(self, options):
        self.table_scene = TableSceneBuilder(env=self, robot_init_qpos_noise=self.robot_init_qpos_noise)
        self.table_scene.build()
        self.cubes = {}
        for k, (name, colour, _) in enumerate(self.CUBES):
            self.cubes[name] = actors.build_cube(
                self.scene, half_size=HALF, color=colour, name=f"{name}_cube",
                initial_pose=sapien.Pose(p=[1 + k, 0, 0.1]),
            )
        self._load_targets()

    def _load_targets(self):
        pass

    def _initialize_episode(self, env_idx, options):
        with torch.device(self.device):
            b = len(env_idx)
            self.table_scene.initialize(env_idx)
            radius = float(torch.linalg.norm(torch.tensor([HALF, HALF])) + 0.02)
            shared = None
            if self.REGION is not None:
                shared = randomization.UniformPlacementSampler(bounds=self.REGION, batch_size=b, device=self.device)
            for name, _, region in self.CUBES:
                sampler = shared or randomization.UniformPlacementSampler(
                    bounds=region, batch_size=b, device=self.device
                )
                xyz = torch.zeros((b, 3))
                xyz[:, :2] = sampler.sample(radius, 100)
                xyz[:, 2] = HALF
                q = randomization.random_quaternions(b, lock_x=True, lock_y=True, lock_z=False)
                self.cubes[name].set_pose(Pose.create_from_pq(p=xyz, q=q))

    def positions(self):
        return {name: cube.pose.p[0].tolist() for name, cube in self.cubes.items()}

    def grasped(self, name):
        return bool(self.agent.is_grasping(self.cubes[name])[0])

    def evaluate(self):
        # Judged once per skill by `stage`, not at every low-level step.
        return {}

    def _get_obs_extra(self, info):
        return dict()

    def compute_dense_reward(self, obs, action, info):
        return torch.zeros(self.num_envs, device=self.device)

    def compute_normalized_dense_reward(self, obs, action, info):
        return self.compute_dense_reward(obs, action, info)


@register_env("vagen-AlignTwoCube", max_episode_steps=100000)
class AlignTwoCube(_CubeTask):
    CUBES = [("red", RED, [[0.1, -0.2], [0.15, 0.1]]), ("green", GREEN, [[0.1, 0.1], [0.15, 0.2]])]

    def stage(self):
        """(highest stage reached or -1, success): stage 0 red at x = 0 (±10 mm),
        stage 1 green there; success both. VAGEN's stages are independent here."""
        p = self.positions()
        at_x0 = [abs(p[n][0]) <= 0.01 and abs(p[n][2]) <= 0.05 for n in ("red", "green")]
        reached = max([k for k, ok in enumerate(at_x0) if ok], default=-1)
        return reached, all(at_x0)


LEFT_TARGET, RIGHT_TARGET, GOAL_RADIUS = [0.08, -0.1, 0.0], [0.08, 0.1, 0.0], 0.05


@register_env("vagen-PlaceTwoCube", max_episode_steps=100000)
class PlaceTwoCube(_CubeTask):
    CUBES = [("red", RED, None), ("green", GREEN, None)]
    REGION = [[-0.1, -0.1], [0.0, 0.1]]

    def _load_targets(self):
        # The targets are drawn only: no collision, so nothing but the image changes.
        if MODE == "state":
            return
        for name, p in (("goal_region_A", LEFT_TARGET), ("goal_region_B", RIGHT_TARGET)):
            actors.build_red_white_target(
                self.scene, radius=GOAL_RADIUS, thickness=1e-5, name=name, add_collision=False,
                body_type="kinematic",
                initial_pose=sapien.Pose(p=p, q=[0.7071068, 0, 0.7071068, 0]),
            )

    def positions(self):
        return {"left_target": LEFT_TARGET, "right_target": RIGHT_TARGET, **super().positions()}

    def stage(self):
        p = self.positions()

        def in_goal(cube, goal):
            return float(np.linalg.norm(np.array(p[cube][:2]) - np.array(goal[:2]))) <= GOAL_RADIUS

        red_held, green_held = self.grasped("red"), self.grasped("green")
        red_in, green_in = in_goal("red", LEFT_TARGET), in_goal("green", RIGHT_TARGET)
        stages = [
            red_held,
            red_in and not red_held,
            red_in and green_held,
        ]
        success = red_in and green_in and not red_held and not green_held
        return max([k for k, ok in enumerate(stages) if ok], default=-1), success


@register_env("vagen-StackThreeCube", max_episode_steps=100000)
class StackThreeCube(_CubeTask):
    CUBES = [("red", RED, None), ("green", GREEN, None), ("purple", PURPLE, None)]
    REGION = [[WORKSPACE[0][0], WORKSPACE[1][0]], [WORKSPACE[0][1], WORKSPACE[1][1]]]

    def stage(self):
        p = self.positions()
        size = 2 * HALF

        def on(top, below):
            a, b = np.array(p[top]), np.array(p[below])
            # bool(): NumPy's comparison gives numpy.bool_, which json cannot write.
            return bool(float(np.linalg.norm(a[:2] - b[:2])) < size / 2 and a[2] > b[2] + size / 2)

        red_on_green = on("red", "green") and not self.grasped("red")
        stages = [self.grasped("red"), red_on_green, self.grasped("purple")]
        success = on("purple", "red") and not self.grasped("purple") and red_on_green
        return max([k for k, ok in enumerate(stages) if ok], default=-1), success


# --- primitive skills: VAGEN's PrimitiveSkillDelta waypoints on pd_ee_delta_pose ---------
HOME = np.array([0.0, 0.0, 0.3])
WAYPOINT_HEIGHT = 0.05
OPEN, CLOSED = 1.0, -1.0
MAX_STEPS = {"pick": 150, "place": 150, "push": 200, "home": 150}


def _rpy(q):
    w, x, y, z = q
    roll = np.arctan2(2 * (w * x + y * z), 1 - 2 * (x * x + y * y))
    pitch = np.arcsin(np.clip(2 * (w * y - z * x), -1, 1))
    yaw = np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z))
    return roll, pitch, yaw


def _wrap(a):
    return (a + np.pi) % (2 * np.pi) - np.pi


class Skills:
    def __init__(self, env):
        self.env = env
        self.steps = 0

    def tcp(self):
        pose = self.env.unwrapped.agent.tcp.pose
        return pose.p[0].numpy().astype(np.float64), pose.q[0].numpy().astype(np.float64)

    def act(self, pos, rot, gripper):
        self.env.step(np.concatenate([pos, rot, [gripper]]).astype(np.float32))
        self.steps += 1

    def orientation(self):
        """Keeps the hand pointing down at yaw 0: the rotation part of the delta action is in
        the hand's frame, so each axis is driven against its error (VAGEN's gains)."""
        _, q = self.tcp()
        roll, pitch, yaw = _rpy(q)
        rp = -5.0 * np.array([_wrap(np.pi - roll), -pitch])
        rp = np.where(np.abs(rp) < 0.05, 0.0, np.clip(rp, -1, 1))
        err = _wrap(0.0 - yaw)
        speed = 0.0 if abs(err) < 0.05 else (1.0 if abs(err) < 0.5 else 5.0)
        return np.array([rp[0], rp[1], -np.sign(err) * min(speed, 1.0)])

    def move_to(self, goal, gripper, budget, thresh=0.005, speed=0.5, slow_speed=0.15):
        """Steps toward `goal` until every axis is within `thresh`; False when the budget
        (a list holding the steps left) runs out first."""
        goal = np.asarray(goal, dtype=np.float64)
        while True:
            p, _ = self.tcp()
            err = goal - p
            if np.all(np.abs(err) < thresh):
                return True
            if budget[0] <= 0:
                return False
            budget[0] -= 1
            s = slow_speed if np.linalg.norm(err) < 0.02 else speed
            err = np.where(np.abs(err) < thresh, 0.0, err)
            self.act(s * err / (np.linalg.norm(err) + 1e-6), self.orientation(), gripper)

    def gripper(self, value, budget, n=10):
        """Holds still for `n` steps while the fingers move; always completes (True)."""
        for _ in range(n):
            budget[0] -= 1
            self.act(np.zeros(3), np.zeros(3), value)
        return True

    def home(self, gripper):
        self.move_to(HOME, gripper, [MAX_STEPS["home"]])

    def run(self, name, a, b):
        """One primitive; whether every waypoint was reached within its bound."""
        a, b = np.asarray(a), np.asarray(b)
        budget = [MAX_STEPS[name]]
        above = a + [0, 0, WAYPOINT_HEIGHT]
        if name == "pick":
            ok = (self.move_to(above, OPEN, budget) and self.move_to(a, OPEN, budget)
                  and self.gripper(CLOSED, budget) and self.move_to(above, CLOSED, budget))
            self.home(CLOSED if ok else OPEN)
        elif name == "place":
            ok = (self.move_to(above, CLOSED, budget) and self.move_to(a, CLOSED, budget)
                  and self.gripper(OPEN, budget) and self.move_to(above, OPEN, budget))
            self.home(OPEN)
        else:
            # VAGEN's push: closed fingers, a 30 mm tolerance on the stroke, lifted at the end
            # to the start's height above.
            end_above = np.array([b[0], b[1], a[2] + WAYPOINT_HEIGHT])
            ok = (self.move_to(above, CLOSED, budget) and self.move_to(a, CLOSED, budget)
                  and self.move_to(b, CLOSED, budget, thresh=0.03, slow_speed=0.5)
                  and self.move_to(end_above, CLOSED, budget))
            self.home(CLOSED)
        return ok


# --- the protocol ----------------------------------------------------------------------
class Worker:
    def __init__(self):
        self.env = None
        self.key = None

    def make(self, task, image_size):
        key = (task, image_size)
        if self.key == key:
            return
        if self.env is not None:
            self.env.close()
        kwargs = dict(obs_mode="state", control_mode="pd_ee_delta_pose", sim_backend="cpu")
        if MODE == "render":
            kwargs.update(render_mode="rgb_array", enable_shadow=True, image_size=image_size)
        else:
            kwargs.update(render_backend="none")
        self.env = gym.make(f"vagen-{task}", **kwargs)
        self.key = key

    def state(self, extra):
        u = self.env.unwrapped
        stage, success = u.stage()
        out = dict(extra, objects=[[n, p] for n, p in u.positions().items()], stage=stage, success=success)
        out["held"] = [n for n in u.cubes if u.grasped(n)]
        if MODE == "render" and self.key[1]:
            frame = self.env.render()
            frame = frame[0] if frame.ndim == 4 else frame
            frame = np.ascontiguousarray(frame.cpu().numpy() if hasattr(frame, "cpu") else frame, dtype=np.uint8)
            out["image"] = {"width": int(frame.shape[1]), "height": int(frame.shape[0])}
            return out, frame.tobytes()
        return out, None

    def handle(self, req):
        op = req.get("op")
        if op == "reset":
            self.make(req["task"], req.get("image_size") or 0)
            # The scene is built once per task; a reset re-poses it from the seed (tens of
            # milliseconds, against ~300 for a rebuild). Seeds replay identically on a
            # reused worker all the same: the tests compare one after other episodes with
            # a fresh worker's, low-level step counts included.
            self.env.reset(seed=int(req["seed"]), options=dict(reconfigure=False))
            self.skills = Skills(self.env)
            # VAGEN settles the scene with one zero step after each reset.
            self.skills.act(np.zeros(3), np.zeros(3), OPEN)
            return self.state({})
        if op == "skill":
            before = self.skills.steps
            ok = self.skills.run(req["skill"], req["a"], req.get("b") or req["a"])
            return self.state({"reached": ok, "steps": self.skills.steps - before})
        if op == "observe":
            return self.state({})
        if op == "ping":
            return {}, None
        raise ValueError(f"unknown request {op!r}")


def main():
    import importlib.metadata as md

    send({"hello": {
        "protocol": PROTOCOL,
        "mani_skill": md.version("mani-skill"),
        "sapien": md.version("sapien"),
        "torch": torch.__version__,
    }})
    worker = Worker()
    while True:
        req = receive()
        if req is None:
            return
        try:
            reply, rgb = worker.handle(req)
        except Exception as e:  # the plugin names it; the traceback goes to stderr
            traceback.print_exc()
            reply, rgb = {"error": f"{type(e).__name__}: {e}"}, None
        send(reply, rgb)


main()
