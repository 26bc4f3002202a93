//! Triangles and the convex solids everything is built from.

use crate::geom::{V3, v3};

pub type Rgb = [u8; 3];

/// A world-space triangle with its outward normal (for lighting and back-face culling) and
/// the object it belongs to (0: walls, floors and ceilings; `i + 1`: object `i`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tri {
    pub v: [V3; 3],
    pub normal: V3,
    pub color: Rgb,
    pub id: u8,
}

/// Triangles of one object (or of the building) under construction.
pub struct Mesh {
    pub tris: Vec<Tri>,
    pub id: u8,
}

impl Mesh {
    pub fn new(id: u8) -> Mesh {
        Mesh { tris: Vec::new(), id }
    }

    /// A flat convex polygon, points in order around it, its normal pointing away from
    /// `inside`. Working the orientation out from a point inside the solid keeps every
    /// builder free of winding conventions.
    pub fn face(&mut self, pts: &[V3], inside: V3, color: Rgb) {
        let mut n = v3(0.0, 0.0, 0.0);
        for i in 1..pts.len() - 1 {
            let c = (pts[i] - pts[0]).cross(pts[i + 1] - pts[0]);
            if c.length() > n.length() {
                n = c;
            }
        }
        if n.length() < 1e-9 {
            return;
        }
        let mut n = n.normalized();
        let centre = pts.iter().fold(v3(0.0, 0.0, 0.0), |a, &p| a + p) * (1.0 / pts.len() as f32);
        if n.dot(centre - inside) < 0.0 {
            n = n * -1.0;
        }
        for i in 1..pts.len() - 1 {
            let v = [pts[0], pts[i], pts[i + 1]];
            if (v[1] - v[0]).cross(v[2] - v[0]).length() > 1e-9 {
                self.tris.push(Tri { v, normal: n, color, id: self.id });
            }
        }
    }

    /// A box between two corners.
    pub fn cuboid(&mut self, lo: V3, hi: V3, color: Rgb) {
        let c = (lo + hi) * 0.5;
        let p = |x: bool, y: bool, z: bool| {
            v3(if x { hi.x } else { lo.x }, if y { hi.y } else { lo.y }, if z { hi.z } else { lo.z })
        };
        let (f, t) = (false, true);
        for quad in [
            [p(f, f, f), p(t, f, f), p(t, t, f), p(f, t, f)],
            [p(f, f, t), p(t, f, t), p(t, t, t), p(f, t, t)],
            [p(f, f, f), p(f, t, f), p(f, t, t), p(f, f, t)],
            [p(t, f, f), p(t, t, f), p(t, t, t), p(t, f, t)],
            [p(f, f, f), p(t, f, f), p(t, f, t), p(f, f, t)],
            [p(f, t, f), p(t, t, f), p(t, t, t), p(f, t, t)],
        ] {
            self.face(&quad, c, color);
        }
    }

    /// An upright cylinder, cone or truncated cone: radius `r0` at `base.y`, `r1` at
    /// `base.y + height`, with `sides` faces around.
    pub fn frustum(&mut self, base: V3, height: f32, r0: f32, r1: f32, sides: usize, color: Rgb) {
        self.frustum_with_caps(base, height, r0, r1, sides, color, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn frustum_with_caps(&mut self, base: V3, height: f32, r0: f32, r1: f32, sides: usize, color: Rgb, caps: bool) {
        let inside = base + v3(0.0, height * 0.5, 0.0);
        let ring = |r: f32, y: f32| -> Vec<V3> {
            (0..sides)
                .map(|i| {
                    let a = std::f32::consts::TAU * (i as f32 + 0.5) / sides as f32;
                    base + v3(r * a.cos(), y, r * a.sin())
                })
                .collect()
        };
        let (bottom, top) = (ring(r0, 0.0), ring(r1, height));
        for i in 0..sides {
            let j = (i + 1) % sides;
            self.face(&[bottom[i], bottom[j], top[j], top[i]], inside, color);
        }
        if caps && r0 > 0.0 {
            self.face(&bottom, inside, color);
        }
        if caps && r1 > 0.0 {
            self.face(&top, inside, color);
        }
    }

    /// A low-polygon sphere: stacked truncated cones.
    pub fn ball(&mut self, centre: V3, r: f32, color: Rgb) {
        const BANDS: usize = 4;
        let at = |k: usize| {
            let a = std::f32::consts::PI * k as f32 / BANDS as f32;
            (-r * a.cos(), r * a.sin())
        };
        for k in 0..BANDS {
            let ((y0, r0), (y1, r1)) = (at(k), at(k + 1));
            // Bands meet edge to edge: caps between them would only be hidden inside.
            self.frustum_with_caps(centre + v3(0.0, y0, 0.0), y1 - y0, r0, r1, 8, color, false);
        }
    }

    /// Turns the mesh by `quarter_turns` × 90° about the vertical axis (local +z ends up
    /// facing north, east, south, west for 0, 1, 2, 3), then moves it by `offset`.
    pub fn placed(mut self, quarter_turns: u8, offset: V3) -> Mesh {
        let turn = |p: V3| match quarter_turns % 4 {
            0 => p,
            1 => v3(p.z, p.y, -p.x),
            2 => v3(-p.x, p.y, -p.z),
            _ => v3(-p.z, p.y, p.x),
        };
        for t in &mut self.tris {
            t.v = t.v.map(|p| turn(p) + offset);
            t.normal = turn(t.normal);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solids_have_outward_normals() {
        let mut m = Mesh::new(1);
        m.cuboid(v3(0.0, 0.0, 0.0), v3(1.0, 2.0, 3.0), [1, 2, 3]);
        assert_eq!(m.tris.len(), 12);
        let centre = v3(0.5, 1.0, 1.5);
        assert!(m.tris.iter().all(|t| t.normal.dot(t.v[0] - centre) > 0.0));
        let mut m = Mesh::new(1);
        m.frustum(v3(0.0, 0.0, 0.0), 1.0, 0.5, 0.0, 6, [0, 0, 0]);
        assert!(m.tris.iter().all(|t| t.normal.dot(t.v[0] - v3(0.0, 0.5, 0.0)) >= 0.0));
        let mut m = Mesh::new(1);
        m.ball(v3(0.0, 1.0, 0.0), 0.5, [0, 0, 0]);
        assert!(m.tris.iter().all(|t| t.normal.dot(t.v[0] - v3(0.0, 1.0, 0.0)) > 0.0));
    }

    #[test]
    fn a_quarter_turn_points_the_front_east() {
        let mut m = Mesh::new(1);
        m.face(&[v3(-1.0, 0.0, 1.0), v3(1.0, 0.0, 1.0), v3(1.0, 1.0, 1.0)], v3(0.0, 0.0, 0.0), [0, 0, 0]);
        let m = m.placed(1, v3(10.0, 0.0, 0.0));
        let n = m.tris[0].normal;
        assert!((n.x - 1.0).abs() < 1e-6 && n.z.abs() < 1e-6, "{n:?}");
        assert!(m.tris[0].v.iter().all(|p| (p.x - 11.0).abs() < 1e-6));
    }
}
