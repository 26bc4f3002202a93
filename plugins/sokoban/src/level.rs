//! A Sokoban level: fixed walls and targets, moving boxes and player, and the push rule.

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cell {
    Wall,
    Floor,
    Target,
}

/// In the order of `crate::ACTIONS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Up = 0,
    Down = 1,
    Left = 2,
    Right = 3,
}

impl Dir {
    pub const ALL: [Dir; 4] = [Dir::Up, Dir::Down, Dir::Left, Dir::Right];
}

/// Positions are indices `y * width + x`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Level {
    pub width: usize,
    pub height: usize,
    pub cells: Vec<Cell>,
    /// Sorted, so equal states compare equal.
    pub boxes: Vec<usize>,
    pub player: usize,
}

/// What one push-move did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Blocked,
    Walked,
    /// A box moved; whether it left or reached a target.
    Pushed {
        left_target: bool,
        on_target: bool,
    },
}

impl Level {
    pub fn xy(&self, p: usize) -> (usize, usize) {
        (p % self.width, p / self.width)
    }

    /// The neighbour of `p` in direction `d`; `None` off the grid.
    pub fn next(&self, p: usize, d: Dir) -> Option<usize> {
        let (x, y) = self.xy(p);
        match d {
            Dir::Up if y > 0 => Some(p - self.width),
            Dir::Down if y + 1 < self.height => Some(p + self.width),
            Dir::Left if x > 0 => Some(p - 1),
            Dir::Right if x + 1 < self.width => Some(p + 1),
            _ => None,
        }
    }

    pub fn is_box(&self, p: usize) -> bool {
        self.boxes.binary_search(&p).is_ok()
    }

    pub fn is_free(&self, p: usize) -> bool {
        self.cells[p] != Cell::Wall && !self.is_box(p)
    }

    pub fn solved(&self) -> bool {
        self.boxes.iter().all(|&b| self.cells[b] == Cell::Target)
    }

    pub fn boxes_on_targets(&self) -> usize {
        self.boxes.iter().filter(|&&b| self.cells[b] == Cell::Target).count()
    }

    /// Moves the player one step, pushing a box if one is in the way and can move.
    pub fn push(&mut self, d: Dir) -> Outcome {
        let Some(next) = self.next(self.player, d) else { return Outcome::Blocked };
        if self.cells[next] == Cell::Wall {
            return Outcome::Blocked;
        }
        if let Ok(i) = self.boxes.binary_search(&next) {
            let Some(beyond) = self.next(next, d).filter(|&b| self.is_free(b)) else { return Outcome::Blocked };
            self.boxes[i] = beyond;
            self.boxes.sort_unstable();
            self.player = next;
            return Outcome::Pushed {
                left_target: self.cells[next] == Cell::Target,
                on_target: self.cells[beyond] == Cell::Target,
            };
        }
        self.player = next;
        Outcome::Walked
    }
}
