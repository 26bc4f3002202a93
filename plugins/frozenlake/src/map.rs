//! The lake: generation from a seed, moves, and shortest paths.

use std::collections::VecDeque;
use vagen_sdk::Rng;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    Frozen,
    Hole,
    Goal,
}

/// In the order of `crate::ACTIONS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move {
    Left = 0,
    Down = 1,
    Right = 2,
    Up = 3,
}

impl Move {
    pub const ALL: [Move; 4] = [Move::Left, Move::Down, Move::Right, Move::Up];

    fn delta(self) -> (i64, i64) {
        match self {
            Move::Left => (-1, 0),
            Move::Down => (0, 1),
            Move::Right => (1, 0),
            Move::Up => (0, -1),
        }
    }

    pub fn turn_left(self) -> Move {
        Move::ALL[(self as usize + 3) % 4]
    }

    pub fn turn_right(self) -> Move {
        Move::ALL[(self as usize + 1) % 4]
    }
}

/// Tiles indexed `[y * size + x]`; positions are `(x, y)` with y growing downwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Map {
    pub size: usize,
    pub tiles: Vec<Tile>,
    pub start: (usize, usize),
    pub goal: (usize, usize),
}

/// Redraws before a path is forced open; only very low `frozen_prob` gets there.
const MAX_DRAWS: usize = 1000;

impl Map {
    /// Random distinct start and goal; every other tile frozen with `frozen_prob`;
    /// redrawn from the same stream until a path exists, so the seed alone decides.
    pub fn generate(size: usize, frozen_prob: f64, seed: u64) -> Map {
        let mut rng = Rng::new(seed);
        let mut map = Map { size, tiles: Vec::new(), start: (0, 0), goal: (0, 0) };
        for _ in 0..MAX_DRAWS {
            map.draw(&mut rng, frozen_prob);
            if map.steps_from(map.start).is_some() {
                return map;
            }
        }
        map.open_straight_path();
        map
    }

    fn draw(&mut self, rng: &mut Rng, frozen_prob: f64) {
        let n = self.size * self.size;
        let start = rng.below(n);
        let goal = (start + 1 + rng.below(n - 1)) % n;
        self.tiles = (0..n).map(|_| if rng.chance(frozen_prob) { Tile::Frozen } else { Tile::Hole }).collect();
        self.tiles[start] = Tile::Frozen;
        self.tiles[goal] = Tile::Goal;
        self.start = (start % self.size, start / self.size);
        self.goal = (goal % self.size, goal / self.size);
    }

    /// Freezes an L-shaped path from start to goal.
    fn open_straight_path(&mut self) {
        let (mut x, mut y) = self.start;
        while (x, y) != self.goal {
            if x != self.goal.0 {
                x = if x < self.goal.0 { x + 1 } else { x - 1 };
            } else {
                y = if y < self.goal.1 { y + 1 } else { y - 1 };
            }
            if (x, y) != self.goal {
                self.tiles[y * self.size + x] = Tile::Frozen;
            }
        }
    }

    pub fn tile(&self, (x, y): (usize, usize)) -> Tile {
        self.tiles[y * self.size + x]
    }

    pub fn holes(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        (0..self.tiles.len()).filter(|&i| self.tiles[i] == Tile::Hole).map(|i| (i % self.size, i / self.size))
    }

    /// Where a move leads, or `None` at the edge of the lake.
    pub fn neighbour(&self, (x, y): (usize, usize), m: Move) -> Option<(usize, usize)> {
        let (dx, dy) = m.delta();
        let (nx, ny) = (x as i64 + dx, y as i64 + dy);
        let inside = (0..self.size as i64).contains(&nx) && (0..self.size as i64).contains(&ny);
        inside.then_some((nx as usize, ny as usize))
    }

    /// Hole-free steps from each tile to the goal (`None`: holes, and tiles cut off).
    pub fn steps_to_goal(&self) -> Vec<Option<usize>> {
        let idx = |(x, y): (usize, usize)| y * self.size + x;
        let mut steps = vec![None; self.tiles.len()];
        steps[idx(self.goal)] = Some(0);
        let mut queue = VecDeque::from([self.goal]);
        while let Some(p) = queue.pop_front() {
            let next = steps[idx(p)].map(|s| s + 1);
            for m in Move::ALL {
                if let Some(q) = self.neighbour(p, m)
                    && steps[idx(q)].is_none()
                    && self.tile(q) == Tile::Frozen
                {
                    steps[idx(q)] = next;
                    queue.push_back(q);
                }
            }
        }
        steps
    }

    /// Every move that starts a shortest hole-free path from `from` (none at the goal, in
    /// a hole, or cut off), given `steps` from [`Map::steps_to_goal`].
    pub fn shortest_moves(&self, from: (usize, usize), steps: &[Option<usize>]) -> Vec<Move> {
        let at = |(x, y): (usize, usize)| steps[y * self.size + x];
        let Some(d) = at(from).filter(|&d| d > 0) else { return Vec::new() };
        Move::ALL.into_iter().filter(|&m| self.neighbour(from, m).and_then(at) == Some(d - 1)).collect()
    }

    /// Hole-free steps from `from` to the goal: `None` from a hole or a tile cut off.
    pub fn steps_from(&self, (x, y): (usize, usize)) -> Option<usize> {
        self.steps_to_goal()[y * self.size + x]
    }
}
