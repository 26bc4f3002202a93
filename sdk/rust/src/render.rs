//! Text grids and RGB drawing for observations.

use crate::Image;

/// Renders a grid row by row, one character per cell, rows joined by newlines.
pub fn grid_text(width: usize, height: usize, cell: impl Fn(usize, usize) -> char) -> String {
    let mut s = String::with_capacity((width + 1) * height * 2);
    for y in 0..height {
        if y > 0 {
            s.push('\n');
        }
        s.extend((0..width).map(|x| cell(x, y)));
    }
    s
}

/// An RGB8 drawing surface. Drawing outside the canvas is clipped, never a panic.
#[derive(Clone, Debug)]
pub struct Canvas {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Canvas {
    /// A canvas filled with `background`.
    pub fn new(width: u32, height: u32, background: [u8; 3]) -> Self {
        let rgb = background.repeat(width as usize * height as usize);
        Self { width, height, rgb }
    }

    /// Width in pixels.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// Height in pixels.
    pub fn height(&self) -> u32 {
        self.height
    }

    /// Paints one pixel; outside the canvas, nothing.
    pub fn set(&mut self, x: i64, y: i64, color: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as u32) < self.width && (y as u32) < self.height {
            let i = (y as usize * self.width as usize + x as usize) * 3;
            self.rgb[i..i + 3].copy_from_slice(&color);
        }
    }

    /// Fills a `w` × `h` rectangle from (`x`, `y`), clipped to the canvas.
    pub fn fill_rect(&mut self, x: i64, y: i64, w: i64, h: i64, color: [u8; 3]) {
        let (x0, y0) = (x.max(0), y.max(0));
        let (x1, y1) = ((x + w).min(self.width as i64), (y + h).min(self.height as i64));
        if x0 >= x1 || y0 >= y1 {
            return;
        }
        let row_len = self.width as usize * 3;
        for yy in y0 as usize..y1 as usize {
            let row = &mut self.rgb[yy * row_len + x0 as usize * 3..yy * row_len + x1 as usize * 3];
            for px in row.chunks_exact_mut(3) {
                px.copy_from_slice(&color);
            }
        }
    }

    /// A filled disc centred at (`cx`, `cy`).
    pub fn fill_circle(&mut self, cx: f64, cy: f64, r: f64, color: [u8; 3]) {
        let (x0, x1) = ((cx - r).floor() as i64, (cx + r).ceil() as i64);
        let (y0, y1) = ((cy - r).floor() as i64, (cy + r).ceil() as i64);
        // One horizontal span per row instead of a test per pixel.
        for y in y0..=y1 {
            let dy = y as f64 + 0.5 - cy;
            let half = (r * r - dy * dy).max(0.0).sqrt();
            if half == 0.0 {
                continue;
            }
            let (sx, ex) = ((cx - half - 0.5).ceil() as i64, (cx + half - 0.5).floor() as i64);
            self.fill_rect(sx.max(x0), y, ex.min(x1) - sx.max(x0) + 1, 1, color);
        }
    }

    /// A rectangle outline `t` pixels thick, inside the given bounds.
    pub fn stroke_rect(&mut self, x: i64, y: i64, w: i64, h: i64, t: i64, color: [u8; 3]) {
        self.fill_rect(x, y, w, t, color);
        self.fill_rect(x, y + h - t, w, t, color);
        self.fill_rect(x, y, t, h, color);
        self.fill_rect(x + w - t, y, t, h, color);
    }

    /// The pixels as an observation image (RGB8, row-major).
    pub fn into_image(self) -> Image {
        Image { width: self.width, height: self.height, rgb: self.rgb }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_and_canvas() {
        assert_eq!(grid_text(2, 2, |x, y| if x == y { 'P' } else { '_' }), "P_\n_P");
        let mut c = Canvas::new(4, 3, [1, 2, 3]);
        c.fill_rect(-5, -5, 6, 6, [9, 9, 9]);
        c.fill_circle(100.0, 100.0, 5.0, [0, 0, 0]);
        let img = c.into_image();
        assert_eq!(img.rgb.len(), 4 * 3 * 3);
        assert_eq!(&img.rgb[0..3], &[9, 9, 9]);
        assert_eq!(&img.rgb[img.rgb.len() - 3..], &[1, 2, 3]);
    }
}

/// What a grid game's observation shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObservationMode {
    /// The grid as text.
    Text,
    /// The grid as a picture (an `<image>` marker in the text).
    Image,
    /// Both.
    TextAndImage,
}

/// "feedback\nCurrent observation:\n<grid>\n<image>", with the grid and the image included
/// as `mode` says (each drawn only when shown).
pub fn grid_observation(
    feedback: &str,
    mode: ObservationMode,
    text: impl FnOnce() -> String,
    image: impl FnOnce() -> Image,
) -> crate::Observation {
    let mut obs = crate::Observation::text(feedback);
    if !feedback.is_empty() {
        obs.text.push('\n');
    }
    obs.text.push_str("Current observation:\n");
    if mode != ObservationMode::Image {
        obs.text.push_str(&text());
        obs.text.push('\n');
    }
    if mode != ObservationMode::Text {
        obs.push_image(image());
    }
    obs
}
