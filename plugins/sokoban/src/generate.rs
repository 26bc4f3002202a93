//! Levels by reverse play, as gym-sokoban (used by RAGEN and VAGEN) makes them: carve a
//! room by a random walk of 3×3 stamps, place player and targets, then pull boxes off
//! their targets by depth-first search and keep the state that scores highest
//! (box swaps × total Manhattan displacement). Every level is solvable by construction:
//! replaying the pulls backwards is a solution.

use crate::level::{Cell, Dir, Level};
use std::collections::HashSet;
use vagen_sdk::Rng;

/// gym-sokoban's stamps: a wall-free 3×3 pattern added around the walker.
const STAMPS: [[[u8; 3]; 3]; 5] = [
    [[0, 0, 0], [1, 1, 1], [0, 0, 0]],
    [[0, 1, 0], [0, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [0, 1, 0]],
    [[0, 0, 0], [1, 1, 0], [1, 1, 0]],
    [[0, 0, 0], [0, 1, 1], [0, 1, 0]],
];
const TURN_PROBABILITY: f64 = 0.35;
/// gym-sokoban caps the pull search at this many distinct states.
const MAX_EXPLORED: usize = 300_000;
/// Attempts before falling back to a plain level; every attempt continues the same
/// seeded stream, so the result is still a function of the seed.
const MAX_ATTEMPTS: usize = 1000;

pub struct Params {
    pub width: usize,
    pub height: usize,
    pub boxes: usize,
    pub search_depth: usize,
}

pub fn generate(p: &Params, seed: u64) -> Level {
    let mut rng = Rng::new(seed);
    for _ in 0..MAX_ATTEMPTS {
        let cells = topology(&mut rng, p.width, p.height);
        let Some(solved) = place(&mut rng, cells, p.width, p.height, p.boxes) else { continue };
        if let Some(level) = reverse_play(&solved, p.search_depth) {
            return jitter(&mut rng, level);
        }
    }
    fallback(p)
}

fn topology(rng: &mut Rng, w: usize, h: usize) -> Vec<Cell> {
    let steps = (1.7 * (w + h) as f64) as usize;
    let dirs: [(i64, i64); 4] = [(1, 0), (0, 1), (-1, 0), (0, -1)];
    let mut dir = dirs[rng.below(4)];
    let (mut x, mut y) = (1 + rng.below(w - 2) as i64, 1 + rng.below(h - 2) as i64);
    let mut floor = vec![false; w * h];
    for _ in 0..steps {
        if rng.chance(TURN_PROBABILITY) {
            dir = dirs[rng.below(4)];
        }
        x = (x + dir.0).clamp(1, w as i64 - 2);
        y = (y + dir.1).clamp(1, h as i64 - 2);
        let stamp = &STAMPS[rng.below(STAMPS.len())];
        for (dy, row) in stamp.iter().enumerate() {
            for (dx, &on) in row.iter().enumerate() {
                let (sx, sy) = (x - 1 + dx as i64, y - 1 + dy as i64);
                if on == 1 && sx > 0 && sy > 0 && sx < w as i64 - 1 && sy < h as i64 - 1 {
                    floor[sy as usize * w + sx as usize] = true;
                }
            }
        }
    }
    floor.into_iter().map(|f| if f { Cell::Floor } else { Cell::Wall }).collect()
}

/// Player and targets on distinct floor cells; boxes start on the targets (solved).
fn place(rng: &mut Rng, mut cells: Vec<Cell>, w: usize, h: usize, boxes: usize) -> Option<Level> {
    let mut free: Vec<usize> = (0..cells.len()).filter(|&i| cells[i] == Cell::Floor).collect();
    if free.len() <= boxes + 1 {
        return None;
    }
    let player = free.swap_remove(rng.below(free.len()));
    let mut targets = Vec::with_capacity(boxes);
    for _ in 0..boxes {
        let t = free.swap_remove(rng.below(free.len()));
        cells[t] = Cell::Target;
        targets.push(t);
    }
    targets.sort_unstable();
    Some(Level { width: w, height: h, cells, boxes: targets, player })
}

/// Box identity matters for the score (which target each box came from).
#[derive(Clone)]
struct PullState {
    player: usize,
    /// `origins[i]` is where box `i` started (its target); `at[i]` where it is now.
    at: Vec<usize>,
}

struct Search<'a> {
    level: &'a Level,
    origins: Vec<usize>,
    explored: HashSet<(usize, Vec<usize>)>,
    best: Option<(u64, PullState)>,
}

fn reverse_play(solved: &Level, depth: usize) -> Option<Level> {
    let mut search = Search { level: solved, origins: solved.boxes.clone(), explored: HashSet::new(), best: None };
    let start = PullState { player: solved.player, at: solved.boxes.clone() };
    search.dfs(&start, 0, None, depth);
    let (score, best) = search.best?;
    (score > 0).then(|| {
        let mut boxes = best.at.clone();
        boxes.sort_unstable();
        Level { boxes, player: best.player, ..solved.clone() }
    })
}

impl Search<'_> {
    fn dfs(&mut self, s: &PullState, swaps: u64, last_pulled: Option<usize>, ttl: usize) {
        if ttl == 0 || self.explored.len() >= MAX_EXPLORED {
            return;
        }
        let mut key_boxes = s.at.clone();
        key_boxes.sort_unstable();
        if !self.explored.insert((s.player, key_boxes)) {
            return;
        }
        let all_off = s.at.iter().all(|&b| self.level.cells[b] != Cell::Target);
        let score = if all_off { swaps * self.displacement(s) } else { 0 };
        if self.best.as_ref().is_none_or(|(b, _)| score > *b) {
            self.best = Some((score, s.clone()));
        }
        for pull in [true, false] {
            for d in Dir::ALL {
                if let Some((next, pulled)) = self.reverse_move(s, d, pull) {
                    let swaps = swaps + u64::from(pulled.is_some() && pulled != last_pulled);
                    self.dfs(&next, swaps, pulled.or(last_pulled), ttl - 1);
                }
            }
        }
    }

    /// The player steps in `d`; with `pull`, a box right behind it follows.
    fn reverse_move(&self, s: &PullState, d: Dir, pull: bool) -> Option<(PullState, Option<usize>)> {
        let l = self.level;
        let next = l.next(s.player, d)?;
        if l.cells[next] == Cell::Wall || s.at.contains(&next) {
            return None;
        }
        let mut out = PullState { player: next, at: s.at.clone() };
        let mut pulled = None;
        if pull {
            let back = [Dir::Down, Dir::Up, Dir::Right, Dir::Left][d as usize];
            if let Some(behind) = l.next(s.player, back)
                && let Some(i) = s.at.iter().position(|&b| b == behind)
            {
                out.at[i] = s.player;
                pulled = Some(i);
            }
        }
        Some((out, pulled))
    }

    fn displacement(&self, s: &PullState) -> u64 {
        let l = self.level;
        s.at.iter()
            .zip(&self.origins)
            .map(|(&b, &o)| {
                let ((bx, by), (ox, oy)) = (l.xy(b), l.xy(o));
                (bx.abs_diff(ox) + by.abs_diff(oy)) as u64
            })
            .sum()
    }
}

/// One to three plain steps of the player (no pushing), so it does not always stand where
/// the last pull left it. Plain steps can be walked back: solvability is kept.
fn jitter(rng: &mut Rng, mut level: Level) -> Level {
    for _ in 0..1 + rng.below(3) {
        let options: Vec<usize> =
            Dir::ALL.iter().filter_map(|&d| level.next(level.player, d)).filter(|&p| level.is_free(p)).collect();
        if let Some(&p) = rng.choose(&options) {
            level.player = p;
        }
    }
    level
}

/// A plain room: targets along the top row, each box one row below its target, the player
/// beneath. Solvable by pushing every box up. Only reached if reverse play keeps failing.
fn fallback(p: &Params) -> Level {
    let (w, h) = (p.width, p.height);
    let mut cells = vec![Cell::Wall; w * h];
    for y in 1..h - 1 {
        for x in 1..w - 1 {
            cells[y * w + x] = Cell::Floor;
        }
    }
    let columns = (w - 2).min(p.boxes);
    let mut boxes = Vec::new();
    for i in 0..columns {
        cells[w + 1 + i] = Cell::Target;
        boxes.push(2 * w + 1 + i);
    }
    Level { width: w, height: h, cells, boxes, player: (h - 2) * w + 1 }
}
