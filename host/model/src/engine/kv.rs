//! The engine's key/value tensors, `[rows, kv_heads, capacity, head_dim]` per layer: the
//! [`Move`]s the scheduler decided, applied in order, and a view of a run of rows for a
//! forward. For the padded decode (`padded.rs`) the tensors keep rows past the scheduler's:
//! as many as the largest batch bucket, and one more that padding rows write into.
//!
//! Where attention is flash's (which reads any row), the scheduler's rows are slots: a map
//! from its row to the tensors' row, so a [`Move::Swap`] swaps two entries and copies
//! nothing; a row's data stays where it was written until the cache is reallocated.

use super::slots::Move;
use crate::flash::{Kernel, Sequences};
use crate::kv_cache::LayerCache;
use crate::{Qwen2Config, Result};
use tch::{Device, Kind, Tensor};

pub(crate) struct KvRows {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    kv_heads: i64,
    head_dim: i64,
    layers: usize,
    kind: Kind,
    device: Device,
    /// Rows the tensors keep at least (besides the padding row), when the decode is padded.
    pub padded_rows: Option<usize>,
    /// Counts reallocations: a CUDA graph holds the tensors' addresses of its generation.
    pub generation: u64,
    /// Where attention reads any row (flash): the tensors' row of each of the scheduler's
    /// rows (the padding row apart). `None`: the scheduler's row i is row i.
    slots: Option<Vec<usize>>,
}

impl KvRows {
    pub fn new(c: &Qwen2Config, kind: Kind, device: Device) -> Self {
        KvRows {
            keys: vec![],
            values: vec![],
            kv_heads: c.num_key_value_heads as i64,
            head_dim: c.head_dim as i64,
            layers: c.num_hidden_layers,
            kind,
            device,
            padded_rows: None,
            generation: 0,
            slots: None,
        }
    }

    /// Makes the scheduler's rows slots (attention reads any row) before anything is
    /// cached; no effect once the tensors exist.
    pub fn use_slots(&mut self) {
        if self.keys.is_empty() && self.slots.is_none() {
            self.slots = Some(vec![]);
        }
    }

    /// The tensors' row holding the scheduler's row `row`.
    pub fn slot(&self, row: usize) -> usize {
        self.slots.as_ref().map_or(row, |s| s[row])
    }

    /// How many rows of the tensors the scheduler's rows map onto (the padding row apart).
    fn mapped(&self, physical: usize) -> usize {
        physical - usize::from(self.padded_rows.is_some() && physical > 0)
    }

    /// Releases the memory.
    pub fn clear(&mut self) {
        (self.keys, self.values) = (vec![], vec![]);
        if let Some(slots) = &mut self.slots {
            slots.clear();
        }
        self.generation += 1;
    }

    /// Rows the tensors hold for `rows` of the scheduler's.
    fn physical(&self, rows: usize) -> usize {
        self.padded_rows.map_or(rows, |least| rows.max(least) + 1)
    }

    /// `(rows, capacity)` of the tensors.
    pub fn shape(&self) -> (usize, usize) {
        self.keys.first().map_or((0, 0), |t| (t.size()[0] as usize, t.size()[2] as usize))
    }

    pub fn apply(&mut self, moves: &[Move]) -> Result<()> {
        for m in moves {
            match *m {
                Move::Grow { rows, cap } => self.grow(rows, cap)?,
                Move::Truncate { rows } => {
                    let rows = self.physical(rows);
                    // The scheduler's first rows (from wherever they sit), then the padding row.
                    let mut kept: Vec<i64> = (0..self.mapped(rows)).map(|r| self.slot(r) as i64).collect();
                    kept.extend(self.padded_rows.map(|_| self.padding_row()));
                    let index = crate::device::upload(&kept, self.device);
                    let keep = |t: &Tensor| t.index_select(0, &index);
                    self.keys = self.keys.iter().map(keep).collect();
                    self.values = self.values.iter().map(keep).collect();
                    let mapped = self.mapped(rows);
                    if let Some(slots) = &mut self.slots {
                        *slots = (0..mapped).collect();
                    }
                    self.generation += 1;
                }
                Move::Swap { a, b, .. } if self.slots.is_some() => {
                    self.slots.as_mut().expect("slots").swap(a, b);
                }
                Move::Swap { a, b, positions } => {
                    for t in self.keys.iter().chain(&self.values) {
                        let n = positions as i64;
                        let (mut ra, mut rb) = (t.get(a as i64).narrow(1, 0, n), t.get(b as i64).narrow(1, 0, n));
                        let held = ra.copy();
                        ra.copy_(&rb);
                        rb.copy_(&held);
                    }
                }
                Move::CopyPrefix { from, to, len } => {
                    let (from, to) = (self.slot(from) as i64, self.slot(to) as i64);
                    for t in self.keys.iter().chain(&self.values) {
                        let mut to_row = t.get(to).narrow(1, 0, len as i64);
                        to_row.copy_(&t.get(from).narrow(1, 0, len as i64));
                    }
                }
            }
        }
        Ok(())
    }

    fn grow(&mut self, rows: usize, cap: usize) -> Result<()> {
        let shape = [self.physical(rows) as i64, self.kv_heads, cap as i64, self.head_dim];
        let (old_rows, old_cap) = self.shape();
        let (old_rows, old_cap) = (old_rows as i64, old_cap as i64);
        let grown = |old: &[Tensor]| -> Result<Vec<Tensor>> {
            (0..self.layers)
                .map(|l| {
                    let t = Tensor::f_zeros(shape, (self.kind, self.device))?;
                    if let Some(o) = old.get(l)
                        && old_rows > 0
                        && old_cap > 0
                    {
                        t.narrow(0, 0, old_rows).narrow(2, 0, old_cap).f_copy_(o)?;
                    }
                    Ok(t)
                })
                .collect()
        };
        let (keys, values) = (grown(&self.keys)?, grown(&self.values)?);
        (self.keys, self.values) = (keys, values);
        // Rows keep their places; the new ones (the old padding row among them) map to themselves.
        let mapped = self.mapped(shape[0] as usize);
        if let Some(slots) = &mut self.slots {
            slots.extend(slots.len()..mapped);
        }
        self.generation += 1;
        Ok(())
    }

    /// The cache a padded decode writes and reads: batch row i writes its new position at
    /// `inputs[2][i]`'s row, place `inputs[1][i]` (padding rows: the padding row, place 0).
    /// Attention reads rows `0..batch`, positions `0..keys`, masked by the caller; or, with
    /// `flash`, computes itself over each row's own positions (row `inputs[2][i]`, up to its
    /// new one).
    pub fn padded(&self, inputs: &Tensor, keys: i64, flash: Option<Kernel>) -> PaddedRows<'_> {
        let (places, rows) = (inputs.get(1), inputs.get(2));
        let sequences = flash.map(|kernel| Sequences::decode(kernel, &rows, &(&places + 1), self.store_shape(), keys));
        PaddedRows { store: self, places, rows, keys, sequences }
    }

    /// `[rows, kv_heads, capacity, head_dim]` of every layer's tensors.
    fn store_shape(&self) -> [i64; 4] {
        self.keys[0].size().try_into().expect("a cache tensor has 4 dimensions")
    }

    /// The row padding rows write into.
    pub fn padding_row(&self) -> i64 {
        self.shape().0 as i64 - 1
    }

    /// A cache over rows `start..start + starts.len()`: row i keeps the first `lens[i]` new
    /// positions (the rest are padding) from `starts[i]` on; attention reads the first
    /// `keys` positions, masked by the caller, or with `flash` computes itself, each new
    /// position seeing its row's keys up to its own.
    pub fn view(
        &mut self,
        start: usize,
        starts: &[usize],
        lens: &[usize],
        keys: usize,
        flash: Option<Kernel>,
    ) -> RowsView<'_> {
        let n = starts.len() as i64;
        let one_each = lens.iter().all(|&l| l == 1);
        let upload = |x: Vec<i64>| crate::device::upload(&x, self.device);
        let slots: Vec<i64> = (start..start + starts.len()).map(|r| self.slot(r) as i64).collect();
        let places = || upload(starts.iter().map(|&s| s as i64).collect());
        let index = match self.slots {
            // Rows anywhere: each new position written at (its slot, its place).
            Some(_) => one_each.then(|| Written::At(upload(slots.clone()), places())),
            None => one_each.then(|| {
                Written::Scatter(places().view([n, 1, 1, 1]).expand([n, self.kv_heads, 1, self.head_dim], false))
            }),
        };
        let sequences = flash.map(|kernel| {
            let t = lens.iter().copied().max().unwrap_or(1);
            Sequences::prefill(kernel, &slots, starts, lens, t, self.store_shape(), self.device)
        });
        RowsView {
            sequences,
            slots,
            store: self,
            start: start as i64,
            starts: starts.to_vec(),
            lens: lens.to_vec(),
            index,
            keys: keys as i64,
        }
    }
}

/// How a forward of one new position a row writes them: scattered into a run of rows, or
/// put at each row's slot and place.
enum Written {
    Scatter(Tensor),
    At(Tensor, Tensor),
}

pub(crate) struct RowsView<'a> {
    store: &'a mut KvRows,
    sequences: Option<Sequences>,
    /// The tensors' row of each row of the view.
    slots: Vec<i64>,
    start: i64,
    starts: Vec<usize>,
    lens: Vec<usize>,
    /// For one new position per row: where it goes.
    index: Option<Written>,
    keys: i64,
}

impl RowsView<'_> {
    fn write(&self, store: &Tensor, new: &Tensor) -> Tensor {
        let n = self.starts.len() as i64;
        let mut rows = store.narrow(0, self.start, n);
        match &self.index {
            Some(Written::Scatter(index)) if new.size()[2] == 1 => {
                let _ = rows.scatter_(2, index, new);
            }
            Some(Written::At(slots, places)) if new.size()[2] == 1 => {
                let at = [Some(slots.shallow_clone()), None, Some(places.shallow_clone())];
                let _ = store.shallow_clone().index_put_(&at, &new.select(2, 0), false);
            }
            _ => {
                for (i, (&s, &l)) in self.starts.iter().zip(&self.lens).enumerate() {
                    let (s, l) = (s as i64, l as i64);
                    let mut row = store.get(self.slots[i]).narrow(1, s, l);
                    row.copy_(&new.get(i as i64).narrow(1, 0, l));
                }
            }
        }
        // With slots, attention is flash's, which reads the tensors themselves.
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
    fn attend(&self, layer: usize, q: &Tensor) -> Option<Tensor> {
        attend(self.sequences.as_ref()?, q, &self.store.keys[layer], &self.store.values[layer])
    }
}

/// The attention mask of a decode step, `[rows, 1, 1, keys]`: row i's query (at `places[i]`)
/// sees the keys up to its own place.
pub(crate) fn decode_mask(places: &Tensor, keys: i64) -> Tensor {
    let rows = places.size()[0];
    Tensor::arange(keys, (Kind::Int64, places.device())).view([1, 1, 1, -1]).le_tensor(&places.view([rows, 1, 1, 1]))
}

pub(crate) struct PaddedRows<'a> {
    store: &'a KvRows,
    places: Tensor,
    rows: Tensor,
    keys: i64,
    sequences: Option<Sequences>,
}

impl PaddedRows<'_> {
    fn write(&self, store: &Tensor, new: &Tensor) -> Tensor {
        let indices = [Some(self.rows.shallow_clone()), None, Some(self.places.shallow_clone())];
        let _ = store.shallow_clone().index_put_(&indices, &new.select(2, 0), false);
        store.narrow(0, 0, self.rows.size()[0]).narrow(2, 0, self.keys)
    }
}

impl LayerCache for PaddedRows<'_> {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        (self.write(&self.store.keys[layer], k), self.write(&self.store.values[layer], v))
    }
    fn fold_heads(&self) -> bool {
        true
    }
    fn attend(&self, layer: usize, q: &Tensor) -> Option<Tensor> {
        attend(self.sequences.as_ref()?, q, &self.store.keys[layer], &self.store.values[layer])
    }
}

/// Attention through `sequences`' kernel, which the engine checked on this device before
/// choosing it (`flash::Choice`): a failure now is a bug, raised as tch raises its own.
fn attend(sequences: &Sequences, q: &Tensor, keys: &Tensor, values: &Tensor) -> Option<Tensor> {
    Some(sequences.attend(q, keys, values).unwrap_or_else(|e| panic!("{e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of the scheduler's rows' first key, read from the tensors' row its slot names.
    fn firsts(kv: &KvRows, rows: usize) -> Vec<f64> {
        (0..rows).map(|r| kv.keys[0].get(kv.slot(r) as i64).get(0).get(0).get(0).double_value(&[])).collect()
    }

    #[test]
    fn slots_move_by_their_map_and_truncation_keeps_the_rows_where_they_sit() {
        let config = crate::default_model::default_config();
        let mut kv = KvRows::new(&config, Kind::Float, Device::Cpu);
        kv.padded_rows = Some(2);
        kv.use_slots();
        kv.apply(&[Move::Grow { rows: 4, cap: 8 }]).unwrap();
        assert_eq!(kv.shape(), (5, 8), "4 rows and the padding row");
        for r in 0..4 {
            let _ = kv.keys[0].get(r).fill_(r as f64 + 1.0);
        }
        kv.apply(&[Move::Swap { a: 0, b: 3, positions: 8 }, Move::Swap { a: 1, b: 2, positions: 8 }]).unwrap();
        assert_eq!(firsts(&kv, 4), [4.0, 3.0, 2.0, 1.0], "swapped by the map");
        assert_eq!(kv.keys[0].get(0).get(0).get(0).get(0).double_value(&[]), 1.0, "no data moved");
        kv.apply(&[Move::CopyPrefix { from: 0, to: 2, len: 8 }]).unwrap();
        assert_eq!(firsts(&kv, 4), [4.0, 3.0, 4.0, 1.0]);
        kv.apply(&[Move::Truncate { rows: 3 }]).unwrap();
        assert_eq!(kv.shape(), (4, 8));
        assert_eq!(firsts(&kv, 3), [4.0, 3.0, 4.0], "the first rows kept, from where they sat");
        kv.apply(&[Move::Grow { rows: 6, cap: 16 }]).unwrap();
        assert_eq!((kv.shape(), firsts(&kv, 3)), ((7, 16), vec![4.0, 3.0, 4.0]));
        assert_eq!(kv.padding_row(), 6);
        assert!((0..6).all(|r| kv.slot(r) != 6), "no row maps onto the padding row");
    }
}
