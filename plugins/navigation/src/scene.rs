//! The house: rooms split from a rectangle (walls on whole metres, one door in every
//! dividing wall), their floors, walls and ceilings as triangles, and furniture placed
//! without overlap.

use crate::geom::{Rect, V3, v3};
use crate::mesh::{Mesh, Rgb, Tri};
use crate::objects::{Colour, Kind, Placement, half_extents, place};
use vagen_sdk::Rng;

pub const WALL_HEIGHT: f32 = 2.6;
/// Walls are 0.1 m thick, centred on their line.
pub const WALL_HALF: f32 = 0.05;
const DOOR_HEIGHT: f32 = 2.1;
/// Height of table tops, where laptops and mugs stand.
const TABLE_TOP: f32 = 0.76;
/// Rooms are never narrower than this (metres).
const MIN_ROOM: u32 = 3;

const FLOORS: [[Rgb; 2]; 5] = [
    [[176, 134, 92], [158, 118, 80]],
    [[186, 186, 180], [156, 156, 152]],
    [[205, 190, 152], [184, 168, 132]],
    [[112, 122, 142], [100, 110, 128]],
    [[172, 98, 72], [150, 86, 62]],
];
const WALLS: [[Rgb; 2]; 6] = [
    [[236, 226, 200], [236, 226, 200]],
    [[200, 216, 232], [184, 202, 220]],
    [[214, 230, 198], [214, 230, 198]],
    [[238, 208, 196], [222, 190, 178]],
    [[224, 224, 224], [224, 224, 224]],
    [[242, 222, 160], [228, 204, 140]],
];
const CEILING: Rgb = [238, 238, 230];
const TRIM: Rgb = [205, 205, 198];

#[derive(Clone, Debug, PartialEq)]
pub struct Room {
    /// Bounds on the wall centre lines.
    pub rect: Rect,
    pub floor: [Rgb; 2],
    pub wall: [Rgb; 2],
}

impl Room {
    /// Where furniture may stand.
    pub fn interior(&self) -> Rect {
        self.rect.grow(-WALL_HALF)
    }
}

/// A straight run of wall (or a door opening): along z at x = `line` when `along_z`, else
/// along x at z = `line`, from `a` to `b`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segment {
    pub along_z: bool,
    pub line: f32,
    pub a: f32,
    pub b: f32,
}

impl Segment {
    /// The floor area it covers, `half` either side of its line.
    pub fn rect(&self, half: f32) -> Rect {
        if self.along_z {
            Rect::new(self.line - half, self.a, self.line + half, self.b)
        } else {
            Rect::new(self.a, self.line - half, self.b, self.line + half)
        }
    }

    /// World point at `t` along the segment, `off` across it, height `y`.
    fn at(&self, t: f32, off: f32, y: f32) -> V3 {
        if self.along_z { v3(self.line + off, y, t) } else { v3(t, y, self.line + off) }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pub width: f32,
    pub depth: f32,
    pub rooms: Vec<Room>,
    /// Wall pieces, door openings already cut out, each lengthened by the wall's half
    /// thickness at both ends so corners close.
    pub walls: Vec<Segment>,
    pub doors: Vec<Segment>,
}

impl Layout {
    pub fn room_at(&self, x: f32, z: f32) -> Option<usize> {
        self.rooms.iter().position(|r| r.interior().contains(x, z))
    }

    /// Splits a rectangle of whole metres into `rooms` rooms; `None` when the drawn sizes
    /// leave no room for a dividing wall that clears every door.
    pub fn generate(rng: &mut Rng, rooms: u32, size: [u32; 2]) -> Option<Layout> {
        let side = |rng: &mut Rng| size[0] + rng.below((size[1] - size[0] + 1) as usize) as u32;
        let (cols, rows) = match rooms {
            1 => (1, 1),
            2 => (2, 1),
            _ => (2, 2),
        };
        let width: u32 = (0..cols).map(|_| side(rng)).sum();
        let depth: u32 = (0..rows).map(|_| side(rng)).sum();
        // (x0, z0, x1, z1) in whole metres.
        let mut cells = vec![[0, 0, width, depth]];
        let mut doors: Vec<Segment> = Vec::new();
        let mut splits: Vec<Segment> = Vec::new();
        while cells.len() < rooms as usize {
            // The largest room first; another room or the other direction when no line
            // clears the doors.
            let mut order: Vec<usize> = (0..cells.len()).collect();
            order.sort_by_key(|&i| {
                let [x0, z0, x1, z1] = cells[i];
                std::cmp::Reverse((x1 - x0) * (z1 - z0))
            });
            let mut chosen = None;
            for idx in order {
                let [x0, z0, x1, z1] = cells[idx];
                let prefer_x = (x1 - x0) > (z1 - z0) || ((x1 - x0) == (z1 - z0) && rng.chance(0.5));
                for split_x in [prefer_x, !prefer_x] {
                    let (lo, hi, across_lo, across_hi) = if split_x { (x0, x1, z0, z1) } else { (z0, z1, x0, x1) };
                    // A new wall must not end inside an existing door opening.
                    let blocks_door = |p: u32| {
                        doors.iter().any(|d| {
                            d.along_z != split_x
                                && (d.line == across_lo as f32 || d.line == across_hi as f32)
                                && (d.a - 0.5..=d.b + 0.5).contains(&(p as f32))
                        })
                    };
                    let candidates: Vec<u32> =
                        (lo + MIN_ROOM..=hi.saturating_sub(MIN_ROOM)).filter(|&p| !blocks_door(p)).collect();
                    if let Some(&p) = rng.choose(&candidates) {
                        chosen = Some((idx, split_x, p, across_lo, across_hi));
                        break;
                    }
                }
                if chosen.is_some() {
                    break;
                }
            }
            let (idx, split_x, p, across_lo, across_hi) = chosen?;
            let [x0, z0, x1, z1] = cells[idx];
            let door_at = across_lo + 1 + rng.below((across_hi - across_lo - 2) as usize) as u32;
            let wall = Segment { along_z: split_x, line: p as f32, a: across_lo as f32, b: across_hi as f32 };
            doors.push(Segment { a: door_at as f32, b: door_at as f32 + 1.0, ..wall });
            splits.push(wall);
            cells[idx] = if split_x { [x0, z0, p, z1] } else { [x0, z0, x1, p] };
            cells.push(if split_x { [p, z0, x1, z1] } else { [x0, p, x1, z1] });
        }
        let (w, d) = (width as f32, depth as f32);
        let mut walls = vec![
            Segment { along_z: false, line: 0.0, a: 0.0, b: w },
            Segment { along_z: false, line: d, a: 0.0, b: w },
            Segment { along_z: true, line: 0.0, a: 0.0, b: d },
            Segment { along_z: true, line: w, a: 0.0, b: d },
        ];
        for (wall, door) in splits.iter().zip(&doors) {
            walls.push(Segment { b: door.a, ..*wall });
            walls.push(Segment { a: door.b, ..*wall });
        }
        for wall in &mut walls {
            wall.a -= WALL_HALF;
            wall.b += WALL_HALF;
        }
        let mut floors: Vec<usize> = (0..FLOORS.len()).collect();
        let mut paints: Vec<usize> = (0..WALLS.len()).collect();
        rng.shuffle(&mut floors);
        rng.shuffle(&mut paints);
        let rooms = cells
            .iter()
            .enumerate()
            .map(|(i, &[x0, z0, x1, z1])| Room {
                rect: Rect::new(x0 as f32, z0 as f32, x1 as f32, z1 as f32),
                floor: FLOORS[floors[i % floors.len()]],
                wall: WALLS[paints[i % paints.len()]],
            })
            .collect();
        Some(Layout { width: w, depth: d, rooms, walls, doors })
    }

    /// Floors, ceilings, walls and door lintels.
    pub fn mesh(&self) -> Vec<Tri> {
        let mut m = Mesh::new(0);
        const TILE: f32 = 0.5;
        for room in &self.rooms {
            let r = room.rect;
            let (nx, nz) = ((r.width() / TILE).round() as usize, (r.depth() / TILE).round() as usize);
            for i in 0..nx {
                for j in 0..nz {
                    let (x, z) = (r.x0 + i as f32 * TILE, r.z0 + j as f32 * TILE);
                    let below = v3(x, -1.0, z);
                    let quad = [v3(x, 0.0, z), v3(x + TILE, 0.0, z), v3(x + TILE, 0.0, z + TILE), v3(x, 0.0, z + TILE)];
                    m.face(&quad, below, room.floor[(i + j) % 2]);
                }
            }
            let above = v3(r.x0, WALL_HEIGHT + 1.0, r.z0);
            let y = WALL_HEIGHT;
            m.face(&[v3(r.x0, y, r.z0), v3(r.x1, y, r.z0), v3(r.x1, y, r.z1), v3(r.x0, y, r.z1)], above, CEILING);
        }
        for wall in &self.walls {
            for side in [-1.0f32, 1.0] {
                self.wall_side(&mut m, wall, side);
            }
            for (t, out) in [(wall.a, -1.0f32), (wall.b, 1.0)] {
                let h = WALL_HALF;
                let cap =
                    [wall.at(t, -h, 0.0), wall.at(t, h, 0.0), wall.at(t, h, WALL_HEIGHT), wall.at(t, -h, WALL_HEIGHT)];
                m.face(&cap, wall.at(t - out, 0.0, 1.0), TRIM);
            }
        }
        for door in &self.doors {
            let lo = door.at(door.a, -WALL_HALF, DOOR_HEIGHT);
            let hi = door.at(door.b, WALL_HALF, WALL_HEIGHT);
            m.cuboid(v3(lo.x.min(hi.x), lo.y, lo.z.min(hi.z)), v3(lo.x.max(hi.x), hi.y, lo.z.max(hi.z)), TRIM);
        }
        m.tris
    }

    /// One face of a wall, in the paint of each room it borders: a dark skirting board,
    /// then vertical bands every 0.5 m (landmarks that move as the agent does).
    fn wall_side(&self, m: &mut Mesh, wall: &Segment, side: f32) {
        let off = side * WALL_HALF;
        let probe = side * 0.3;
        for room in &self.rooms {
            let r = room.rect.grow(WALL_HALF);
            let p = wall.at((wall.a + wall.b) * 0.5, probe, 0.0);
            let across_inside = if wall.along_z { (r.x0..=r.x1).contains(&p.x) } else { (r.z0..=r.z1).contains(&p.z) };
            let (lo, hi) = if wall.along_z { (r.z0, r.z1) } else { (r.x0, r.x1) };
            let (a, b) = (wall.a.max(lo), wall.b.min(hi));
            if !across_inside || b <= a {
                continue;
            }
            let inside = wall.at((a + b) * 0.5, -side, 1.0);
            let skirting = room.wall[0].map(|c| (c as f32 * 0.45) as u8);
            m.face(
                &[wall.at(a, off, 0.0), wall.at(b, off, 0.0), wall.at(b, off, 0.12), wall.at(a, off, 0.12)],
                inside,
                skirting,
            );
            let mut t = a;
            while t < b {
                let next = ((t / 0.5).floor() + 1.0) * 0.5;
                let end = next.min(b);
                let band = room.wall[((t / 0.5).floor() as i64).rem_euclid(2) as usize];
                let quad = [
                    wall.at(t, off, 0.12),
                    wall.at(end, off, 0.12),
                    wall.at(end, off, WALL_HEIGHT),
                    wall.at(t, off, WALL_HEIGHT),
                ];
                m.face(&quad, inside, band);
                t = end;
            }
        }
    }
}

/// A placed object.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    pub kind: Kind,
    pub colour: Colour,
    pub x: f32,
    pub z: f32,
    /// Height it stands on (0, or a table top).
    pub base: f32,
    pub turns: u8,
    pub room: usize,
}

impl Object {
    pub fn footprint(&self) -> Rect {
        let (hx, hz) = half_extents(self.kind, self.turns);
        Rect::centered(self.x, self.z, hx, hz)
    }

    /// Does the agent bump into it? (Things on tables are above its reach.)
    pub fn obstacle(&self) -> bool {
        self.kind.placement() != Placement::OnTable
    }

    pub fn mesh(&self, id: u8) -> Vec<Tri> {
        place(self.kind, self.colour, id, self.turns, v3(self.x, self.base, self.z)).tris
    }

    pub fn distance(&self, x: f32, z: f32) -> f32 {
        ((self.x - x).powi(2) + (self.z - z).powi(2)).sqrt()
    }
}

/// Conditions on where an object may go.
#[derive(Clone, Copy, Debug, Default)]
pub struct Near {
    /// (x, z, metres): its centre at most this far from the point.
    pub within: Option<(f32, f32, f32)>,
    /// (x, z, metres): its centre at least this far from the point.
    pub beyond: Option<(f32, f32, f32)>,
}

/// Tries random spots for `kind` in `room`; `None` when nothing fits.
pub fn place_object(
    rng: &mut Rng,
    layout: &Layout,
    objects: &[Object],
    kind: Kind,
    colour: Colour,
    room: usize,
    near: Near,
) -> Option<Object> {
    let inner = layout.rooms[room].interior();
    // A walkway through every door stays clear.
    let door_zones: Vec<Rect> =
        layout.doors.iter().map(|d| Segment { a: d.a - 0.2, b: d.b + 0.2, ..*d }.rect(1.0)).collect();
    let span = |rng: &mut Rng, lo: f32, hi: f32| if hi <= lo { None } else { Some(lo + rng.unit() as f32 * (hi - lo)) };
    for _ in 0..60 {
        let candidate = match kind.placement() {
            Placement::AgainstWall => {
                let wall = rng.below(4);
                // Front into the room: south wall faces north (0 turns), west wall east, ...
                let turns = [0u8, 1, 2, 3][wall];
                let (hx, hz) = half_extents(kind, turns);
                let gap = 0.02;
                let (x, z) = match wall {
                    0 => (span(rng, inner.x0 + hx, inner.x1 - hx), Some(inner.z0 + hz + gap)),
                    1 => (Some(inner.x0 + hx + gap), span(rng, inner.z0 + hz, inner.z1 - hz)),
                    2 => (span(rng, inner.x0 + hx, inner.x1 - hx), Some(inner.z1 - hz - gap)),
                    _ => (Some(inner.x1 - hx - gap), span(rng, inner.z0 + hz, inner.z1 - hz)),
                };
                let (Some(x), Some(z)) = (x, z) else { continue };
                Object { kind, colour, x, z, base: 0.0, turns, room }
            }
            Placement::Free => {
                let turns = rng.below(4) as u8;
                let (hx, hz) = half_extents(kind, turns);
                let m = 0.05;
                let x = span(rng, inner.x0 + hx + m, inner.x1 - hx - m);
                let z = span(rng, inner.z0 + hz + m, inner.z1 - hz - m);
                let (Some(x), Some(z)) = (x, z) else { continue };
                Object { kind, colour, x, z, base: 0.0, turns, room }
            }
            Placement::OnTable => {
                let tables: Vec<&Object> = objects.iter().filter(|o| o.kind == Kind::Table && o.room == room).collect();
                let table = rng.choose(&tables)?;
                let top = table.footprint().grow(-0.05);
                let turns = rng.below(4) as u8;
                let (hx, hz) = half_extents(kind, turns);
                let x = span(rng, top.x0 + hx, top.x1 - hx);
                let z = span(rng, top.z0 + hz, top.z1 - hz);
                let (Some(x), Some(z)) = (x, z) else { continue };
                Object { kind, colour, x, z, base: TABLE_TOP, turns, room }
            }
        };
        let fp = candidate.footprint();
        let clashes =
            objects.iter().any(|o| o.obstacle() == candidate.obstacle() && o.footprint().grow(0.05).overlaps(&fp));
        let in_doorway = candidate.obstacle() && door_zones.iter().any(|z| z.overlaps(&fp));
        let near_ok = near.within.is_none_or(|(x, z, d)| candidate.distance(x, z) <= d)
            && near.beyond.is_none_or(|(x, z, d)| candidate.distance(x, z) >= d);
        if inner.contains_rect(&fp) && !clashes && !in_doorway && near_ok {
            return Some(candidate);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rooms_tile_the_house_and_every_dividing_wall_has_a_door() {
        let mut failures = 0;
        for seed in 0..300 {
            for rooms in 1..=4u32 {
                let Some(l) = Layout::generate(&mut Rng::new(seed), rooms, [3, 8]) else {
                    failures += 1;
                    continue;
                };
                assert_eq!(l.rooms.len(), rooms as usize, "seed {seed}");
                assert_eq!(l.doors.len(), rooms as usize - 1);
                let area: f32 = l.rooms.iter().map(|r| r.rect.width() * r.rect.depth()).sum();
                assert_eq!(area, l.width * l.depth);
                for r in &l.rooms {
                    assert!(r.rect.width() >= 3.0 && r.rect.depth() >= 3.0, "seed {seed}: {r:?}");
                }
                // No wall piece covers any part of a door opening.
                for d in &l.doors {
                    let (x, z) = d.rect(0.0).centre();
                    assert!(l.walls.iter().all(|w| w.rect(WALL_HALF).distance(x, z) > 0.4), "seed {seed}");
                }
            }
        }
        assert!(failures < 30, "{failures} of 1200 layouts could not be split");
    }

    #[test]
    fn furniture_never_overlaps() {
        let mut rng = Rng::new(3);
        let l = Layout::generate(&mut rng, 2, [5, 7]).unwrap();
        let mut objects: Vec<Object> = Vec::new();
        for k in 0..40 {
            let kind = Kind::ALL[k % Kind::ALL.len()];
            if let Some(o) = place_object(&mut rng, &l, &objects, kind, Colour::Red, k % 2, Near::default()) {
                objects.push(o);
            }
        }
        assert!(objects.len() > 10);
        for (i, a) in objects.iter().enumerate() {
            assert!(l.rooms[a.room].interior().contains_rect(&a.footprint()));
            for b in &objects[i + 1..] {
                if a.obstacle() == b.obstacle() {
                    assert!(!a.footprint().overlaps(&b.footprint()), "{a:?} {b:?}");
                }
            }
        }
    }
}
