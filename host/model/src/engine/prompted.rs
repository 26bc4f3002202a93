//! A request's prompt as the engine compares and positions it: content keys per position
//! (token ids; for image tokens a key of the pixels and the token's place), and a VL
//! prompt's M-RoPE positions and image runs.

use super::EngineRequest;
use crate::image_processor::PixelValues;
use crate::vl::MropePositions;
use crate::{Error, Result, Vision};
use tch::Kind;

/// A request's prompt as the engine compares and positions it.
pub(super) struct Prompted {
    /// The prompt's content keys (what a cached row's `ids` are compared with; the
    /// scheduler takes them).
    pub content: Vec<u64>,
    /// A VL prompt's M-RoPE positions.
    pub mrope: Option<MropePositions>,
    /// Each image's pad run `[start, end)` in the prompt.
    pub runs: Vec<(usize, usize)>,
}

impl Prompted {
    /// A served adapter's prompts get content keys of their own, so no cached prefix is
    /// shared across adapters (their keys and values differ).
    pub fn new(vision: Option<&Vision>, r: &EngineRequest) -> Result<Self> {
        let mut prompted = Self::keyed(vision, r)?;
        if r.adapter > 0 {
            for c in &mut prompted.content {
                *c ^= (r.adapter as u64) << ADAPTER_SHIFT;
            }
        }
        Ok(prompted)
    }

    fn keyed(vision: Option<&Vision>, r: &EngineRequest) -> Result<Self> {
        let Some(v) = vision else {
            if !r.images.is_empty() {
                return Err(Error::Invalid("a text-only model (no vision tower) cannot take images".into()));
            }
            return Ok(Prompted { content: r.ids.iter().map(|&t| t as u64).collect(), mrope: None, runs: vec![] });
        };
        let grids: Vec<[usize; 3]> = r.images.iter().map(|p| p.grid).collect();
        let mrope = v.positions(&r.ids, &grids)?;
        let pad = v.config.image_token_id;
        let merge = v.config.vision.spatial_merge_size;
        let mut content: Vec<u64> = r.ids.iter().map(|&t| t as u64).collect();
        let mut runs = vec![];
        let mut at = 0;
        for image in &r.images {
            let start = at + r.ids[at..].iter().position(|&t| t == pad).expect("positions checked the pads");
            let end = start + image.tokens(merge);
            let key = image_key(image)?;
            for (k, c) in content[start..end].iter_mut().enumerate() {
                *c = IMAGE_CONTENT | (key.wrapping_add(k as u64) >> 1);
            }
            runs.push((start, end));
            at = end;
        }
        Ok(Prompted { content, mrope: Some(mrope), runs })
    }
}

/// Content keys of image tokens have the top bit set (token ids never do).
const IMAGE_CONTENT: u64 = 1 << 63;
/// Where a served adapter's index goes in content keys: above any token id, below the
/// image bit.
const ADAPTER_SHIFT: u32 = 40;

/// A key of an image's pixels and grid.
fn image_key(image: &PixelValues) -> Result<u64> {
    use std::hash::{Hash, Hasher};
    let values = Vec::<f32>::try_from(image.values.flatten(0, -1).to_kind(Kind::Float))?;
    let mut h = std::hash::DefaultHasher::new();
    image.grid.hash(&mut h);
    values.iter().for_each(|v| v.to_bits().hash(&mut h));
    Ok(h.finish())
}
