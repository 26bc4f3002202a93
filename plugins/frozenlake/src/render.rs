//! Text grid and RGB image of the lake.

use crate::config::View;
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

const OFF_LAKE: [u8; 3] = [70, 76, 84];

/// The lake seen from above: the whole map (`View::TopDown`), or a window of 2·size − 1
/// cells a side centred on the player (`View::Centered`, cells off the lake drawn dark), in
/// which the player is always the middle cell and what lies left of it is always drawn in
/// the same place.
pub fn image(map: &Map, player: (usize, usize), side: u32, view: View) -> Image {
    let mut c = Canvas::new(side, side, ICE);
    let (cells, origin) = match view {
        View::TopDown => (map.size, (0, 0)),
        View::Centered => {
            (2 * map.size - 1, (player.0 as i64 - (map.size as i64 - 1), player.1 as i64 - (map.size as i64 - 1)))
        }
    };
    let cell = side as f64 / cells as f64;
    let span = |i: usize| ((i as f64 * cell).round() as i64, ((i + 1) as f64 * cell).round() as i64);
    let on_lake = |i: usize, o: i64| usize::try_from(i as i64 + o).ok().filter(|&v| v < map.size);
    for y in 0..cells {
        for x in 0..cells {
            let ((x0, x1), (y0, y1)) = (span(x), span(y));
            let (w, h) = (x1 - x0, y1 - y0);
            let Some(tile) = on_lake(x, origin.0).zip(on_lake(y, origin.1)) else {
                c.fill_rect(x0, y0, w, h, OFF_LAKE);
                continue;
            };
            c.stroke_rect(x0, y0, w, h, 1, GRID);
            let inset = (cell * 0.12).round() as i64;
            match map.tile(tile) {
                Tile::Frozen => {}
                Tile::Hole => c.fill_circle((x0 + x1) as f64 / 2.0, (y0 + y1) as f64 / 2.0, cell * 0.4, HOLE),
                Tile::Goal => c.fill_rect(x0 + inset, y0 + inset, w - 2 * inset, h - 2 * inset, GOAL),
            }
        }
    }
    let at = |i: usize, o: i64| (i as i64 - o) as usize;
    let ((x0, x1), (y0, y1)) = (span(at(player.0, origin.0)), span(at(player.1, origin.1)));
    let (cx, cy) = ((x0 + x1) as f64 / 2.0, (y0 + y1) as f64 / 2.0);
    c.fill_circle(cx, cy, cell * 0.3, SHADOW);
    c.fill_circle(cx, cy, cell * 0.25, PLAYER);
    c.into_image()
}
