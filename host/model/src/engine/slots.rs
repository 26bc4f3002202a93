//! The engine's key/value store: one row per cached sequence, `[rows, kv_heads, capacity,
//! head_dim]` per layer, with the sequences being decoded kept in rows `0..m` so a step
//! attends over a narrowed view (no copy). A row that leaves the decode batch is swapped
//! past the active ones and stays cached: its trajectory's next turn, or a sibling with the
//! same prompt, starts from it.
//!
//! Why rows and not pages: libtorch has no paged-attention kernel, and gathering a paged
//! layout into contiguous keys every step would copy the whole cache per layer and step.
//! Here data moves only when the decode batch changes (a swap copies the two rows' used
//! positions), and memory is bounded by a byte budget with least-recently-used eviction.

use crate::kv_cache::LayerCache;
use crate::{Error, Qwen2Config, Result};
use tch::{Device, Kind, Tensor};

/// What a row holds.
#[derive(Clone, Default)]
pub(crate) struct Slot {
    /// What the row holds, position by position: token ids, and for an image's tokens a key
    /// of the image's pixels and the token's place in it (see `engine::content`), so two
    /// prompts that differ only in an image's pixels share nothing past it.
    pub ids: Vec<u64>,
    /// The request key (trajectory) the row was last extended for; `None`: free.
    pub owner: Option<u64>,
    /// When the row was last used (the engine's call counter), for eviction.
    pub used: u64,
    /// Identifies the row's content wherever swaps move it.
    pub serial: u64,
}

pub(crate) struct SlotStore {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    pub slots: Vec<Slot>,
    cap: usize,
    kv_heads: i64,
    head_dim: i64,
    layers: usize,
    kind: Kind,
    device: Device,
    bytes_per_position: usize,
    pub budget: usize,
    pub peak_bytes: usize,
    serials: u64,
}

impl SlotStore {
    pub fn new(c: &Qwen2Config, kind: Kind, device: Device, budget: usize) -> Self {
        SlotStore {
            keys: vec![],
            values: vec![],
            slots: vec![],
            cap: 0,
            kv_heads: c.num_key_value_heads as i64,
            head_dim: c.head_dim as i64,
            layers: c.num_hidden_layers,
            kind,
            device,
            bytes_per_position: crate::KvCache::bytes_per_position(c, kind),
            budget,
            peak_bytes: 0,
            serials: 0,
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

    pub fn bytes_for(&self, rows: usize, cap: usize) -> usize {
        rows * cap * self.bytes_per_position
    }

    /// Forgets every cached sequence and releases the memory.
    pub fn clear(&mut self) {
        (self.keys, self.values, self.slots, self.cap) = (vec![], vec![], vec![], 0);
    }

    /// Row `row` as a fresh, empty sequence for `owner`.
    pub fn claim(&mut self, row: usize, owner: u64, now: u64) {
        self.serials += 1;
        self.slots[row] = Slot { ids: vec![], owner: Some(owner), used: now, serial: self.serials };
    }

    pub fn find(&self, serial: u64) -> Option<usize> {
        self.slots.iter().position(|s| s.serial == serial && s.owner.is_some())
    }

    /// Reallocates to `rows` × `cap` (each at least the current), keeping every row's data.
    pub fn grow(&mut self, rows: usize, cap: usize) -> Result<()> {
        let (rows, cap) = (rows.max(self.rows()), cap.max(self.cap));
        if rows == self.rows() && cap == self.cap {
            return Ok(());
        }
        if self.bytes_for(rows, cap) > self.budget {
            return Err(self.over_budget(rows, cap));
        }
        let shape = [rows as i64, self.kv_heads, cap as i64, self.head_dim];
        let (old_rows, old_cap) = (self.rows() as i64, self.cap as i64);
        let grown = |old: &[Tensor]| -> Vec<Tensor> {
            (0..self.layers)
                .map(|l| {
                    let t = Tensor::zeros(shape, (self.kind, self.device));
                    if let Some(o) = old.get(l)
                        && old_rows > 0
                        && old_cap > 0
                    {
                        t.narrow(0, 0, old_rows).narrow(2, 0, old_cap).copy_(o);
                    }
                    t
                })
                .collect()
        };
        let (keys, values) = (grown(&self.keys), grown(&self.values));
        (self.keys, self.values, self.cap) = (keys, values, cap);
        self.slots.resize_with(rows, Slot::default);
        self.peak_bytes = self.peak_bytes.max(self.bytes());
        Ok(())
    }

    /// Keeps rows `0..rows` (and their data) and releases the rest.
    pub fn truncate(&mut self, rows: usize) {
        if rows >= self.rows() {
            return;
        }
        let keep = |t: &Tensor| t.narrow(0, 0, rows as i64).copy();
        self.keys = self.keys.iter().map(keep).collect();
        self.values = self.values.iter().map(keep).collect();
        self.slots.truncate(rows);
    }

    pub fn over_budget(&self, rows: usize, cap: usize) -> Error {
        Error::Invalid(format!(
            "the KV cache needs {} MiB for {rows} sequences of {cap} positions, over its budget of {} MiB \
             (raise the engine's kv_cache_mib or lower max_batch)",
            self.bytes_for(rows, cap).div_ceil(1 << 20),
            self.budget >> 20
        ))
    }

    /// Exchanges rows `a` and `b`, data and metadata (only their used positions are copied).
    pub fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        let n = self.slots[a].ids.len().max(self.slots[b].ids.len()) as i64;
        if n > 0 {
            for t in self.keys.iter().chain(&self.values) {
                let (mut ra, mut rb) = (t.get(a as i64).narrow(1, 0, n), t.get(b as i64).narrow(1, 0, n));
                let held = ra.copy();
                ra.copy_(&rb);
                rb.copy_(&held);
            }
        }
        self.slots.swap(a, b);
    }

    /// Row `to` starts with the first `n` positions of row `from`.
    pub fn copy_prefix(&mut self, from: usize, to: usize, n: usize) {
        if n > 0 {
            for t in self.keys.iter().chain(&self.values) {
                let mut to_row = t.get(to as i64).narrow(1, 0, n as i64);
                to_row.copy_(&t.get(from as i64).narrow(1, 0, n as i64));
            }
        }
        self.slots[to].ids = self.slots[from].ids[..n].to_vec();
    }

    /// A cache over rows `start..start + starts.len()`: row i keeps the first `lens[i]` new
    /// positions (the rest are padding) from `starts[i]` on; attention reads the first
    /// `keys` positions.
    pub fn view(&mut self, start: usize, starts: &[usize], lens: &[usize], keys: usize) -> RowsView<'_> {
        let n = starts.len() as i64;
        let index = lens.iter().all(|&l| l == 1).then(|| {
            let s: Vec<i64> = starts.iter().map(|&s| s as i64).collect();
            Tensor::from_slice(&s)
                .to_device(self.device)
                .view([n, 1, 1, 1])
                .expand([n, self.kv_heads, 1, self.head_dim], false)
        });
        RowsView {
            store: self,
            start: start as i64,
            starts: starts.to_vec(),
            lens: lens.to_vec(),
            index,
            keys: keys as i64,
        }
    }
}

pub(crate) struct RowsView<'a> {
    store: &'a mut SlotStore,
    start: i64,
    starts: Vec<usize>,
    lens: Vec<usize>,
    /// For one new position per row: where it goes, as `scatter_` wants it.
    index: Option<Tensor>,
    keys: i64,
}

impl RowsView<'_> {
    fn write(&self, store: &Tensor, new: &Tensor) -> Tensor {
        let n = self.starts.len() as i64;
        let mut rows = store.narrow(0, self.start, n);
        match &self.index {
            Some(index) if new.size()[2] == 1 => {
                let _ = rows.scatter_(2, index, new);
            }
            _ => {
                for (i, (&s, &l)) in self.starts.iter().zip(&self.lens).enumerate() {
                    let (s, l) = (s as i64, l as i64);
                    let mut row = rows.get(i as i64).narrow(1, s, l);
                    row.copy_(&new.get(i as i64).narrow(1, 0, l));
                }
            }
        }
        rows.narrow(2, 0, self.keys)
    }
}

impl LayerCache for RowsView<'_> {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        (self.write(&self.store.keys[layer], k), self.write(&self.store.values[layer], v))
    }
    fn fold_heads(&self) -> bool {
        true
    }
}
