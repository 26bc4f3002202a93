use crate::{Error, Qwen2Config, Result};
use tch::{Device, Kind, Tensor};

/// Keys and values of the positions already processed, per layer, preallocated to a fixed
/// capacity so a decoding step writes in place instead of re-concatenating.
///
/// It is a plain value the caller owns and passes to each forward: the model holds no state,
/// so the same weights serve many concurrent generations and training forwards.
pub struct KvCache {
    keys: Vec<Tensor>,
    values: Vec<Tensor>,
    len: usize,
    capacity: usize,
}

impl KvCache {
    /// An empty cache for `batch` sequences of up to `capacity` positions.
    pub fn new(config: &Qwen2Config, batch: usize, capacity: usize, kind: Kind, device: Device) -> Self {
        let shape = [batch as i64, config.num_key_value_heads as i64, capacity as i64, config.head_dim as i64];
        let make = || (0..config.num_hidden_layers).map(|_| Tensor::zeros(shape, (kind, device))).collect();
        KvCache { keys: make(), values: make(), len: 0, capacity }
    }

    /// Bytes the keys and values of one position take over every layer.
    pub fn bytes_per_position(config: &Qwen2Config, kind: Kind) -> usize {
        2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim * kind.elt_size_in_bytes()
    }

    /// Positions stored so far.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn check_room(&self, extra: usize) -> Result<()> {
        if self.len + extra > self.capacity {
            return Err(Error::Invalid(format!(
                "KV cache holds {} of {} positions; {extra} more do not fit",
                self.len, self.capacity
            )));
        }
        Ok(())
    }

    /// Writes this step's keys and values for `layer` after the stored ones and returns all
    /// of them, `[batch, kv_heads, len + new, head_dim]`.
    pub(crate) fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        let new = k.size()[2];
        let start = self.len as i64;
        self.keys[layer].narrow(2, start, new).copy_(k);
        self.values[layer].narrow(2, start, new).copy_(v);
        (self.keys[layer].narrow(2, 0, start + new), self.values[layer].narrow(2, 0, start + new))
    }

    pub(crate) fn advance(&mut self, new: usize) {
        self.len += new;
    }
}

/// What attention needs from a cache, whatever its layout: keep this call's keys and values
/// for `layer` and hand back every key and value the queries attend over.
pub(crate) trait LayerCache {
    /// `k`, `v`: `[batch, kv_heads, new, head_dim]`; returns `[batch, kv_heads, keys, head_dim]`.
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor);
    /// Whether grouped-query heads are folded into the query length (the keys and values
    /// are then read as stored, never repeated), instead of repeating the keys and values.
    fn fold_heads(&self) -> bool {
        false
    }
    /// Attention of `q` `[batch, heads, new, head_dim]` over what [`Self::append`] kept, when
    /// the cache computes it itself (flash attention over its rows); `None`: the caller's SDPA
    /// over the returned keys and values.
    fn attend(&self, _layer: usize, _q: &Tensor) -> Option<Tensor> {
        None
    }
}

impl LayerCache for KvCache {
    fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> (Tensor, Tensor) {
        KvCache::append(self, layer, k, v)
    }
}
