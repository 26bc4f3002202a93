//! Text grid and RGB image of the lake.

use crate::map::{Map, Tile};
use vagen_sdk::{Canvas, Image, grid_text};

pub fn text(map: &Map, player: (usize, usize)) -> String {
    grid_text(map.size, map.size, |x, y| match (map.tile((x, y)), (x, y) == player) {
        (Tile::Frozen, false) => '_',
        (Tile::Hole, false) => 'O',
        (Tile::Goal, false) => 'G',
        (Tile::Frozen, true) => 'P',
        (Tile::Hole, true) => 'X',
        (Tile::Goal, true) => '√',
    })
}

const ICE: [u8; 3] = [204, 230, 250];
const GRID: [u8; 3] = [150, 180, 205];
const HOLE: [u8; 3] = [22, 40, 92];
const GOAL: [u8; 3] = [250, 196, 40];
const PLAYER: [u8; 3] = [214, 48, 49];
const SHADOW: [u8; 3] = [60, 20, 20];

pub fn image(map: &Map, player: (usize, usize), side: u32) -> Image {
    let mut c = Canvas::new(side, side, ICE);
    let cell = side as f64 / map.size as f64;
    let span = |i: usize| ((i as f64 * cell).round() as i64, ((i + 1) as f64 * cell).round() as i64);
    for y in 0..map.size {
        for x in 0..map.size {
            let ((x0, x1), (y0, y1)) = (span(x), span(y));
            let (w, h) = (x1 - x0, y1 - y0);
            c.stroke_rect(x0, y0, w, h, 1, GRID);
            let inset = (cell * 0.12).round() as i64;
            match map.tile((x, y)) {
                Tile::Frozen => {}
                Tile::Hole => c.fill_circle((x0 + x1) as f64 / 2.0, (y0 + y1) as f64 / 2.0, cell * 0.4, HOLE),
                Tile::Goal => c.fill_rect(x0 + inset, y0 + inset, w - 2 * inset, h - 2 * inset, GOAL),
            }
        }
    }
    let ((x0, x1), (y0, y1)) = (span(player.0), span(player.1));
    let (cx, cy) = ((x0 + x1) as f64 / 2.0, (y0 + y1) as f64 / 2.0);
    c.fill_circle(cx, cy, cell * 0.3, SHADOW);
    c.fill_circle(cx, cy, cell * 0.25, PLAYER);
    c.into_image()
}
