//! How close a rendering is to the target, as three terms in [0, 1]. Each follows the
//! reference users know (`reference/metrics.py` computes them with OpenCV, scikit-image and
//! NumPy; the tests compare): VAGEN's structural accuracy (IoU of Canny edge maps), SSIM
//! (Wang et al. 2004, as scikit-image computes it with a Gaussian window) and a colour
//! histogram intersection. build.rs includes this file too.

/// PIL's `convert("L")`: ITU-R 601-2 luma in 16-bit fixed point, rounded.
pub fn luma(rgb: &[u8]) -> Vec<u8> {
    rgb.chunks_exact(3)
        .map(|p| ((u32::from(p[0]) * 19595 + u32::from(p[1]) * 38470 + u32::from(p[2]) * 7471 + 0x8000) >> 16) as u8)
        .collect()
}

/// OpenCV's `Canny(gray, low, high)` with its defaults (3×3 Sobel with replicated borders,
/// L1 gradient magnitude, non-maximum suppression in four directions, 8-connected hysteresis).
pub fn canny(gray: &[u8], w: usize, h: usize, low: i32, high: i32) -> Vec<bool> {
    let px = |x: isize, y: isize| {
        let (x, y) = (x.clamp(0, w as isize - 1) as usize, y.clamp(0, h as isize - 1) as usize);
        i32::from(gray[y * w + x])
    };
    let (mut dx, mut dy) = (vec![0i32; w * h], vec![0i32; w * h]);
    for y in 0..h as isize {
        for x in 0..w as isize {
            let i = y as usize * w + x as usize;
            dx[i] = px(x + 1, y - 1) + 2 * px(x + 1, y) + px(x + 1, y + 1)
                - px(x - 1, y - 1)
                - 2 * px(x - 1, y)
                - px(x - 1, y + 1);
            dy[i] = px(x - 1, y + 1) + 2 * px(x, y + 1) + px(x + 1, y + 1)
                - px(x - 1, y - 1)
                - 2 * px(x, y - 1)
                - px(x + 1, y - 1);
        }
    }
    let mag: Vec<i32> = dx.iter().zip(&dy).map(|(a, b)| a.abs() + b.abs()).collect();
    // Outside the image the magnitude is 0, as in OpenCV's padded buffers.
    let m = |x: isize, y: isize| {
        if x < 0 || y < 0 || x >= w as isize || y >= h as isize { 0 } else { mag[y as usize * w + x as usize] }
    };
    // tan(22.5°) in OpenCV's fixed point (15 fractional bits).
    const TG22: i64 = 13573;
    const NOT_EDGE: u8 = 1;
    const MAYBE: u8 = 0;
    const EDGE: u8 = 2;
    let mut map = vec![NOT_EDGE; w * h];
    let mut stack = Vec::new();
    for y in 0..h as isize {
        for x in 0..w as isize {
            let i = y as usize * w + x as usize;
            let v = mag[i];
            if v <= low {
                continue;
            }
            let (xs, ys) = (dx[i], dy[i]);
            let ax = i64::from(xs.abs());
            let ay = i64::from(ys.abs()) << 15;
            let tg22x = ax * TG22;
            let local_max = if ay < tg22x {
                v > m(x - 1, y) && v >= m(x + 1, y)
            } else if ay > tg22x + (ax << 16) {
                v > m(x, y - 1) && v >= m(x, y + 1)
            } else {
                let s = if (xs ^ ys) < 0 { -1 } else { 1 };
                v > m(x - s, y - 1) && v > m(x + s, y + 1)
            };
            if local_max {
                map[i] = if v > high { EDGE } else { MAYBE };
                if v > high {
                    stack.push(i);
                }
            }
        }
    }
    while let Some(i) = stack.pop() {
        let (x, y) = ((i % w) as isize, (i / w) as isize);
        for (ox, oy) in [(-1, -1), (0, -1), (1, -1), (-1, 0), (1, 0), (-1, 1), (0, 1), (1, 1)] {
            let (nx, ny) = (x + ox, y + oy);
            if nx >= 0 && ny >= 0 && nx < w as isize && ny < h as isize {
                let j = ny as usize * w + nx as usize;
                if map[j] == MAYBE {
                    map[j] = EDGE;
                    stack.push(j);
                }
            }
        }
    }
    map.into_iter().map(|v| v == EDGE).collect()
}

/// The target's half of each term, computed once per episode: a step then draws, finds
/// the rendering's edges, blurs three SSIM maps instead of five, and counts colours.
pub struct Reference {
    side: usize,
    edges: Vec<bool>,
    luma: Vec<f64>,
    mean: Vec<f64>,
    mean_sq: Vec<f64>,
    histogram: Histogram,
}

/// The three terms, each in [0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Terms {
    pub edges: f64,
    pub ssim: f64,
    pub colour: f64,
}

impl Reference {
    /// `rgb`: the target, `side` × `side` RGB8.
    pub fn new(rgb: &[u8], side: usize) -> Self {
        let gray = luma(rgb);
        let luma: Vec<f64> = gray.iter().map(|&v| f64::from(v)).collect();
        let sq: Vec<f64> = luma.iter().map(|v| v * v).collect();
        Self {
            side,
            edges: canny(&gray, side, side, 100, 200),
            mean: blur(&luma, side),
            mean_sq: blur(&sq, side),
            luma,
            histogram: Histogram::of(rgb),
        }
    }

    /// How close `rgb` (a rendering of the target's size) is to the target.
    pub fn terms(&self, rgb: &[u8]) -> Terms {
        let gray = luma(rgb);
        let edges = canny(&gray, self.side, self.side, 100, 200);
        Terms {
            edges: iou(&self.edges, &edges),
            ssim: self.ssim(&gray),
            colour: self.histogram.intersection(&Histogram::of(rgb)),
        }
    }

    /// Mean SSIM of the luma images: Gaussian window σ = 1.5 (radius 5), K1 = 0.01,
    /// K2 = 0.03, population covariances, the mean over pixels whose window lies inside the
    /// image (scikit-image's `structural_similarity(gaussian_weights=True, sigma=1.5,
    /// use_sample_covariance=False, data_range=255)`).
    fn ssim(&self, gray: &[u8]) -> f64 {
        let side = self.side;
        let b: Vec<f64> = gray.iter().map(|&v| f64::from(v)).collect();
        if side <= 2 * RADIUS {
            return if self.luma == b { 1.0 } else { 0.0 };
        }
        let uy = blur(&b, side);
        let uyy = blur(&b.iter().map(|v| v * v).collect::<Vec<_>>(), side);
        let uxy = blur(&self.luma.iter().zip(&b).map(|(x, y)| x * y).collect::<Vec<_>>(), side);
        let (ux, uxx) = (&self.mean, &self.mean_sq);
        let (c1, c2) = ((0.01f64 * 255.0).powi(2), (0.03f64 * 255.0).powi(2));
        let total: f64 = (0..ux.len())
            .map(|i| {
                let (vx, vy, vxy) = (uxx[i] - ux[i] * ux[i], uyy[i] - uy[i] * uy[i], uxy[i] - ux[i] * uy[i]);
                ((2.0 * ux[i] * uy[i] + c1) * (2.0 * vxy + c2))
                    / ((ux[i] * ux[i] + uy[i] * uy[i] + c1) * (vx + vy + c2))
            })
            .sum();
        total / ux.len() as f64
    }
}

/// VAGEN's `calculate_structural_accuracy` on two edge maps: their IoU, 0 when neither has
/// an edge.
fn iou(a: &[bool], b: &[bool]) -> f64 {
    let inter = a.iter().zip(b).filter(|(a, b)| **a && **b).count();
    let union = a.iter().zip(b).filter(|(a, b)| **a || **b).count();
    if union == 0 { 0.0 } else { inter as f64 / union as f64 }
}

/// SSIM's window radius: scikit-image's `int(3.5 * sigma + 0.5)` for sigma 1.5.
const RADIUS: usize = 5;

/// The Gaussian-weighted mean of each window that lies wholly inside the image (the only
/// ones SSIM averages): (side − 10)² values, row-major.
fn blur(img: &[f64], side: usize) -> Vec<f64> {
    let taps = 2 * RADIUS + 1;
    let kernel: Vec<f64> = {
        let k: Vec<f64> = (0..taps).map(|i| (-0.5 * ((i as f64 - RADIUS as f64) / 1.5).powi(2)).exp()).collect();
        let sum: f64 = k.iter().sum();
        k.into_iter().map(|v| v / sum).collect()
    };
    let inner = side.saturating_sub(2 * RADIUS);
    let mut rows = vec![0.0; side * inner];
    for (src, dst) in img.chunks_exact(side).zip(rows.chunks_exact_mut(inner.max(1))) {
        for (x, d) in dst.iter_mut().enumerate() {
            *d = src[x..x + taps].iter().zip(&kernel).map(|(a, k)| a * k).sum();
        }
    }
    let mut out = vec![0.0; inner * inner];
    for (y, dst) in out.chunks_exact_mut(inner.max(1)).enumerate() {
        for (t, k) in kernel.iter().enumerate() {
            for (d, r) in dst.iter_mut().zip(&rows[(y + t) * inner..(y + t + 1) * inner]) {
                *d += k * r;
            }
        }
    }
    out
}

/// Levels per channel of the colour histogram (4³ = 64 bins).
const LEVELS: usize = 4;

/// Counts of the drawn (non-white) pixels per colour bin. The white background is left
/// out, or a blank answer would match every mostly-white icon.
struct Histogram {
    bins: [u64; LEVELS * LEVELS * LEVELS],
    count: u64,
}

impl Histogram {
    fn of(rgb: &[u8]) -> Self {
        let mut bins = [0u64; LEVELS * LEVELS * LEVELS];
        for p in rgb.chunks_exact(3).filter(|p| *p != [255, 255, 255]) {
            let q = |v: u8| usize::from(v) * LEVELS / 256;
            bins[(q(p[0]) * LEVELS + q(p[1])) * LEVELS + q(p[2])] += 1;
        }
        Self { count: bins.iter().sum(), bins }
    }

    /// The intersection of the two histograms, each normalised to sum 1: 1 for the same
    /// palette in the same proportions, 0 for disjoint palettes or nothing drawn.
    fn intersection(&self, other: &Self) -> f64 {
        let (na, nb) = (self.count, other.count);
        match (na, nb) {
            (0, 0) => 1.0,
            (0, _) | (_, 0) => 0.0,
            // min(a/na, b/nb) summed, in integers so that equal histograms give exactly 1.
            _ => {
                self.bins.iter().zip(&other.bins).map(|(a, b)| (a * nb).min(b * na)).sum::<u64>() as f64
                    / (na * nb) as f64
            }
        }
    }
}
