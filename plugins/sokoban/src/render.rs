//! Text grid and RGB image of a level.

use crate::config::Symbols;
use crate::level::{Cell, Level};
use vagen_sdk::{Canvas, Image, grid_text};

pub fn text(l: &Level, s: &Symbols) -> String {
    grid_text(l.width, l.height, |x, y| {
        let p = y * l.width + x;
        let target = l.cells[p] == Cell::Target;
        match (l.cells[p], l.is_box(p), p == l.player) {
            (Cell::Wall, _, _) => s.wall,
            (_, true, _) if target => s.box_on_target,
            (_, true, _) => s.box_,
            (_, _, true) if target => s.player_on_target,
            (_, _, true) => s.player,
            _ if target => s.target,
            _ => s.floor,
        }
    })
}

const WALL: [u8; 3] = [120, 72, 48];
const MORTAR: [u8; 3] = [90, 52, 34];
const FLOOR: [u8; 3] = [226, 220, 200];
const TARGET: [u8; 3] = [214, 56, 56];
const BOX: [u8; 3] = [196, 142, 64];
const BOX_EDGE: [u8; 3] = [120, 80, 30];
const BOX_DONE: [u8; 3] = [72, 170, 90];
const PLAYER: [u8; 3] = [40, 80, 200];

pub fn image(l: &Level, tile: u32) -> Image {
    let t = tile as i64;
    let mut c = Canvas::new(l.width as u32 * tile, l.height as u32 * tile, FLOOR);
    for p in 0..l.cells.len() {
        let (x, y) = l.xy(p);
        let (x0, y0) = (x as i64 * t, y as i64 * t);
        let (cx, cy) = (x0 as f64 + t as f64 / 2.0, y0 as f64 + t as f64 / 2.0);
        match l.cells[p] {
            Cell::Wall => {
                c.fill_rect(x0, y0, t, t, WALL);
                c.fill_rect(x0, y0 + t / 2, t, 1.max(t / 16), MORTAR);
            }
            Cell::Target => {
                c.fill_circle(cx, cy, t as f64 * 0.3, TARGET);
                c.fill_circle(cx, cy, t as f64 * 0.18, FLOOR);
            }
            Cell::Floor => {}
        }
        if l.is_box(p) {
            let inset = t / 8;
            let fill = if l.cells[p] == Cell::Target { BOX_DONE } else { BOX };
            c.fill_rect(x0 + inset, y0 + inset, t - 2 * inset, t - 2 * inset, BOX_EDGE);
            c.fill_rect(x0 + 2 * inset, y0 + 2 * inset, t - 4 * inset, t - 4 * inset, fill);
        }
        if p == l.player {
            c.fill_circle(cx, cy, t as f64 * 0.32, PLAYER);
        }
    }
    c.into_image()
}
