//! A z-buffered triangle rasteriser: flat-shaded, perspective-correct depth, one colour
//! and one object id per pixel. f32 arithmetic only, so a frame is the same bytes on
//! every run and in every instance.

use crate::geom::{V3, v3};
use crate::mesh::{Rgb, Tri};

/// Closer than this (metres) is clipped away; the agent never gets nearer to a wall.
const NEAR: f32 = 0.05;

/// Where the eye is and where it looks.
#[derive(Clone, Copy, Debug)]
pub struct Camera {
    pub eye: V3,
    pub forward: V3,
    pub right: V3,
    pub up: V3,
    /// Horizontal field of view, radians.
    pub fov: f32,
}

impl Camera {
    /// `heading` is the horizontal look direction (x, z), unit length; `pitch` (radians)
    /// tilts the view up (positive) or down.
    pub fn new(eye: V3, heading: (f32, f32), pitch: f32, fov: f32) -> Camera {
        let flat = v3(heading.0, 0.0, heading.1);
        let (s, c) = (pitch.sin(), pitch.cos());
        let world_up = v3(0.0, 1.0, 0.0);
        Camera {
            eye,
            forward: flat * c + world_up * s,
            right: v3(heading.1, 0.0, -heading.0),
            up: world_up * c - flat * s,
            fov,
        }
    }

    fn to_view(self, p: V3) -> V3 {
        let d = p - self.eye;
        v3(d.dot(self.right), d.dot(self.up), d.dot(self.forward))
    }
}

/// An RGB image with an object id and a depth (1 / distance along the view) per pixel.
pub struct Frame {
    pub width: usize,
    pub height: usize,
    pub rgb: Vec<u8>,
    pub ids: Vec<u8>,
    inv_depth: Vec<f32>,
}

impl Frame {
    pub fn new(width: usize, height: usize) -> Frame {
        let n = width * height;
        Frame { width, height, rgb: vec![0; n * 3], ids: vec![0; n], inv_depth: vec![0.0; n] }
    }

    /// Draws `tris` as seen by `camera` over a cleared frame.
    pub fn render(&mut self, tris: &[Tri], camera: &Camera, background: Rgb) {
        for px in self.rgb.chunks_exact_mut(3) {
            px.copy_from_slice(&background);
        }
        self.ids.fill(0);
        self.inv_depth.fill(0.0);
        let focal = self.width as f32 * 0.5 / (camera.fov * 0.5).tan();
        let (cx, cy) = (self.width as f32 * 0.5, self.height as f32 * 0.5);
        let light = v3(0.25, 0.8, 0.55).normalized();
        for t in tris {
            // Faces turned away from the eye are hidden by the solid's other faces.
            if t.normal.dot(camera.eye - t.v[0]) <= 0.0 {
                continue;
            }
            let view = t.v.map(|p| camera.to_view(p));
            if view.iter().all(|p| p.z < NEAR) {
                continue;
            }
            let centroid = (t.v[0] + t.v[1] + t.v[2]) * (1.0 / 3.0);
            // Half-Lambert keeps faces turned from the light readable; the fall-off with
            // distance is a depth cue flat shading otherwise lacks.
            let shade = (0.75 + 0.25 * t.normal.dot(light)) / (1.0 + 0.04 * (centroid - camera.eye).length());
            let color = t.color.map(|c| (c as f32 * shade).round().clamp(0.0, 255.0) as u8);
            let (poly, n) = clip_near(&view);
            let screen = poly.map(|p| [cx + p.x * focal / p.z, cy - p.y * focal / p.z, 1.0 / p.z]);
            for i in 1..n.saturating_sub(1) {
                self.fill([screen[0], screen[i], screen[i + 1]], color, t.id);
            }
        }
    }

    /// Pixels showing each object id (index = id).
    pub fn id_counts(&self, ids: usize) -> Vec<u32> {
        let mut counts = vec![0u32; ids];
        for &id in &self.ids {
            if let Some(c) = counts.get_mut(id as usize) {
                *c += 1;
            }
        }
        counts
    }

    /// One screen-space triangle (x, y, 1/z per corner); pixel centres inside it whose
    /// depth beats the buffer take `color` and `id`. (The negated comparisons also reject
    /// NaN from degenerate input.)
    #[allow(clippy::neg_cmp_op_on_partial_ord)]
    fn fill(&mut self, tri: [[f32; 3]; 3], color: Rgb, id: u8) {
        let [a, mut b, mut c] = tri;
        let mut area = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
        if !(area.abs() > 1e-9) {
            return;
        }
        if area < 0.0 {
            std::mem::swap(&mut b, &mut c);
            area = -area;
        }
        // e(x, y) = ex·x + ey·y + e0, positive inside, for the edges ab, bc, ca.
        let edge =
            |p: [f32; 3], q: [f32; 3]| [-(q[1] - p[1]), q[0] - p[0], (q[1] - p[1]) * p[0] - (q[0] - p[0]) * p[1]];
        let edges = [edge(a, b), edge(b, c), edge(c, a)];
        // 1/z is linear in screen space: weights are the opposite edges over the area.
        let plane = |k: usize| (edges[1][k] * a[2] + edges[2][k] * b[2] + edges[0][k] * c[2]) / area;
        let (wx, wy, w0) = (plane(0), plane(1), plane(2));
        let min = |i: usize| a[i].min(b[i]).min(c[i]);
        let max = |i: usize| a[i].max(b[i]).max(c[i]);
        let (w, h) = (self.width as f32, self.height as f32);
        let x_lo = min(0).floor().max(0.0);
        let x_hi = max(0).ceil().min(w - 1.0);
        let y_lo = min(1).floor().max(0.0);
        let y_hi = max(1).ceil().min(h - 1.0);
        if !(x_lo <= x_hi && y_lo <= y_hi) {
            return;
        }
        for y in y_lo as usize..=y_hi as usize {
            let py = y as f32 + 0.5;
            let (mut lo, mut hi) = (x_lo, x_hi);
            for e in &edges {
                let rest = e[1] * py + e[2];
                // A pixel centre on an edge shared by two triangles must land in one of
                // them: widen by a hair, and let the depth test settle the overlap.
                if e[0] > 0.0 {
                    lo = lo.max((-rest / e[0] - 0.5 - 1e-3).ceil());
                } else if e[0] < 0.0 {
                    hi = hi.min((-rest / e[0] - 0.5 + 1e-3).floor());
                } else if rest < 0.0 {
                    hi = -1.0;
                }
            }
            if !(lo <= hi) {
                continue;
            }
            let row = y * self.width;
            let mut inv_z = wx * (lo + 0.5) + wy * py + w0;
            for x in lo as usize..=hi as usize {
                let i = row + x;
                if inv_z > self.inv_depth[i] {
                    self.inv_depth[i] = inv_z;
                    self.rgb[i * 3..i * 3 + 3].copy_from_slice(&color);
                    self.ids[i] = id;
                }
                inv_z += wx;
            }
        }
    }
}

/// The part of a view-space triangle in front of the near plane: at most 4 corners (the
/// first `n` of the array), no allocation on the per-triangle path.
fn clip_near(tri: &[V3; 3]) -> ([V3; 4], usize) {
    let mut out = [tri[0]; 4];
    let mut n = 0;
    for i in 0..3 {
        let (p, q) = (tri[i], tri[(i + 1) % 3]);
        let (p_in, q_in) = (p.z >= NEAR, q.z >= NEAR);
        if p_in {
            out[n] = p;
            n += 1;
        }
        if p_in != q_in {
            let t = (NEAR - p.z) / (q.z - p.z);
            out[n] = p + (q - p) * t;
            n += 1;
        }
    }
    (out, n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::Mesh;

    fn north_camera(pitch: f32) -> Camera {
        Camera::new(v3(0.0, 1.5, 0.0), (0.0, 1.0), pitch, 90f32.to_radians())
    }

    fn count(frame: &Frame, id: u8) -> usize {
        frame.ids.iter().filter(|&&i| i == id).count()
    }

    #[test]
    fn a_box_ahead_is_drawn_centred_and_nearer_hides_farther() {
        let mut m = Mesh::new(1);
        m.cuboid(v3(-0.5, 1.0, 4.0), v3(0.5, 2.0, 5.0), [200, 0, 0]);
        let mut far = Mesh::new(2);
        far.cuboid(v3(-2.0, 0.0, 8.0), v3(2.0, 3.0, 9.0), [0, 200, 0]);
        let tris: Vec<Tri> = m.tris.iter().chain(&far.tris).copied().collect();
        let mut f = Frame::new(64, 64);
        f.render(&tris, &north_camera(0.0), [0, 0, 0]);
        // Centre pixel: the near box; its projected width is 1 m at 4 m with f = 32 px: 8 px.
        assert_eq!(f.ids[32 * 64 + 32], 1);
        let row: Vec<u8> = (0..64).map(|x| f.ids[32 * 64 + x]).collect();
        assert_eq!(row.iter().filter(|&&i| i == 1).count(), 8, "{row:?}");
        assert!(count(&f, 2) > 0 && count(&f, 2) < 64 * 64);
        // The red channel of the near box is shaded but present.
        let i = (32 * 64 + 32) * 3;
        assert!(f.rgb[i] > 60 && f.rgb[i + 1] == 0);
    }

    #[test]
    fn behind_is_invisible_and_looking_up_moves_things_down() {
        let mut m = Mesh::new(1);
        m.cuboid(v3(-0.5, 1.0, -5.0), v3(0.5, 2.0, -4.0), [200, 0, 0]);
        let mut f = Frame::new(32, 32);
        f.render(&m.tris, &north_camera(0.0), [0, 0, 0]);
        assert_eq!(count(&f, 1), 0);
        let mut m = Mesh::new(1);
        m.cuboid(v3(-0.5, 1.4, 3.0), v3(0.5, 1.6, 3.5), [200, 0, 0]);
        let centre_row = |f: &Frame| {
            let rows: Vec<usize> = (0..f.height).filter(|y| f.ids[y * f.width + 16] == 1).collect();
            rows[rows.len() / 2]
        };
        f.render(&m.tris, &north_camera(0.0), [0, 0, 0]);
        let level = centre_row(&f);
        f.render(&m.tris, &north_camera(30f32.to_radians()), [0, 0, 0]);
        assert!(centre_row(&f) > level + 5);
    }

    #[test]
    fn a_floor_crossing_the_near_plane_fills_the_lower_half() {
        let mut m = Mesh::new(3);
        let inside = v3(0.0, -1.0, 0.0);
        m.face(
            &[v3(-50.0, 0.0, -50.0), v3(50.0, 0.0, -50.0), v3(50.0, 0.0, 50.0), v3(-50.0, 0.0, 50.0)],
            inside,
            [9; 3],
        );
        let mut f = Frame::new(32, 32);
        f.render(&m.tris, &north_camera(0.0), [0, 0, 0]);
        assert_eq!(count(&f, 3), 32 * 16, "every pixel below the horizon, none above");
    }
}
