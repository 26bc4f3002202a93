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

/// VAGEN's `calculate_structural_accuracy`: IoU of the two images' Canny(100, 200) edge
/// maps, 0 when neither has an edge.
pub fn edge_iou(target: &[u8], render: &[u8], side: usize) -> f64 {
    let a = canny(&luma(target), side, side, 100, 200);
    let b = canny(&luma(render), side, side, 100, 200);
    let inter = a.iter().zip(&b).filter(|(a, b)| **a && **b).count();
    let union = a.iter().zip(&b).filter(|(a, b)| **a || **b).count();
    if union == 0 { 0.0 } else { inter as f64 / union as f64 }
}

/// Mean SSIM of the luma images: Gaussian window σ = 1.5 (radius 5), K1 = 0.01, K2 = 0.03,
/// population covariances, the mean taken over pixels whose window lies inside the image
/// (scikit-image's `structural_similarity(gaussian_weights=True, sigma=1.5,
/// use_sample_covariance=False, data_range=255)`).
pub fn ssim(target: &[u8], render: &[u8], side: usize) -> f64 {
    const R: usize = 5;
    let (a, b) = (luma(target), luma(render));
    let a: Vec<f64> = a.iter().map(|&v| f64::from(v)).collect();
    let b: Vec<f64> = b.iter().map(|&v| f64::from(v)).collect();
    let kernel: Vec<f64> = {
        let k: Vec<f64> = (0..=2 * R).map(|i| (-0.5 * ((i as f64 - R as f64) / 1.5).powi(2)).exp()).collect();
        let sum: f64 = k.iter().sum();
        k.into_iter().map(|v| v / sum).collect()
    };
    // Only windows wholly inside the image are averaged, so only those are computed.
    let inner = side.saturating_sub(2 * R);
    if inner == 0 {
        return if a == b { 1.0 } else { 0.0 };
    }
    let blur = |img: &dyn Fn(usize) -> f64| -> Vec<f64> {
        // Rows first over every row, then columns for the inner pixels.
        let mut rows = vec![0.0; side * inner];
        for y in 0..side {
            for x in 0..inner {
                rows[y * inner + x] = (0..=2 * R).map(|k| kernel[k] * img(y * side + x + k)).sum();
            }
        }
        let mut out = vec![0.0; inner * inner];
        for y in 0..inner {
            for x in 0..inner {
                out[y * inner + x] = (0..=2 * R).map(|k| kernel[k] * rows[(y + k) * inner + x]).sum();
            }
        }
        out
    };
    let ux = blur(&|i| a[i]);
    let uy = blur(&|i| b[i]);
    let uxx = blur(&|i| a[i] * a[i]);
    let uyy = blur(&|i| b[i] * b[i]);
    let uxy = blur(&|i| a[i] * b[i]);
    let (c1, c2) = ((0.01f64 * 255.0).powi(2), (0.03f64 * 255.0).powi(2));
    let total: f64 = (0..inner * inner)
        .map(|i| {
            let (vx, vy, vxy) = (uxx[i] - ux[i] * ux[i], uyy[i] - uy[i] * uy[i], uxy[i] - ux[i] * uy[i]);
            ((2.0 * ux[i] * uy[i] + c1) * (2.0 * vxy + c2)) / ((ux[i] * ux[i] + uy[i] * uy[i] + c1) * (vx + vy + c2))
        })
        .sum();
    total / (inner * inner) as f64
}

/// Levels per channel of the colour histogram (4³ = 64 bins).
const LEVELS: usize = 4;

/// Intersection of the two images' colour histograms over their drawn (non-white) pixels,
/// each normalised to sum 1: 1 for the same palette in the same proportions, 0 for
/// disjoint palettes or a drawing with nothing on it. The white background is left out,
/// or a blank answer would match every mostly-white icon.
pub fn colour(target: &[u8], render: &[u8]) -> f64 {
    let histogram = |rgb: &[u8]| {
        let mut h = [0u64; LEVELS * LEVELS * LEVELS];
        for p in rgb.chunks_exact(3).filter(|p| *p != [255, 255, 255]) {
            let q = |v: u8| usize::from(v) * LEVELS / 256;
            h[(q(p[0]) * LEVELS + q(p[1])) * LEVELS + q(p[2])] += 1;
        }
        let n: u64 = h.iter().sum();
        (h, n)
    };
    let ((ha, na), (hb, nb)) = (histogram(target), histogram(render));
    match (na, nb) {
        (0, 0) => 1.0,
        (0, _) | (_, 0) => 0.0,
        // min(a/na, b/nb) summed, in integers so that equal histograms give exactly 1.
        _ => ha.iter().zip(&hb).map(|(a, b)| (a * nb).min(b * na)).sum::<u64>() as f64 / (na * nb) as f64,
    }
}
