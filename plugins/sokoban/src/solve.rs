//! Optimal solutions (fewest moves) by breadth-first search over (player, boxes), with
//! squares from which no box can ever reach a target pruned.

use crate::level::{Cell, Dir, Level, Outcome};
use std::collections::{HashMap, VecDeque};

/// Searches beyond this many states give up (no answer rather than a stall).
const MAX_STATES: usize = 2_000_000;

/// The moves of a shortest solution from the current state; `None` if there is none
/// (a box pushed into a dead position) or the search is too large.
pub fn solve(start: &Level) -> Option<Vec<Dir>> {
    if start.solved() {
        return Some(Vec::new());
    }
    let live = live_squares(start);
    if start.boxes.iter().any(|&b| !live[b]) {
        return None;
    }
    let key = |l: &Level| (l.player, l.boxes.clone());
    let mut came = Came::new();
    came.insert(key(start), None);
    let mut queue = VecDeque::from([start.clone()]);
    while let Some(level) = queue.pop_front() {
        for d in Dir::ALL {
            let mut next = level.clone();
            match next.push(d) {
                Outcome::Blocked => continue,
                Outcome::Pushed { .. } if next.boxes.iter().any(|&b| !live[b]) => continue,
                _ => {}
            }
            let k = key(&next);
            if came.contains_key(&k) {
                continue;
            }
            came.insert(k.clone(), Some((key(&level), d)));
            if next.solved() {
                return Some(path_to(&came, k));
            }
            if came.len() >= MAX_STATES {
                return None;
            }
            queue.push_back(next);
        }
    }
    None
}

/// (player, boxes) → the state it was reached from and the move that did it.
type Key = (usize, Vec<usize>);
type Came = HashMap<Key, Option<(Key, Dir)>>;

fn path_to(came: &Came, mut k: Key) -> Vec<Dir> {
    let mut moves = Vec::new();
    while let Some(Some((prev, d))) = came.get(&k) {
        moves.push(*d);
        k = prev.clone();
    }
    moves.reverse();
    moves
}

/// Squares a box can stand on and still be pushed to some target: everything a box can
/// be *pulled* to from a target (the player needs room behind the box to pull).
fn live_squares(l: &Level) -> Vec<bool> {
    let mut live = vec![false; l.cells.len()];
    let mut queue: VecDeque<usize> = (0..l.cells.len()).filter(|&i| l.cells[i] == Cell::Target).collect();
    for &t in &queue {
        live[t] = true;
    }
    while let Some(b) = queue.pop_front() {
        for d in Dir::ALL {
            if let Some(to) = l.next(b, d)
                && let Some(player) = l.next(to, d)
                && l.cells[to] != Cell::Wall
                && l.cells[player] != Cell::Wall
                && !live[to]
            {
                live[to] = true;
                queue.push_back(to);
            }
        }
    }
    live
}
