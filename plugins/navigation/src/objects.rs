//! Household objects: what each looks like (built from boxes, cones and balls in a local
//! frame whose front faces +z and whose footprint is centred on the origin), where it may
//! stand, and how people talk about it.

use crate::geom::{V3, v3};
use crate::mesh::{Mesh, Rgb};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Sofa,
    Table,
    Chair,
    Bed,
    Fridge,
    Tv,
    Plant,
    Lamp,
    Bookshelf,
    Laptop,
    Mug,
}

/// Where an object goes when a room is furnished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// Back against a wall, front into the room.
    AgainstWall,
    /// Anywhere on the floor, any quarter turn.
    Free,
    /// On a table's top.
    OnTable,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Colour {
    Red,
    Orange,
    Yellow,
    Green,
    Blue,
    Purple,
    Pink,
    White,
    Black,
    Grey,
    Brown,
}

impl Colour {
    pub fn name(self) -> &'static str {
        match self {
            Colour::Red => "red",
            Colour::Orange => "orange",
            Colour::Yellow => "yellow",
            Colour::Green => "green",
            Colour::Blue => "blue",
            Colour::Purple => "purple",
            Colour::Pink => "pink",
            Colour::White => "white",
            Colour::Black => "black",
            Colour::Grey => "grey",
            Colour::Brown => "brown",
        }
    }

    pub fn rgb(self) -> Rgb {
        match self {
            Colour::Red => [190, 35, 35],
            Colour::Orange => [235, 120, 25],
            Colour::Yellow => [235, 205, 40],
            Colour::Green => [45, 150, 60],
            Colour::Blue => [35, 75, 195],
            Colour::Purple => [120, 55, 165],
            Colour::Pink => [235, 130, 175],
            Colour::White => [240, 240, 235],
            Colour::Black => [35, 35, 40],
            Colour::Grey => [130, 130, 135],
            Colour::Brown => [125, 78, 40],
        }
    }
}

fn darker(c: Rgb, f: f32) -> Rgb {
    c.map(|x| (x as f32 * f) as u8)
}

const WOOD: Rgb = [110, 70, 38];
const LINEN: Rgb = [245, 243, 235];
const SCREEN: Rgb = [25, 45, 90];
const METAL: Rgb = [150, 150, 155];
const LEAVES: Rgb = [40, 125, 45];

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::Sofa,
        Kind::Table,
        Kind::Chair,
        Kind::Bed,
        Kind::Fridge,
        Kind::Tv,
        Kind::Plant,
        Kind::Lamp,
        Kind::Bookshelf,
        Kind::Laptop,
        Kind::Mug,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Sofa => "sofa",
            Kind::Table => "table",
            Kind::Chair => "chair",
            Kind::Bed => "bed",
            Kind::Fridge => "fridge",
            Kind::Tv => "tv",
            Kind::Plant => "plant",
            Kind::Lamp => "lamp",
            Kind::Bookshelf => "bookshelf",
            Kind::Laptop => "laptop",
            Kind::Mug => "mug",
        }
    }

    /// Footprint before turning: width along local x, depth along local z (metres).
    pub fn size(self) -> (f32, f32) {
        match self {
            Kind::Sofa => (2.0, 0.9),
            Kind::Table => (1.2, 0.8),
            Kind::Chair => (0.5, 0.5),
            Kind::Bed => (1.6, 2.1),
            Kind::Fridge => (0.7, 0.7),
            Kind::Tv => (1.2, 0.45),
            Kind::Plant => (0.66, 0.66),
            Kind::Lamp => (0.44, 0.44),
            Kind::Bookshelf => (1.0, 0.35),
            Kind::Laptop => (0.36, 0.25),
            Kind::Mug => (0.16, 0.12),
        }
    }

    pub fn placement(self) -> Placement {
        match self {
            Kind::Sofa | Kind::Bed | Kind::Fridge | Kind::Tv | Kind::Bookshelf => Placement::AgainstWall,
            Kind::Table | Kind::Chair | Kind::Plant | Kind::Lamp => Placement::Free,
            Kind::Laptop | Kind::Mug => Placement::OnTable,
        }
    }

    /// The colours it comes in; the first part listed in `build` wears it.
    pub fn colours(self) -> &'static [Colour] {
        use Colour::*;
        match self {
            Kind::Sofa => &[Red, Blue, Green, Grey, Brown, Yellow, Purple],
            Kind::Table => &[Brown, White, Black, Grey],
            Kind::Chair => &[Red, Blue, Green, Yellow, Brown, Black, White],
            Kind::Bed => &[Red, Blue, Green, Purple, Pink, Yellow, Orange],
            Kind::Fridge => &[White, Grey, Black, Red],
            Kind::Tv => &[Black, Grey, White],
            Kind::Plant => &[Orange, White, Blue, Grey],
            Kind::Lamp => &[White, Yellow, Orange, Red, Blue],
            Kind::Bookshelf => &[Brown, White, Black],
            Kind::Laptop => &[Grey, Black, White],
            Kind::Mug => &[Red, Blue, White, Yellow, Green, Black],
        }
    }

    /// What it is for, for instructions that name a need instead of the object.
    pub fn purpose(self) -> &'static str {
        match self {
            Kind::Sofa => "I want to sit down with my family and relax.",
            Kind::Table => "I need a flat surface to eat dinner on.",
            Kind::Chair => "I need a seat for just one person.",
            Kind::Bed => "I am tired and want to sleep.",
            Kind::Fridge => "I want to keep the milk cold.",
            Kind::Tv => "I want to watch the news.",
            Kind::Plant => "Something green in the room needs watering.",
            Kind::Lamp => "It is getting dark and I need more light.",
            Kind::Bookshelf => "I am looking for a book to read.",
            Kind::Laptop => "I need to write an email.",
            Kind::Mug => "I want something to drink my coffee from.",
        }
    }

    /// The object in its local frame, main part in `colour`.
    pub fn build(self, colour: Colour, mesh: &mut Mesh) {
        let c = colour.rgb();
        let b = |m: &mut Mesh, lo: (f32, f32, f32), hi: (f32, f32, f32), col: Rgb| {
            m.cuboid(v3(lo.0, lo.1, lo.2), v3(hi.0, hi.1, hi.2), col)
        };
        let legs = |m: &mut Mesh, hx: f32, hz: f32, t: f32, h: f32, col: Rgb| {
            for (sx, sz) in [(-1.0, -1.0), (1.0, -1.0), (-1.0, 1.0), (1.0, 1.0)] {
                let (x, z) = (sx * (hx - t / 2.0), sz * (hz - t / 2.0));
                m.cuboid(v3(x - t / 2.0, 0.0, z - t / 2.0), v3(x + t / 2.0, h, z + t / 2.0), col);
            }
        };
        match self {
            Kind::Sofa => {
                b(mesh, (-1.0, 0.1, -0.45), (1.0, 0.45, 0.45), c);
                b(mesh, (-1.0, 0.45, -0.45), (1.0, 0.9, -0.22), darker(c, 0.85));
                b(mesh, (-1.0, 0.45, -0.22), (-0.8, 0.66, 0.45), darker(c, 0.9));
                b(mesh, (0.8, 0.45, -0.22), (1.0, 0.66, 0.45), darker(c, 0.9));
                legs(mesh, 0.95, 0.4, 0.08, 0.1, Colour::Black.rgb());
            }
            Kind::Table => {
                b(mesh, (-0.6, 0.71, -0.4), (0.6, 0.76, 0.4), c);
                legs(mesh, 0.56, 0.36, 0.06, 0.71, darker(c, 0.7));
            }
            Kind::Chair => {
                b(mesh, (-0.25, 0.42, -0.25), (0.25, 0.47, 0.25), c);
                b(mesh, (-0.25, 0.47, -0.25), (0.25, 0.95, -0.2), darker(c, 0.85));
                legs(mesh, 0.25, 0.25, 0.045, 0.42, darker(c, 0.6));
            }
            Kind::Bed => {
                b(mesh, (-0.77, 0.3, -0.3), (0.77, 0.56, 1.02), c);
                b(mesh, (-0.8, 0.0, -1.05), (0.8, 0.3, 1.05), WOOD);
                b(mesh, (-0.75, 0.3, -0.97), (0.75, 0.5, -0.3), LINEN);
                b(mesh, (-0.5, 0.5, -0.93), (0.5, 0.63, -0.6), LINEN);
                b(mesh, (-0.8, 0.0, -1.05), (0.8, 1.1, -0.97), WOOD);
            }
            Kind::Fridge => {
                b(mesh, (-0.35, 0.0, -0.35), (0.35, 1.8, 0.29), c);
                b(mesh, (-0.35, 0.0, 0.29), (0.35, 1.14, 0.31), c);
                b(mesh, (-0.35, 1.18, 0.29), (0.35, 1.8, 0.31), c);
                b(mesh, (0.22, 0.7, 0.31), (0.26, 1.05, 0.35), METAL);
                b(mesh, (0.22, 1.25, 0.31), (0.26, 1.5, 0.35), METAL);
            }
            Kind::Tv => {
                b(mesh, (-0.55, 0.52, -0.08), (0.55, 1.16, -0.02), c);
                b(mesh, (-0.52, 0.55, -0.02), (0.52, 1.13, -0.01), SCREEN);
                b(mesh, (-0.1, 0.45, -0.07), (0.1, 0.52, -0.03), Colour::Black.rgb());
                b(mesh, (-0.6, 0.0, -0.22), (0.6, 0.45, 0.22), WOOD);
            }
            Kind::Plant => {
                mesh.frustum(v3(0.0, 0.0, 0.0), 0.42, 0.15, 0.2, 10, c);
                mesh.ball(v3(0.0, 0.8, 0.0), 0.32, LEAVES);
                mesh.frustum(v3(0.0, 0.95, 0.0), 0.45, 0.2, 0.0, 8, darker(LEAVES, 0.85));
            }
            Kind::Lamp => {
                mesh.frustum(v3(0.0, 1.25, 0.0), 0.32, 0.22, 0.12, 12, c);
                mesh.frustum(v3(0.0, 0.0, 0.0), 0.04, 0.18, 0.18, 12, Colour::Black.rgb());
                mesh.frustum(v3(0.0, 0.04, 0.0), 1.25, 0.02, 0.02, 6, METAL);
            }
            Kind::Bookshelf => {
                b(mesh, (-0.5, 0.0, -0.175), (-0.47, 1.8, 0.175), c);
                b(mesh, (0.47, 0.0, -0.175), (0.5, 1.8, 0.175), c);
                b(mesh, (-0.47, 0.0, -0.175), (0.47, 1.8, -0.15), darker(c, 0.8));
                for y in [0.0, 0.6, 1.2, 1.77] {
                    b(mesh, (-0.47, y, -0.15), (0.47, y + 0.03, 0.175), c);
                }
                let books = [Colour::Red, Colour::Blue, Colour::Green, Colour::Yellow, Colour::White, Colour::Orange];
                for (shelf, y) in [0.03f32, 0.63, 1.23].into_iter().enumerate() {
                    for k in 0..7 {
                        let x = -0.45 + k as f32 * 0.125;
                        let h = 0.22 + 0.03 * ((k + shelf) % 3) as f32;
                        let col = books[(k * 5 + shelf * 2) % books.len()].rgb();
                        b(mesh, (x, y, -0.14), (x + 0.11, y + h, 0.12), col);
                    }
                }
            }
            Kind::Laptop => {
                b(mesh, (-0.18, 0.0, -0.125), (0.18, 0.02, 0.125), c);
                b(mesh, (-0.18, 0.02, -0.125), (0.18, 0.26, -0.11), c);
                b(mesh, (-0.16, 0.04, -0.11), (0.16, 0.24, -0.105), SCREEN);
            }
            Kind::Mug => {
                mesh.frustum(v3(0.0, 0.0, 0.0), 0.12, 0.05, 0.055, 10, c);
                b(mesh, (0.05, 0.03, -0.012), (0.08, 0.09, 0.012), c);
            }
        }
    }
}

/// Where a quarter-turned footprint reaches, as half extents (x, z).
pub fn half_extents(kind: Kind, quarter_turns: u8) -> (f32, f32) {
    let (w, d) = kind.size();
    if quarter_turns.is_multiple_of(2) { (w / 2.0, d / 2.0) } else { (d / 2.0, w / 2.0) }
}

/// Lifts an object's mesh to its place: turned, moved to (x, y, z).
pub fn place(kind: Kind, colour: Colour, id: u8, quarter_turns: u8, at: V3) -> Mesh {
    let mut m = Mesh::new(id);
    kind.build(colour, &mut m);
    m.placed(quarter_turns, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_object_stays_inside_its_footprint() {
        for kind in Kind::ALL {
            for turns in 0..4 {
                let m = place(kind, kind.colours()[0], 1, turns, v3(0.0, 0.0, 0.0));
                let (hx, hz) = half_extents(kind, turns);
                for t in &m.tris {
                    for p in t.v {
                        assert!(p.x.abs() <= hx + 1e-4 && p.z.abs() <= hz + 1e-4, "{kind:?} {turns}: {p:?}");
                        assert!(p.y >= -1e-6 && p.y <= 1.9, "{kind:?}: {p:?}");
                    }
                }
                assert!(!m.tris.is_empty());
            }
        }
    }
}
