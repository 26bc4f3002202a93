//! What turns a Qwen2 decoder into Qwen2.5-VL: image-pad tokens expanded to each image's
//! token count, their embeddings replaced by the vision tower's features, and M-RoPE
//! positions (t, h, w) following transformers' `get_rope_index`.

use crate::image_processor::{ImageProcessor, PixelValues};
use crate::vision::VisionTower;
use crate::{Error, Qwen2ForCausalLM, Qwen2Model, Qwen2VlConfig, Result};
use tch::{Device, Kind, Tensor};

/// The vision half of a VL model.
pub struct Vision {
    pub tower: VisionTower,
    pub config: Qwen2VlConfig,
    pub processor: ImageProcessor,
}

/// A prompt ready for a VL model: token ids with every image's pad token expanded to the
/// image's token count, and the images' pixels in the order their pads appear.
#[derive(Debug)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub images: Vec<PixelValues>,
}

impl Prompt {
    /// A prompt without images.
    pub fn text(ids: Vec<u32>) -> Self {
        Prompt { ids, images: vec![] }
    }

    pub fn grids(&self) -> Vec<[usize; 3]> {
        self.images.iter().map(|p| p.grid).collect()
    }
}

/// M-RoPE positions of one unpadded sequence: `(t, h, w)` per token, and the delta that
/// carries the text position into generation (`max + 1 - len`).
pub struct MropePositions {
    pub positions: Vec<[i64; 3]>,
    pub delta: i64,
}

impl Vision {
    /// Expands each image-pad token of `ids` (one per image, as the chat template writes
    /// it) to the image's token count.
    pub fn expand(&self, ids: &[u32], images: Vec<PixelValues>) -> Result<Prompt> {
        let pad = self.config.image_token_id;
        let pads = ids.iter().filter(|&&t| t == pad).count();
        if pads != images.len() {
            return Err(Error::Invalid(format!(
                "the prompt has {pads} image placeholder(s) (<image> markers) but {} image(s) were given",
                images.len()
            )));
        }
        let merge = self.config.vision.spatial_merge_size;
        let mut out = Vec::with_capacity(ids.len() + images.iter().map(|i| i.tokens(merge)).sum::<usize>());
        let mut next = images.iter();
        for &t in ids {
            if t == pad {
                let n = next.next().expect("counted above").tokens(merge);
                out.extend(std::iter::repeat_n(pad, n));
            } else {
                out.push(t);
            }
        }
        Ok(Prompt { ids: out, images })
    }

    /// transformers' `get_rope_index` for one sequence without padding: text tokens count
    /// up on all three axes; an image's tokens sit at (start, start + row, start + column)
    /// of its merged grid, and the text after it resumes at start + max(rows, columns).
    pub fn positions(&self, ids: &[u32], grids: &[[usize; 3]]) -> Result<MropePositions> {
        let pad = self.config.image_token_id;
        let merge = self.config.vision.spatial_merge_size;
        let mut positions = Vec::with_capacity(ids.len());
        let mut grids = grids.iter();
        let mut current = 0i64;
        let mut i = 0;
        while i < ids.len() {
            if ids[i] != pad {
                positions.push([current; 3]);
                current += 1;
                i += 1;
                continue;
            }
            let &[t, h, w] =
                grids.next().ok_or_else(|| Error::Invalid("more image-pad tokens than images in the prompt".into()))?;
            let (mh, mw) = (h / merge, w / merge);
            let n = t * mh * mw;
            if ids[i..].len() < n || ids[i..i + n].iter().any(|&x| x != pad) {
                return Err(Error::Invalid(format!(
                    "an image of {mh}x{mw} merged patches needs {n} consecutive image-pad tokens"
                )));
            }
            for f in 0..t {
                for y in 0..mh {
                    for x in 0..mw {
                        positions.push([current + f as i64, current + y as i64, current + x as i64]);
                    }
                }
            }
            current += mh.max(mw) as i64;
            i += n;
        }
        if grids.next().is_some() {
            return Err(Error::Invalid("more images than image-pad tokens in the prompt".into()));
        }
        let max = positions.iter().flat_map(|p| p.iter().copied()).max().unwrap_or(-1);
        Ok(MropePositions { delta: max + 1 - ids.len() as i64, positions })
    }

    /// Token embeddings of `ids` `[batch, seq]` with the image-pad rows replaced by the
    /// features of `images` (all rows' images, row by row, in pad order).
    pub fn embed(&self, model: &Qwen2Model, ids: &Tensor, images: &[&PixelValues]) -> Result<Tensor> {
        let embeds = model.embed(ids);
        if images.is_empty() {
            return Ok(embeds);
        }
        let pixels = Tensor::cat(&images.iter().map(|p| &p.values).collect::<Vec<_>>(), 0);
        let grids: Vec<[usize; 3]> = images.iter().map(|p| p.grid).collect();
        let features = self.tower.forward(&pixels, &grids).to_kind(embeds.kind());
        let mask = ids.eq(self.config.image_token_id as i64);
        let pads = mask.sum(Kind::Int64).int64_value(&[]);
        if pads != features.size()[0] {
            return Err(Error::Invalid(format!(
                "{pads} image-pad tokens for {} image tokens of {} image(s)",
                features.size()[0],
                images.len()
            )));
        }
        Ok(embeds.masked_scatter(&mask.unsqueeze(-1).expand_as(&embeds), &features))
    }

    /// Logits `[batch, longest, vocab]` (f32) of whole sequences with their images, right
    /// padded, and the padded ids: the training forward. Gradients reach the language model
    /// and, unless it is frozen ([`crate::Model::set_vision_trainable`]), the vision tower.
    pub fn logits(&self, lm: &Qwen2ForCausalLM, sequences: &[&Prompt]) -> Result<(Tensor, Tensor)> {
        let device = lm.model.device();
        let rows: Vec<&[u32]> = sequences.iter().map(|p| p.ids.as_slice()).collect();
        let ids = crate::qwen2::right_pad(&rows, device);
        let grids: Vec<Vec<[usize; 3]>> = sequences.iter().map(|p| p.grids()).collect();
        let positions = self.right_padded_positions(&rows, &grids, ids.size()[1] as usize, device)?;
        let images: Vec<&PixelValues> = sequences.iter().flat_map(|p| &p.images).collect();
        let hidden = hidden_states(&lm.model, Some(self), &ids, &positions, &images)?;
        Ok((lm.logits(&hidden), ids))
    }

    /// The tokens that place images in the text. A VL model's answers never hold them: a
    /// sampled one would read as an image in the next prompt (and fail its positions), so
    /// generation and the training forward alike give them no probability.
    pub fn placeholder_tokens(&self) -> [u32; 4] {
        let c = &self.config;
        [c.image_token_id, c.video_token_id, c.vision_start_token_id, c.vision_end_token_id]
    }

    /// `logits` `[.., vocab]` (f32) with the placeholder tokens out of reach: far below any
    /// logit but finite, so entropies over them stay 0 · log 0 = 0 rather than NaN.
    pub fn suppress_placeholders(&self, logits: &Tensor) -> Tensor {
        let ids: Vec<i64> = self.placeholder_tokens().iter().map(|&t| t as i64).collect();
        suppress(logits, &crate::device::upload(&ids, logits.device()))
    }

    /// `[3, rows, width]` M-RoPE positions of right-padded rows, each with its images'
    /// grids.
    pub fn right_padded_positions(
        &self,
        rows: &[&[u32]],
        grids: &[Vec<[usize; 3]>],
        width: usize,
        device: Device,
    ) -> Result<Tensor> {
        let positions: Vec<MropePositions> =
            rows.iter().zip(grids).map(|(ids, g)| self.positions(ids, g)).collect::<Result<_>>()?;
        Ok(batch_positions(&positions, &vec![0; rows.len()], width, device))
    }
}

/// The decoder's last hidden states `[batch, seq, hidden]` over `ids` at `positions` without
/// a cache; with `vision`, the image-pad rows take the features of `images` (every row's,
/// row by row, in pad order). The training forward of the policy and of the critic.
pub fn hidden_states(
    model: &Qwen2Model,
    vision: Option<&Vision>,
    ids: &Tensor,
    positions: &Tensor,
    images: &[&PixelValues],
) -> Result<Tensor> {
    match vision {
        Some(v) => model.forward_embeds(v.embed(model, ids, images)?, positions, None, None),
        None if images.is_empty() => model.forward(ids, positions, None, None),
        None => Err(Error::Invalid("this is a text-only model (no vision tower): it cannot take images".into())),
    }
}

/// `[3, batch, width]` positions for rows whose tokens start at `offsets[b]` (left padding)
/// and whose padding sits at position 0, as transformers leaves it.
pub(crate) fn batch_positions(rows: &[MropePositions], offsets: &[usize], width: usize, device: Device) -> Tensor {
    let b = rows.len();
    let mut data = vec![0i64; 3 * b * width];
    for (r, (row, &offset)) in rows.iter().zip(offsets).enumerate() {
        for (j, p) in row.positions.iter().enumerate() {
            for (axis, &v) in p.iter().enumerate() {
                data[(axis * b + r) * width + offset + j] = v;
            }
        }
    }
    Tensor::from_slice(&data).view([3, b as i64, width as i64]).to_device(device)
}

/// `logits` `[.., vocab]` with the tokens at `index` (on the logits' device) out of reach, as
/// [`Vision::suppress_placeholders`] puts its placeholders; a CUDA graph's step passes indices
/// it uploaded before capture.
pub(crate) fn suppress(logits: &Tensor, index: &Tensor) -> Tensor {
    logits.index_fill(-1, index, -1e30)
}
