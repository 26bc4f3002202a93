//! Where things are, in words relative to the agent: for `describe_state` and the text
//! observation.

use crate::scene::Object;
use crate::walk::HEADINGS;

/// "ahead", "ahead to the left", "to the right", "behind", ... seen from (x, z) facing
/// `heading`.
pub fn direction(from: (f32, f32), heading: u8, to: (f32, f32)) -> &'static str {
    let (fx, fz) = HEADINGS[heading as usize % 4];
    let (dx, dz) = ((to.0 - from.0) as f64, (to.1 - from.1) as f64);
    let ahead = dx * fx as f64 + dz * fz as f64;
    // Right of a heading (fx, fz) is (fz, −fx).
    let right = dx * fz as f64 - dz * fx as f64;
    let angle = right.atan2(ahead).to_degrees();
    let side = |right: &'static str, left: &'static str| if angle > 0.0 { right } else { left };
    match angle.abs() {
        a if a <= 22.5 => "ahead",
        a if a <= 67.5 => side("ahead to the right", "ahead to the left"),
        a if a <= 112.5 => side("to the right", "to the left"),
        a if a <= 157.5 => side("behind to the right", "behind to the left"),
        _ => "behind",
    }
}

/// "the red sofa, 2.4 m ahead to the left"
pub fn locate(o: &Object, from: (f32, f32), heading: u8) -> String {
    let d = o.distance(from.0, from.1);
    format!("the {} {}, {:.1} m {}", o.colour.name(), o.kind.name(), d, direction(from, heading, (o.x, o.z)))
}

/// The text observation: what is in view, nearest first.
pub fn view(objects: &[Object], visible: &[usize], from: (f32, f32), heading: u8) -> String {
    if visible.is_empty() {
        return "You see no objects, only walls and floor.".into();
    }
    let parts: Vec<String> = visible.iter().map(|&i| locate(&objects[i], from, heading)).collect();
    format!("You see {}.", parts.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_turn_with_the_heading() {
        assert_eq!(direction((0.0, 0.0), 0, (0.0, 3.0)), "ahead");
        assert_eq!(direction((0.0, 0.0), 0, (3.0, 0.0)), "to the right");
        assert_eq!(direction((0.0, 0.0), 1, (3.0, 0.0)), "ahead");
        assert_eq!(direction((0.0, 0.0), 1, (0.0, 3.0)), "to the left");
        assert_eq!(direction((0.0, 0.0), 2, (-1.0, 1.0)), "behind to the right");
        assert_eq!(direction((0.0, 0.0), 3, (0.0, 0.0)), "ahead");
    }
}
