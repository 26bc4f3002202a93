//! The engine's cache rows as plain data: what each row holds, who owns it, when it was
//! last used, and the [`Move`]s that keep the key/value tensors (`kv.rs`) in step with it.
//! The scheduler changes rows only through this table, and each change that moves data
//! is recorded as a `Move` the runner applies, in order, before its next forward.
//!
//! Why rows and not pages: libtorch has no paged-attention kernel, and gathering a paged
//! layout into contiguous keys every step would copy the whole cache per layer and step.
//! Here data moves only when the decode batch changes (a swap copies the two rows' used
//! positions), and memory is bounded by a byte budget with least-recently-used eviction.
//! The sequences being decoded are kept in rows `0..m`, so a step attends over a narrowed
//! view (no copy); a row that leaves the decode batch is swapped past the active ones and
//! stays cached: its trajectory's next turn, or a sibling with the same prompt, starts
//! from it.

use crate::{Error, Result};

/// What a row holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Slot {
    /// What the row holds, position by position: token ids, and for an image's tokens a key
    /// of the image's pixels and the token's place in it (see `engine::Prompted`), so two
    /// prompts that differ only in an image's pixels share nothing past it.
    pub ids: Vec<u64>,
    /// The request key (trajectory) the row was last extended for; `None`: free.
    pub owner: Option<u64>,
    /// When the row was last used (the engine's call counter), for eviction.
    pub used: u64,
    /// Identifies the row's content wherever swaps move it.
    pub serial: u64,
}

/// A change to the key/value tensors, decided with the rows' metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// Reallocate to `rows` × `cap` positions, keeping every row's data.
    Grow { rows: usize, cap: usize },
    /// Keep rows `0..rows` and release the rest.
    Truncate { rows: usize },
    /// Exchange the first `positions` positions of rows `a` and `b`.
    Swap { a: usize, b: usize, positions: usize },
    /// Row `to` starts with the first `len` positions of row `from`.
    CopyPrefix { from: usize, to: usize, len: usize },
}

pub(crate) struct Slots {
    pub slots: Vec<Slot>,
    cap: usize,
    bytes_per_position: usize,
    pub budget: usize,
    pub peak_bytes: usize,
    serials: u64,
    /// Moves not yet handed to the runner.
    moves: Vec<Move>,
    /// At the first allocation, at least this many rows, of twice the capacity asked (room
    /// for a conversation to grow), as far as the budget allows: the padded decode's CUDA
    /// graphs hold the tensors' addresses, and each reallocation captures anew.
    pub first_room: Option<usize>,
    /// Allocations of the tensors (growths and truncations).
    pub allocations: usize,
}

impl Slots {
    pub fn new(bytes_per_position: usize, budget: usize) -> Self {
        Slots {
            slots: vec![],
            cap: 0,
            bytes_per_position,
            budget,
            peak_bytes: 0,
            serials: 0,
            moves: vec![],
            first_room: None,
            allocations: 0,
        }
    }

    pub fn rows(&self) -> usize {
        self.slots.len()
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn bytes(&self) -> usize {
        self.rows() * self.cap * self.bytes_per_position
    }

    /// The capacity rows need to hold `need` positions: never less than now, in steps of 64.
    pub fn positions_for(&self, need: usize) -> usize {
        need.max(self.cap).next_multiple_of(64)
    }

    pub fn bytes_for(&self, rows: usize, cap: usize) -> usize {
        rows * cap * self.bytes_per_position
    }

    /// The moves decided since the last call, for the runner to apply in order.
    pub fn take_moves(&mut self) -> Vec<Move> {
        std::mem::take(&mut self.moves)
    }

    /// Forgets every cached sequence (the tensors are released beside it).
    pub fn clear(&mut self) {
        (self.slots, self.cap, self.moves) = (vec![], 0, vec![]);
    }

    /// Row `row` as a fresh, empty sequence for `owner`.
    pub fn claim(&mut self, row: usize, owner: u64, now: u64) {
        self.serials += 1;
        self.slots[row] = Slot { ids: vec![], owner: Some(owner), used: now, serial: self.serials };
    }

    pub fn find(&self, serial: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.serial == serial && s.owner.is_some())
    }

    /// `rows` × `cap` (each at least the current), keeping every row's data.
    pub fn grow(&mut self, rows: usize, cap: usize) -> Result<()> {
        let (mut rows, mut cap) = (rows.max(self.rows()), cap.max(self.cap));
        if rows == self.rows() && cap == self.cap {
            return Ok(());
        }
        if let Some(least) = self.first_room
            && self.rows() == 0
        {
            let more = rows.max(least);
            if self.bytes_for(more, 2 * cap) <= self.budget {
                (rows, cap) = (more, 2 * cap);
            } else if self.bytes_for(more, cap) <= self.budget {
                rows = more;
            }
        }
        if self.bytes_for(rows, cap) > self.budget {
            return Err(self.over_budget(rows, cap));
        }
        self.cap = cap;
        self.slots.resize_with(rows, Slot::default);
        self.peak_bytes = self.peak_bytes.max(self.bytes());
        self.allocations += 1;
        self.moves.push(Move::Grow { rows, cap });
        Ok(())
    }

    /// Keeps rows `0..rows` and releases the rest.
    pub fn truncate(&mut self, rows: usize) {
        if rows < self.rows() {
            self.slots.truncate(rows);
            self.allocations += 1;
            self.moves.push(Move::Truncate { rows });
        }
    }

    pub fn over_budget(&self, rows: usize, cap: usize) -> Error {
        Error::Invalid(format!(
            "the KV cache needs {} MiB for {rows} sequences of {cap} positions, over its budget of {} MiB \
             (raise the engine's kv_cache_mib or lower max_batch)",
            self.bytes_for(rows, cap).div_ceil(1 << 20),
            self.budget >> 20
        ))
    }

    /// Exchanges rows `a` and `b`, data and metadata (only their used positions move).
    pub fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        let positions = self.slots[a].ids.len().max(self.slots[b].ids.len());
        if positions > 0 {
            self.moves.push(Move::Swap { a, b, positions });
        }
        self.slots.swap(a, b);
    }

    /// Row `to` starts with the first `n` positions of row `from`.
    pub fn copy_prefix(&mut self, from: usize, to: usize, n: usize) {
        if n > 0 {
            self.moves.push(Move::CopyPrefix { from, to, len: n });
        }
        self.slots[to].ids = self.slots[from].ids[..n].to_vec();
    }
}
