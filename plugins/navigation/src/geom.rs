//! Points in metres (x east, y up, z north) and floor rectangles.

use std::ops::{Add, Mul, Sub};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct V3 {
    pub x: f32,
    pub y: f32,
    pub z: f32,
}

pub const fn v3(x: f32, y: f32, z: f32) -> V3 {
    V3 { x, y, z }
}

impl V3 {
    pub fn dot(self, o: V3) -> f32 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }

    pub fn cross(self, o: V3) -> V3 {
        v3(self.y * o.z - self.z * o.y, self.z * o.x - self.x * o.z, self.x * o.y - self.y * o.x)
    }

    pub fn length(self) -> f32 {
        self.dot(self).sqrt()
    }

    pub fn normalized(self) -> V3 {
        let l = self.length();
        if l > 0.0 { self * (1.0 / l) } else { self }
    }
}

impl Add for V3 {
    type Output = V3;
    fn add(self, o: V3) -> V3 {
        v3(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}

impl Sub for V3 {
    type Output = V3;
    fn sub(self, o: V3) -> V3 {
        v3(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}

impl Mul<f32> for V3 {
    type Output = V3;
    fn mul(self, s: f32) -> V3 {
        v3(self.x * s, self.y * s, self.z * s)
    }
}

/// An axis-aligned rectangle on the floor: `x0..x1` east–west, `z0..z1` south–north.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rect {
    pub x0: f32,
    pub z0: f32,
    pub x1: f32,
    pub z1: f32,
}

impl Rect {
    pub fn new(x0: f32, z0: f32, x1: f32, z1: f32) -> Rect {
        Rect { x0: x0.min(x1), z0: z0.min(z1), x1: x0.max(x1), z1: z0.max(z1) }
    }

    pub fn centered(cx: f32, cz: f32, half_x: f32, half_z: f32) -> Rect {
        Rect::new(cx - half_x, cz - half_z, cx + half_x, cz + half_z)
    }

    pub fn width(&self) -> f32 {
        self.x1 - self.x0
    }

    pub fn depth(&self) -> f32 {
        self.z1 - self.z0
    }

    pub fn centre(&self) -> (f32, f32) {
        ((self.x0 + self.x1) * 0.5, (self.z0 + self.z1) * 0.5)
    }

    pub fn grow(&self, d: f32) -> Rect {
        Rect { x0: self.x0 - d, z0: self.z0 - d, x1: self.x1 + d, z1: self.z1 + d }
    }

    pub fn contains(&self, x: f32, z: f32) -> bool {
        (self.x0..=self.x1).contains(&x) && (self.z0..=self.z1).contains(&z)
    }

    pub fn contains_rect(&self, o: &Rect) -> bool {
        o.x0 >= self.x0 && o.x1 <= self.x1 && o.z0 >= self.z0 && o.z1 <= self.z1
    }

    /// Overlap of the interiors; touching edges do not count.
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x0 < o.x1 && o.x0 < self.x1 && self.z0 < o.z1 && o.z0 < self.z1
    }

    /// Distance from a point to the rectangle (0 inside).
    pub fn distance(&self, x: f32, z: f32) -> f32 {
        let dx = (self.x0 - x).max(0.0).max(x - self.x1);
        let dz = (self.z0 - z).max(0.0).max(z - self.z1);
        (dx * dx + dz * dz).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rectangles() {
        let r = Rect::new(2.0, 3.0, 0.0, 1.0);
        assert_eq!((r.x0, r.z0, r.x1, r.z1), (0.0, 1.0, 2.0, 3.0));
        assert!(r.overlaps(&Rect::new(1.0, 2.0, 5.0, 5.0)));
        assert!(!r.overlaps(&Rect::new(2.0, 1.0, 3.0, 3.0)), "touching is not overlapping");
        assert_eq!(r.distance(1.0, 2.0), 0.0);
        assert_eq!(r.distance(5.0, 7.0), 5.0);
        assert_eq!(v3(1.0, 0.0, 0.0).cross(v3(0.0, 1.0, 0.0)), v3(0.0, 0.0, 1.0));
    }
}
