//! transformers' `Qwen2VLImageProcessor` for 8-bit RGB images: `smart_resize` to multiples of
//! 28 within the pixel bounds, bicubic resize (libtorch's antialiased uint8 kernel, the one
//! torchvision calls on the CPU, so resized pixels match too), rescale and CLIP normalisation
//! fused as transformers fuses them, then patches in merge-group order.

use crate::folder::{FileKind, ModelFolder};
use crate::{Error, Result};
use serde_json::{Value, json};
use tch::{Device, Kind, Tensor};
use vagen_abi::Image;

/// One image ready for the vision tower.
#[derive(Debug)]
pub struct PixelValues {
    /// `[t·h·w, channels · temporal_patch · patch²]`, f32, on the CPU.
    pub values: Tensor,
    /// `[t, h, w]` in patches (`image_grid_thw`).
    pub grid: [usize; 3],
}

/// A deep copy: the pixels' tensor copied, not shared.
impl Clone for PixelValues {
    fn clone(&self) -> Self {
        PixelValues { values: self.values.copy(), grid: self.grid }
    }
}

impl PixelValues {
    /// Tokens this image takes in the language model: `t·h·w / merge²`.
    pub fn tokens(&self, merge: usize) -> usize {
        self.grid.iter().product::<usize>() / (merge * merge)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ImageProcessor {
    pub min_pixels: usize,
    pub max_pixels: usize,
    pub patch_size: usize,
    pub temporal_patch_size: usize,
    pub merge_size: usize,
    pub image_mean: [f32; 3],
    pub image_std: [f32; 3],
    pub rescale_factor: f64,
    pub do_resize: bool,
    pub do_rescale: bool,
    pub do_normalize: bool,
}

const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

impl Default for ImageProcessor {
    /// Qwen2.5-VL's published settings.
    fn default() -> Self {
        ImageProcessor {
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            patch_size: 14,
            temporal_patch_size: 2,
            merge_size: 2,
            image_mean: CLIP_MEAN,
            image_std: CLIP_STD,
            rescale_factor: 1.0 / 255.0,
            do_resize: true,
            do_rescale: true,
            do_normalize: true,
        }
    }
}

impl ImageProcessor {
    /// The settings of a model folder: `preprocessor_config.json` (transformers 4), or the
    /// `image_processor` entry of `processor_config.json` (transformers 5). `None` if neither.
    pub fn from_folder(folder: &ModelFolder) -> Result<Option<Self>> {
        for (file, key) in [("preprocessor_config.json", None), ("processor_config.json", Some("image_processor"))] {
            let path = folder.path().join(file);
            let Some(v) = folder.read_json(file, FileKind::Json)? else {
                continue;
            };
            let bad = |message: String| Error::Config { path: path.clone(), message };
            let v = match key {
                Some(k) => match v.get(k) {
                    Some(inner) => inner.clone(),
                    None => continue,
                },
                None => v,
            };
            return Self::from_json(&v).map(Some).map_err(bad);
        }
        Ok(None)
    }

    /// From the JSON object transformers writes: `min_pixels` / `max_pixels` or
    /// `size.shortest_edge` / `size.longest_edge` (the same bounds, newer spelling).
    pub fn from_json(v: &Value) -> std::result::Result<Self, String> {
        let d = Self::default();
        let num = |k: &str| v.get(k).and_then(Value::as_u64).map(|n| n as usize);
        let size = |k: &str| v.get("size").and_then(|s| s.get(k)).and_then(Value::as_u64).map(|n| n as usize);
        let flag = |k: &str, default: bool| v.get(k).and_then(Value::as_bool).unwrap_or(default);
        let triple = |k: &str, default: [f32; 3]| -> std::result::Result<[f32; 3], String> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => {
                    let list: Vec<f32> = serde_json::from_value(x.clone()).map_err(|e| format!("{k}: {e}"))?;
                    <[f32; 3]>::try_from(list).map_err(|l| format!("{k}: expected 3 values (RGB), got {}", l.len()))
                }
            }
        };
        let p = ImageProcessor {
            min_pixels: num("min_pixels").or_else(|| size("shortest_edge")).unwrap_or(d.min_pixels),
            max_pixels: num("max_pixels").or_else(|| size("longest_edge")).unwrap_or(d.max_pixels),
            patch_size: num("patch_size").unwrap_or(d.patch_size),
            temporal_patch_size: num("temporal_patch_size").unwrap_or(d.temporal_patch_size),
            merge_size: num("merge_size").unwrap_or(d.merge_size),
            image_mean: triple("image_mean", d.image_mean)?,
            image_std: triple("image_std", d.image_std)?,
            rescale_factor: v.get("rescale_factor").and_then(Value::as_f64).unwrap_or(d.rescale_factor),
            do_resize: flag("do_resize", true),
            do_rescale: flag("do_rescale", true),
            do_normalize: flag("do_normalize", true),
        };
        if let Some(r) = v.get("resample").and_then(Value::as_u64)
            && r != 3
        {
            return Err(format!("resample {r}: only bicubic (3) is supported"));
        }
        if p.min_pixels > p.max_pixels || p.max_pixels == 0 {
            return Err(format!("min_pixels {} and max_pixels {} leave no valid size", p.min_pixels, p.max_pixels));
        }
        if p.patch_size == 0 || p.merge_size == 0 || p.temporal_patch_size == 0 {
            return Err("patch_size, merge_size and temporal_patch_size must be positive".into());
        }
        if p.image_std.contains(&0.0) {
            return Err("image_std has a zero".into());
        }
        Ok(p)
    }

    /// `preprocessor_config.json` as transformers reads it (both spellings of the bounds).
    pub fn to_json(&self) -> Value {
        json!({
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen2_5_VLProcessor",
            "min_pixels": self.min_pixels,
            "max_pixels": self.max_pixels,
            "size": { "shortest_edge": self.min_pixels, "longest_edge": self.max_pixels },
            "patch_size": self.patch_size,
            "temporal_patch_size": self.temporal_patch_size,
            "merge_size": self.merge_size,
            "image_mean": self.image_mean,
            "image_std": self.image_std,
            "rescale_factor": self.rescale_factor,
            "do_resize": self.do_resize,
            "do_rescale": self.do_rescale,
            "do_normalize": self.do_normalize,
            "do_convert_rgb": true,
            "resample": 3,
        })
    }

    /// Pixels per side of one merged unit.
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }

    /// transformers' `smart_resize`: each side rounded to a multiple of the factor (halves to
    /// even, as Python's `round`), then scaled down or up into the pixel bounds. Refuses an
    /// aspect ratio over 200 (as transformers does) and, unlike transformers, a result still
    /// above `max_pixels` (a very long thin image), which would otherwise cost tokens silently.
    pub fn target_size(&self, height: usize, width: usize) -> Result<(usize, usize)> {
        if height == 0 || width == 0 {
            return Err(Error::Invalid(format!("image of {width}x{height} pixels is empty")));
        }
        let (h, w) = (height as f64, width as f64);
        if h.max(w) / h.min(w) > 200.0 {
            return Err(Error::Invalid(format!(
                "image of {width}x{height} pixels: aspect ratio over 200 (the processor's limit)"
            )));
        }
        if !self.do_resize {
            return Ok((height, width));
        }
        let f = self.factor() as f64;
        let mut hb = (h / f).round_ties_even() * f;
        let mut wb = (w / f).round_ties_even() * f;
        if hb * wb > self.max_pixels as f64 {
            let beta = (h * w / self.max_pixels as f64).sqrt();
            hb = f.max((h / beta / f).floor() * f);
            wb = f.max((w / beta / f).floor() * f);
        } else if hb * wb < self.min_pixels as f64 {
            let beta = (self.min_pixels as f64 / (h * w)).sqrt();
            hb = (h * beta / f).ceil() * f;
            wb = (w * beta / f).ceil() * f;
        }
        let (hb, wb) = (hb as usize, wb as usize);
        if hb * wb > self.max_pixels {
            return Err(Error::Invalid(format!(
                "image of {width}x{height} pixels resizes to {wb}x{hb} = {} pixels, over max_pixels {}",
                hb * wb,
                self.max_pixels
            )));
        }
        Ok((hb, wb))
    }

    /// Images are resized to at most `pixels` (below the processor's own `max_pixels`
    /// only); refused below `min_pixels` or one merged patch.
    pub fn limit_pixels(&mut self, pixels: usize) -> Result<()> {
        let floor = self.min_pixels.max(self.factor() * self.factor());
        if pixels < floor {
            return Err(Error::Invalid(format!("{pixels} pixels per image is below the processor's minimum {floor}")));
        }
        self.max_pixels = self.max_pixels.min(pixels);
        Ok(())
    }

    /// The tokens `image` takes in a prompt once its patches are merged, without
    /// processing it.
    pub fn tokens(&self, image: &Image) -> Result<usize> {
        let (h, w) = self.target_size(image.height as usize, image.width as usize)?;
        Ok((h / self.patch_size) * (w / self.patch_size) / (self.merge_size * self.merge_size))
    }

    /// `pixel_values` and `image_grid_thw` of one image.
    pub fn process(&self, image: &Image) -> Result<PixelValues> {
        let (h, w) = (image.height as usize, image.width as usize);
        if image.rgb.len() != h * w * 3 {
            return Err(Error::Invalid(format!(
                "image of {w}x{h} pixels holds {} bytes; RGB8 needs {}",
                image.rgb.len(),
                h * w * 3
            )));
        }
        let (th, tw) = self.target_size(h, w)?;
        let f = self.factor();
        if !th.is_multiple_of(f) || !tw.is_multiple_of(f) {
            return Err(Error::Invalid(format!(
                "image of {w}x{h} pixels: with do_resize off, each side must be a multiple of {f}"
            )));
        }
        let _guard = tch::no_grad_guard();
        // Height × width × channel, viewed as channels-first: the layout torchvision hands to
        // the resize kernel for a decoded image.
        let hwc = Tensor::from_slice(&image.rgb).view([h as i64, w as i64, 3]);
        let mut chw = hwc.permute([2, 0, 1]).unsqueeze(0);
        if (th, tw) != (h, w) {
            chw = chw.internal_upsample_bicubic2d_aa([th as i64, tw as i64], false, None::<f64>, None::<f64>);
        }
        let x = self.normalise(&chw.to_kind(Kind::Float));
        Ok(PixelValues { values: self.patchify(&x, th, tw), grid: [1, th / self.patch_size, tw / self.patch_size] })
    }

    fn normalise(&self, x: &Tensor) -> Tensor {
        let channel = |v: [f32; 3]| Tensor::from_slice(&v).view([1, 3, 1, 1]);
        match (self.do_rescale, self.do_normalize) {
            // transformers folds the rescale into mean and std (`mean / rescale_factor`), in
            // f32: the same operations give the same bits.
            (true, true) => {
                let inv = 1.0 / self.rescale_factor;
                (x - channel(self.image_mean) * inv) / (channel(self.image_std) * inv)
            }
            (false, true) => (x - channel(self.image_mean)) / channel(self.image_std),
            (true, false) => x * self.rescale_factor,
            (false, false) => x.shallow_clone(),
        }
    }

    /// `[1, C, H, W]` → `[gh·gw, C·T·p·p]`, each 2 × 2 merge group's patches consecutive and
    /// the still frame repeated `temporal_patch_size` times.
    fn patchify(&self, x: &Tensor, height: usize, width: usize) -> Tensor {
        let (p, m, t) = (self.patch_size as i64, self.merge_size as i64, self.temporal_patch_size as i64);
        let (gh, gw) = (height as i64 / p, width as i64 / p);
        x.reshape([1, 3, gh / m, m, p, gw / m, m, p])
            .permute([0, 2, 5, 3, 6, 1, 4, 7])
            .unsqueeze(6)
            .expand([1, gh / m, gw / m, m, m, 3, t, p, p], false)
            .reshape([gh * gw, 3 * t * p * p])
            .to_device(Device::Cpu)
    }
}
