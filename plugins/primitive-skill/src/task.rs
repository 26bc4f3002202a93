//! The tasks: what VAGEN tells the agent about each, and a scripted solution (VAGEN has
//! none; ours plays from the positions the agent is shown).

use serde::{Deserialize, Serialize};

/// VAGEN's `env_id`s. PutAppleInDrawer is named so a config asking for it gets a clear
/// refusal (its PartNet-Mobility cabinet and YCB apple are downloads, not in the wheel).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Task {
    #[default]
    AlignTwoCube,
    PlaceTwoCube,
    StackThreeCube,
    PutAppleInDrawer,
}

/// The workspace in whole millimetres, per axis (VAGEN rounds its metre limits).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workspace(pub [(i32, i32); 3]);

impl Workspace {
    pub fn clip(&self, axis: usize, v: f64) -> f64 {
        let (lo, hi) = self.0[axis];
        v.clamp(f64::from(lo), f64::from(hi))
    }
}

/// Object positions in millimetres, in the order VAGEN lists them.
pub type Objects = Vec<(String, [i64; 3])>;

/// The left and right targets of PlaceTwoCube (mm).
const LEFT_TARGET: [i64; 3] = [80, -100, 0];
const RIGHT_TARGET: [i64; 3] = [80, 100, 0];
/// How far above its resting height the oracle lets a cube go (mm): the fingers open
/// before it touches, as VAGEN's hint "set z much higher when placing" suggests. At 10 mm
/// a cube held askew (random yaw) could strike a stack as it came down and topple it:
/// StackThreeCube's oracle lost seed 19 of 0..20 so; at 20 it won 100 of 100 seeds, the
/// other tasks 40 of 40.
const DROP: i64 = 20;
const CUBE: i64 = 40;

impl Task {
    pub const NAMES: [&'static str; 4] = ["AlignTwoCube", "PlaceTwoCube", "StackThreeCube", "PutAppleInDrawer"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    pub fn instruction(self) -> &'static str {
        match self {
            Task::AlignTwoCube => {
                "Please align the cubes in the y-axis, which means the x-coordinates of both cubes should be 0 (+-10mm)"
            }
            Task::PlaceTwoCube => "Please place red cube at left target and green cube at right target.",
            Task::StackThreeCube => {
                "Please stack the red cube on top of the green cube, and then stack purple cube on top of the red cube."
            }
            Task::PutAppleInDrawer => "Please put the apple in the drawer and close the drawer.",
        }
    }

    pub fn workspace(self) -> Workspace {
        match self {
            Task::PutAppleInDrawer => Workspace([(-500, -100), (-600, 200), (10, 650)]),
            _ => Workspace([(-100, 150), (-200, 200), (10, 200)]),
        }
    }

    /// VAGEN's "Other information" line (`vlm_info_keys`).
    pub fn other_information(self) -> &'static str {
        match self {
            Task::StackThreeCube => "{'cube_size': (40, 40, 40)}",
            _ => "No other information needed",
        }
    }

    /// The next skills toward the goal, at most `n`, from the objects (mm) and what the
    /// gripper holds. `None` when there is nothing left to do.
    pub fn oracle(self, objects: &Objects, held: &[String], n: usize) -> Option<Vec<String>> {
        let at = |name: &str| objects.iter().find(|(o, _)| o == name).map(|(_, p)| *p);
        // Where each cube must end up, in order; a cube already there is skipped.
        let goals: Vec<(&str, [i64; 3])> = match self {
            Task::AlignTwoCube => ["red", "green"]
                .into_iter()
                .filter_map(|c| at(c).filter(|p| p[0].abs() > 5).map(|p| (c, [0, p[1], CUBE / 2 + DROP])))
                .collect(),
            Task::PlaceTwoCube => [("red", LEFT_TARGET), ("green", RIGHT_TARGET)]
                .into_iter()
                .filter(|(c, t)| at(c).is_none_or(|p| dist_xy(p, *t) > 25))
                .map(|(c, t)| (c, [t[0], t[1], CUBE / 2 + DROP]))
                .collect(),
            Task::StackThreeCube => {
                let (red, green, purple) = (at("red")?, at("green")?, at("purple")?);
                let red_on_green = dist_xy(red, green) < 10 && red[2] > green[2] + CUBE / 2;
                let mut goals = Vec::new();
                if !red_on_green {
                    goals.push(("red", [green[0], green[1], green[2] + CUBE + DROP]));
                }
                // Where red will be once stacked: on green.
                let red_top = if red_on_green { red } else { [green[0], green[1], green[2] + CUBE] };
                if !(red_on_green && dist_xy(purple, red) < 10 && purple[2] > red[2] + CUBE / 2) {
                    goals.push(("purple", [red_top[0], red_top[1], red_top[2] + CUBE + DROP]));
                }
                goals
            }
            Task::PutAppleInDrawer => return None,
        };
        let mut out = Vec::new();
        for (cube, target) in goals {
            if !held.iter().any(|h| h == cube) {
                let p = at(cube)?;
                out.push(format!("pick({},{},{})", p[0], p[1], p[2]));
            }
            out.push(format!("place({},{},{})", target[0], target[1], target[2]));
        }
        out.truncate(n);
        (!out.is_empty()).then_some(out)
    }
}

fn dist_xy(a: [i64; 3], b: [i64; 3]) -> i64 {
    let (dx, dy) = ((a[0] - b[0]) as f64, (a[1] - b[1]) as f64);
    dx.hypot(dy).round() as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objs(list: &[(&str, [i64; 3])]) -> Objects {
        list.iter().map(|(n, p)| (n.to_string(), *p)).collect()
    }

    #[test]
    fn oracle_plans_pick_then_place_per_cube_and_stops_when_done() {
        let o = objs(&[("red", [24, 107, 20]), ("green", [59, -4, 20]), ("purple", [-94, -132, 20])]);
        let plan = Task::StackThreeCube.oracle(&o, &[], 2).unwrap();
        assert_eq!(plan, ["pick(24,107,20)", "place(59,-4,80)"]);
        let o = objs(&[("red", [59, -4, 60]), ("green", [59, -4, 20]), ("purple", [-94, -132, 20])]);
        assert_eq!(Task::StackThreeCube.oracle(&o, &[], 2).unwrap(), ["pick(-94,-132,20)", "place(59,-4,120)"]);
        let o = objs(&[("red", [59, -4, 60]), ("green", [59, -4, 20]), ("purple", [59, -3, 100])]);
        assert_eq!(Task::StackThreeCube.oracle(&o, &[], 2), None);
        // Holding a cube: place it first.
        let o = objs(&[("red", [0, 100, 20]), ("green", [120, 150, 20])]);
        assert_eq!(Task::AlignTwoCube.oracle(&o, &["green".into()], 2).unwrap(), ["place(0,150,40)"]);
        let o = objs(&[
            ("left_target", LEFT_TARGET),
            ("right_target", RIGHT_TARGET),
            ("red", [80, -95, 20]),
            ("green", [-50, 0, 20]),
        ]);
        assert_eq!(Task::PlaceTwoCube.oracle(&o, &[], 2).unwrap(), ["pick(-50,0,20)", "place(80,100,40)"]);
    }
}
