//! The target in words, for grounding rewards and text-only agents: each shape it draws,
//! back to front, with its colour, place and size on the canvas.

use crate::document::{self, Limits};
use resvg::usvg;
use std::collections::HashMap;

const SHAPES: [&str; 7] = ["path", "rect", "circle", "ellipse", "line", "polyline", "polygon"];
const PREFIX: &str = "vagen-shape-";

/// "The icon has 3 shapes, back to front: a large blue (#2196f3) shape in the centre; …".
/// `svg` is a target, so it parses; an empty string if it somehow does not.
pub fn describe(svg: &str, side: u32) -> String {
    let (tagged, kinds) = tag_shapes(svg);
    let Ok(tree) = document::parse(&tagged, &Limits::default(), side) else {
        return String::new();
    };
    let canvas = document::fit(tree.size(), side);
    let mut parts = Vec::new();
    collect(tree.root(), &kinds, canvas, side as f32, &mut parts);
    let n = parts.len();
    format!("The icon has {n} shape{}, back to front: {}.", if n == 1 { "" } else { "s" }, parts.join("; "))
}

/// The source with an id on each shape element that has none (usvg keeps ids, not element
/// names), and the kind of shape each id stands for.
fn tag_shapes(svg: &str) -> (String, HashMap<String, &'static str>) {
    let mut kinds = HashMap::new();
    let Ok(doc) = roxmltree::Document::parse(svg) else {
        return (svg.to_string(), kinds);
    };
    let mut inserts = Vec::new();
    for node in doc.descendants().filter(|n| n.is_element()) {
        let Some(&kind) = SHAPES.iter().find(|&&s| s == node.tag_name().name()) else { continue };
        let kind = if kind == "path" { "shape" } else { kind };
        match node.attribute("id") {
            Some(id) => {
                kinds.insert(id.to_string(), kind);
            }
            None => {
                let id = format!("{PREFIX}{}", inserts.len());
                // After "<name": the tag's first whitespace, '/' or '>'.
                let start = node.range().start;
                let at = svg[start..].find(|c: char| c.is_whitespace() || c == '/' || c == '>').map(|i| start + i);
                if let Some(at) = at {
                    inserts.push((at, format!(" id=\"{id}\"")));
                    kinds.insert(id, kind);
                }
            }
        }
    }
    let mut out = svg.to_string();
    for (at, text) in inserts.iter().rev() {
        out.insert_str(*at, text);
    }
    (out, kinds)
}

fn collect(
    group: &usvg::Group,
    kinds: &HashMap<String, &'static str>,
    canvas: resvg::tiny_skia::Transform,
    side: f32,
    out: &mut Vec<String>,
) {
    for node in group.children() {
        match node {
            usvg::Node::Group(g) => collect(g, kinds, canvas, side, out),
            usvg::Node::Path(p) => {
                let kind = kinds.get(p.id()).copied().unwrap_or("shape");
                let paint = p.fill().map(|f| f.paint()).or_else(|| p.stroke().map(|s| s.paint()));
                let colour = match paint {
                    Some(usvg::Paint::Color(c)) => {
                        format!("{} (#{:02x}{:02x}{:02x})", colour_name(c.red, c.green, c.blue), c.red, c.green, c.blue)
                    }
                    Some(_) => "shaded".into(),
                    None => continue,
                };
                let Some(b) = p.abs_bounding_box().transform(canvas) else { continue };
                let outline = if p.fill().is_none() { " outline" } else { "" };
                let area = b.width() * b.height() / (side * side);
                let size = if area >= 0.25 {
                    "large"
                } else if area >= 0.04 {
                    "medium"
                } else {
                    "small"
                };
                let place = place((b.x() + b.width() / 2.0) / side, (b.y() + b.height() / 2.0) / side);
                out.push(format!("a {size} {colour} {kind}{outline} {place}"));
            }
            usvg::Node::Image(_) | usvg::Node::Text(_) => {}
        }
    }
}

/// Where a point (as fractions of the canvas) lies, in thirds.
fn place(x: f32, y: f32) -> String {
    let col = ["left", "centre", "right"][((x * 3.0) as usize).min(2)];
    let row = ["top", "middle", "bottom"][((y * 3.0) as usize).min(2)];
    match (row, col) {
        ("middle", "centre") => "in the centre".into(),
        ("middle", c) => format!("on the {c}"),
        (r, "centre") => format!("at the {r}"),
        (r, c) => format!("at the {r} {c}"),
    }
}

/// A plain colour word: greys by lightness, others by hue, with light / dark where it helps.
pub fn colour_name(r: u8, g: u8, b: u8) -> String {
    let (r, g, b) = (f32::from(r) / 255.0, f32::from(g) / 255.0, f32::from(b) / 255.0);
    let (max, min) = (r.max(g).max(b), r.min(g).min(b));
    let l = (max + min) / 2.0;
    let d = max - min;
    let s = if d == 0.0 { 0.0 } else { d / (1.0 - (2.0 * l - 1.0).abs()) };
    if s < 0.15 || d < 0.08 {
        return match l {
            l if l < 0.15 => "black",
            l if l < 0.4 => "dark grey",
            l if l < 0.75 => "grey",
            l if l < 0.93 => "light grey",
            _ => "white",
        }
        .into();
    }
    let h = if max == r {
        60.0 * ((g - b) / d).rem_euclid(6.0)
    } else if max == g {
        60.0 * ((b - r) / d + 2.0)
    } else {
        60.0 * ((r - g) / d + 4.0)
    };
    let hue = match h {
        h if h < 15.0 => "red",
        h if h < 45.0 && l < 0.35 => "brown",
        h if h < 45.0 => "orange",
        h if h < 70.0 => "yellow",
        h if h < 165.0 => "green",
        h if h < 195.0 => "teal",
        h if h < 255.0 => "blue",
        h if h < 290.0 => "purple",
        h if h < 340.0 => "pink",
        _ => "red",
    };
    match l {
        l if l > 0.75 => format!("light {hue}"),
        l if l < 0.3 && hue != "brown" => format!("dark {hue}"),
        _ => hue.into(),
    }
}
