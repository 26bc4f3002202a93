//! Where the agent can be and how actions move it: a lattice of cell centres `step` apart,
//! four headings, four pitches; a move is blocked when the agent's body would touch a wall
//! or furniture anywhere along it. The oracle is a shortest-path search over this lattice.

use crate::geom::Rect;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The agent's body radius (metres).
pub const RADIUS: f32 = 0.15;
/// Pitch limits in 30° steps: one up, two down (AI2-THOR's horizon range −30°..60°).
pub const PITCH_UP: i8 = -1;
pub const PITCH_DOWN: i8 = 2;

pub const ACTIONS: [&str; 8] =
    ["moveahead", "moveback", "moveright", "moveleft", "rotateright", "rotateleft", "lookup", "lookdown"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    MoveAhead,
    MoveBack,
    MoveRight,
    MoveLeft,
    RotateRight,
    RotateLeft,
    LookUp,
    LookDown,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::MoveAhead,
        Action::MoveBack,
        Action::MoveRight,
        Action::MoveLeft,
        Action::RotateRight,
        Action::RotateLeft,
        Action::LookUp,
        Action::LookDown,
    ];

    pub fn name(self) -> &'static str {
        ACTIONS[self as usize]
    }
}

/// North, east, south, west as (dx, dz).
pub const HEADINGS: [(i32, i32); 4] = [(0, 1), (1, 0), (0, -1), (-1, 0)];
pub const HEADING_NAMES: [&str; 4] = ["north", "east", "south", "west"];

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pose {
    pub i: i32,
    pub j: i32,
    /// 0 north (+z), 1 east (+x), 2 south, 3 west.
    pub heading: u8,
    /// 30° steps below the horizon (negative: above).
    pub pitch: i8,
}

fn cell_centre(step: f32, i: i32, j: i32) -> (f32, f32) {
    ((i as f32 + 0.5) * step, (j as f32 + 0.5) * step)
}

pub struct Walk {
    pub step: f32,
    pub cols: i32,
    pub rows: i32,
    free: Vec<bool>,
    /// Per cell and world direction: the move to the neighbour is clear.
    open: Vec<[bool; 4]>,
}

impl Walk {
    pub fn new(width: f32, depth: f32, step: f32, obstacles: &[Rect]) -> Walk {
        let (cols, rows) = ((width / step).round() as i32, (depth / step).round() as i32);
        let clear = |x: f32, z: f32| obstacles.iter().all(|r| r.distance(x, z) > RADIUS);
        let centre = |i: i32, j: i32| cell_centre(step, i, j);
        let mut free = vec![false; (cols * rows) as usize];
        for j in 0..rows {
            for i in 0..cols {
                let (x, z) = centre(i, j);
                free[(j * cols + i) as usize] = clear(x, z);
            }
        }
        // Check points at most 0.1 m apart along each move, so no wall slips between.
        let samples = (step / 0.1).ceil() as i32;
        let mut open = vec![[false; 4]; free.len()];
        for j in 0..rows {
            for i in 0..cols {
                let k = (j * cols + i) as usize;
                if !free[k] {
                    continue;
                }
                for (d, (di, dj)) in HEADINGS.iter().enumerate() {
                    let (ni, nj) = (i + di, j + dj);
                    if ni < 0 || nj < 0 || ni >= cols || nj >= rows || !free[(nj * cols + ni) as usize] {
                        continue;
                    }
                    let (x, z) = centre(i, j);
                    open[k][d] = (1..samples).all(|s| {
                        let t = s as f32 / samples as f32 * step;
                        clear(x + *di as f32 * t, z + *dj as f32 * t)
                    });
                }
            }
        }
        Walk { step, cols, rows, free, open }
    }

    pub fn centre(&self, p: &Pose) -> (f32, f32) {
        cell_centre(self.step, p.i, p.j)
    }

    pub fn is_free(&self, i: i32, j: i32) -> bool {
        i >= 0 && j >= 0 && i < self.cols && j < self.rows && self.free[(j * self.cols + i) as usize]
    }

    /// All free cells with their centres, row by row.
    pub fn free_cells(&self) -> impl Iterator<Item = ((i32, i32), (f32, f32))> + '_ {
        (0..self.rows)
            .flat_map(move |j| (0..self.cols).map(move |i| (i, j)))
            .filter(|&(i, j)| self.is_free(i, j))
            .map(|(i, j)| ((i, j), cell_centre(self.step, i, j)))
    }

    /// The pose after `action`, or `None` when it is blocked (or the head is at its limit).
    pub fn apply(&self, p: Pose, action: Action) -> Option<Pose> {
        let turn = |by: u8| Pose { heading: (p.heading + by) % 4, ..p };
        let shift = |by: u8| {
            let d = ((p.heading + by) % 4) as usize;
            let k = (p.j * self.cols + p.i) as usize;
            self.open.get(k).is_some_and(|o| o[d]).then(|| {
                let (di, dj) = HEADINGS[d];
                Pose { i: p.i + di, j: p.j + dj, ..p }
            })
        };
        match action {
            Action::MoveAhead => shift(0),
            Action::MoveRight => shift(1),
            Action::MoveBack => shift(2),
            Action::MoveLeft => shift(3),
            Action::RotateRight => Some(turn(1)),
            Action::RotateLeft => Some(turn(3)),
            Action::LookUp => (p.pitch > PITCH_UP).then(|| Pose { pitch: p.pitch - 1, ..p }),
            Action::LookDown => (p.pitch < PITCH_DOWN).then(|| Pose { pitch: p.pitch + 1, ..p }),
        }
    }

    /// The cheapest actions from `from` to a cell where `goal` holds, walking as a person
    /// does: forwards (cost 2) and turning (3) are preferred over sidestepping or backing up
    /// (5), so a demonstration mostly looks where it goes; a single sidestep still beats
    /// turning, stepping and turning back. Pitch never matters for getting there and is left
    /// as it is. `None`: unreachable.
    pub fn plan(&self, from: Pose, goal: impl Fn(f32, f32) -> bool) -> Option<Vec<Action>> {
        const MOVES: [Action; 6] = [
            Action::MoveAhead,
            Action::RotateLeft,
            Action::RotateRight,
            Action::MoveLeft,
            Action::MoveRight,
            Action::MoveBack,
        ];
        let index = |p: &Pose| ((p.j * self.cols + p.i) * 4 + p.heading as i32) as usize;
        let n = (self.cols * self.rows * 4) as usize;
        let mut cost = vec![u32::MAX; n];
        let mut came: Vec<Option<(usize, Action)>> = vec![None; n];
        let mut poses = vec![None; n];
        let mut heap = BinaryHeap::new();
        let start = index(&from);
        cost[start] = 0;
        poses[start] = Some(from);
        heap.push(Reverse((0u32, start)));
        while let Some(Reverse((c, k))) = heap.pop() {
            if c > cost[k] {
                continue;
            }
            let p = poses[k].expect("every queued state has a pose");
            let (x, z) = self.centre(&p);
            if goal(x, z) {
                let mut path = Vec::new();
                let mut at = k;
                while let Some((prev, a)) = came[at] {
                    path.push(a);
                    at = prev;
                }
                path.reverse();
                return Some(path);
            }
            for a in MOVES {
                let Some(q) = self.apply(p, a) else { continue };
                let nk = index(&q);
                let nc = c + match a {
                    Action::MoveAhead => 2,
                    Action::RotateLeft | Action::RotateRight => 3,
                    _ => 5,
                };
                if nc < cost[nk] {
                    cost[nk] = nc;
                    came[nk] = Some((k, a));
                    poses[nk] = Some(q);
                    heap.push(Reverse((nc, nk)));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn room_with_pillar() -> Walk {
        // A 4 m × 4 m room (walls 0.1 m thick on its edges), a 1 m pillar in the middle.
        let walls = [
            Rect::new(-0.05, -0.05, 4.05, 0.05),
            Rect::new(-0.05, 3.95, 4.05, 4.05),
            Rect::new(-0.05, -0.05, 0.05, 4.05),
            Rect::new(3.95, -0.05, 4.05, 4.05),
            Rect::new(1.5, 1.5, 2.5, 2.5),
        ];
        Walk::new(4.0, 4.0, 0.5, &walls)
    }

    #[test]
    fn walls_and_furniture_block_moves() {
        let w = room_with_pillar();
        let p = Pose { i: 0, j: 0, heading: 2, pitch: 0 };
        assert!(w.is_free(0, 0), "cells along walls are usable");
        assert_eq!(w.apply(p, Action::MoveAhead), None, "facing the south wall");
        assert_eq!(w.apply(p, Action::MoveBack), Some(Pose { j: 1, ..p }));
        assert_eq!(w.apply(p, Action::MoveLeft), Some(Pose { i: 1, ..p }), "facing south, left is east");
        assert!(!w.is_free(3, 3) && !w.is_free(4, 4), "the pillar");
        let up = w.apply(p, Action::LookUp).unwrap();
        assert_eq!(w.apply(up, Action::LookUp), None);
        assert_eq!(w.apply(p, Action::RotateRight).unwrap().heading, 3);
    }

    #[test]
    fn the_plan_is_shortest_and_walks_around_the_pillar() {
        let w = room_with_pillar();
        let from = Pose { i: 3, j: 0, heading: 0, pitch: 0 };
        // Straight north is blocked by the pillar at cells (3..=4, 3..=4).
        let plan = w.plan(from, |x, z| (x - 1.75).abs() < 0.01 && (z - 3.75).abs() < 0.01).unwrap();
        let mut p = from;
        for &a in &plan {
            p = w.apply(p, a).expect("every planned action is executable");
        }
        assert_eq!((p.i, p.j), (3, 7));
        assert_eq!(plan.len(), 9, "{plan:?}: 7 cells north, plus a sidestep and back around the pillar");
        assert!(plan.iter().all(|a| matches!(a, Action::MoveAhead | Action::MoveLeft | Action::MoveRight)));
        assert!(w.plan(from, |x, _| x > 10.0).is_none());
    }

    #[test]
    fn the_plan_turns_round_instead_of_backing_up() {
        let w = room_with_pillar();
        let from = Pose { i: 7, j: 6, heading: 0, pitch: 0 };
        let plan = w.plan(from, |_, z| z < 1.0).unwrap();
        assert!(plan[..2].iter().all(|a| matches!(a, Action::RotateLeft | Action::RotateRight)), "{plan:?}");
        assert!(plan[2..].iter().all(|&a| a == Action::MoveAhead), "{plan:?}");
    }
}
