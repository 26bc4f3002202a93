//! The SVG in an answer: found, checked against limits that bound the renderer's work,
//! parsed and rasterised. build.rs includes this file too (it keeps only the icons that
//! pass it), so it uses nothing but resvg and roxmltree.
//!
//! Inside the sandbox a plugin has no clock it may use (time is deterministic), so the
//! renderer's time is bounded by what the document may contain, not by a timer: every limit
//! below is checked before a single pixel is drawn, and each failure names the limit.

use resvg::{tiny_skia, usvg};
use std::collections::HashMap;

/// Bounds on an answer's SVG. Together they bound parsing and rendering time and memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Bytes of SVG read from one answer.
    pub max_bytes: usize,
    /// Elements, counted after each `<use>` is expanded into what it copies.
    pub max_elements: usize,
    /// Element nesting, `<use>` expansions included.
    pub max_depth: usize,
    /// Largest `width`, `height` or `viewBox` extent, in user units.
    pub max_size: f32,
    /// Path segments in the whole drawing (clip paths, masks and patterns included).
    pub max_path_segments: usize,
    /// Groups drawn on a layer of their own (opacity, masks, clip paths, blend modes).
    pub max_layers: usize,
    /// Dashes all dashed strokes may produce together.
    pub max_dashes: f64,
    /// Pattern tiles drawn, in pixels, as a multiple of the canvas.
    pub max_pattern_canvases: f32,
    /// Pixels painted (each fill, stroke and layer over its bounds on the canvas), as a
    /// multiple of the canvas: what the renderer's time grows with.
    pub max_painted_canvases: f32,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_bytes: 32 * 1024,
            max_elements: 2_000,
            max_depth: 32,
            max_size: 10_000.0,
            max_path_segments: 20_000,
            max_layers: 64,
            max_dashes: 20_000.0,
            max_pattern_canvases: 4.0,
            max_painted_canvases: 100.0,
        }
    }
}

/// What an answer may draw with. Text needs fonts (there are none in the sandbox), raster
/// images are not vectors, and filters and markers multiply work beyond what the limits
/// above can bound cheaply; each is refused by name rather than silently dropped.
const ELEMENTS: [&str; 22] = [
    "svg",
    "g",
    "defs",
    "title",
    "desc",
    "metadata",
    "style",
    "symbol",
    "use",
    "path",
    "rect",
    "circle",
    "ellipse",
    "line",
    "polyline",
    "polygon",
    "linearGradient",
    "radialGradient",
    "stop",
    "clipPath",
    "mask",
    "pattern",
];

const SVG_NS: &str = "http://www.w3.org/2000/svg";
const XLINK_NS: &str = "http://www.w3.org/1999/xlink";

/// The `<svg>…</svg>` element in an answer (text around it, such as a code fence, is
/// ignored), with the SVG namespace declared when the answer left it out.
pub fn extract(answer: &str, limits: &Limits) -> Result<String, String> {
    if answer.len() > limits.max_bytes {
        return Err(format!("the answer is {} bytes; at most {} are read", answer.len(), limits.max_bytes));
    }
    let start = answer.find("<svg").ok_or("no <svg> element in the answer")?;
    let end = answer.rfind("</svg>").filter(|&e| e > start).ok_or("the <svg> element is not closed with </svg>")?;
    let mut svg = answer[start..end + "</svg>".len()].to_string();
    let open_end = svg.find('>').unwrap_or(svg.len());
    let open = &svg[..open_end];
    // Models often leave the namespaces out; every browser renders such a file anyway.
    let mut declare = String::new();
    if !open.contains("xmlns=") {
        declare.push_str(&format!(" xmlns=\"{SVG_NS}\""));
    }
    if svg.contains("xlink:") && !open.contains("xmlns:xlink") {
        declare.push_str(&format!(" xmlns:xlink=\"{XLINK_NS}\""));
    }
    svg.insert_str("<svg".len(), &declare);
    Ok(svg)
}

/// Parses and checks an SVG document against `limits`; `side` is the canvas it will be drawn on.
pub fn parse(svg: &str, limits: &Limits, side: u32) -> Result<usvg::Tree, String> {
    if svg.len() > limits.max_bytes {
        return Err(format!("the SVG is {} bytes; at most {} are read", svg.len(), limits.max_bytes));
    }
    // roxmltree expands entities up to 255 references deep ten times over: a few lines
    // of DTD can stand for gigabytes of text.
    if svg.contains("<!ENTITY") {
        return Err("entity declarations (<!ENTITY>) are not allowed".into());
    }
    let nodes_limit = u32::try_from(limits.max_elements.saturating_mul(4).saturating_add(64)).unwrap_or(u32::MAX);
    let options = roxmltree::ParsingOptions { allow_dtd: true, nodes_limit, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(svg, options).map_err(|e| match e {
        roxmltree::Error::NodesLimitReached => {
            format!("the SVG has more than {nodes_limit} XML nodes (limit {} elements)", limits.max_elements)
        }
        e => format!("the SVG is not well-formed XML: {e}"),
    })?;
    check_source(&doc, limits)?;
    let options = usvg::Options {
        image_href_resolver: usvg::ImageHrefResolver {
            resolve_data: Box::new(|_, _, _| None),
            resolve_string: Box::new(|_, _| None),
        },
        ..usvg::Options::default()
    };
    let tree = usvg::Tree::from_xmltree(&doc, &options).map_err(|e| format!("the SVG cannot be drawn: {e}"))?;
    check_tree(&tree, limits, side)?;
    Ok(tree)
}

/// Element names, nesting and size before usvg sees the document: usvg copies what each
/// `<use>` refers to, so ten nested `<use>`s of ten copies each are 10^10 elements to it.
fn check_source(doc: &roxmltree::Document, limits: &Limits) -> Result<(), String> {
    let root = doc.root_element();
    if root.tag_name().name() != "svg" || root.tag_name().namespace() != Some(SVG_NS) {
        return Err(format!("the root element is <{}>, not <svg>", root.tag_name().name()));
    }
    for (name, extent) in [("width", root.attribute("width")), ("height", root.attribute("height"))] {
        if let Some(v) = extent.and_then(number_prefix) {
            check_extent(name, v, limits)?;
        }
    }
    if let Some(view_box) = root.attribute("viewBox") {
        for v in view_box.split([' ', ',']).filter(|s| !s.is_empty()).filter_map(number_prefix) {
            check_extent("viewBox", v, limits)?;
        }
    }
    let mut ids = HashMap::new();
    // Nesting is bounded below, as the expansion walks the tree.
    for n in doc.descendants().filter(|n| n.is_element()) {
        let name = n.tag_name();
        if name.namespace() == Some(SVG_NS) && !ELEMENTS.contains(&name.name()) {
            return Err(format!("<{}> is not supported; draw with {}", name.name(), ELEMENTS[9..16].join(", ")));
        }
        if let Some(id) = n.attribute("id") {
            ids.insert(id, n.id());
        }
        for a in n.attributes().filter(|a| !["id", "class", "href"].contains(&a.name()) && a.namespace().is_none()) {
            check_numbers(a.value(), a.name())?;
        }
        if name.name() == "style" {
            for text in n.children().filter_map(|c| c.text()) {
                check_numbers(text, "<style>")?;
            }
        }
    }
    let mut expansion = Expansion { doc, ids, done: HashMap::new(), limits };
    // `size` refuses a count or a depth past the limits as soon as it reaches one.
    expansion.size(root, 1)?;
    Ok(())
}

/// Largest magnitude of any number in an attribute or style sheet. usvg turns a circle of
/// radius 1e38 into millions of curve segments before any other limit can see it (found by
/// the fuzzer: the sandbox's memory cap stopped it).
const MAX_NUMBER: f64 = 1e6;

/// Every number in `value` (colours and `#id` references skipped) is finite and at most
/// [`MAX_NUMBER`] in magnitude.
fn check_numbers(value: &str, attribute: &str) -> Result<(), String> {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'#' {
            while i + 1 < bytes.len()
                && (bytes[i + 1].is_ascii_alphanumeric() || bytes[i + 1] == b'-' || bytes[i + 1] == b'_')
            {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() {
            // Inside a word ("stroke-width", "e" after digits is handled below).
        } else if c.is_ascii_digit() || c == b'.' {
            // One number: "1.5.5" is 1.5 then .5 in path data.
            let start = i;
            let mut dot = false;
            while i < bytes.len() && (bytes[i].is_ascii_digit() || (bytes[i] == b'.' && !dot)) {
                dot |= bytes[i] == b'.';
                i += 1;
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    while j < bytes.len() && bytes[j].is_ascii_digit() {
                        j += 1;
                    }
                    i = j;
                }
            }
            let token = &value[start..i];
            if let Ok(v) = token.parse::<f64>()
                && (v.is_nan() || v.abs() > MAX_NUMBER)
            {
                return Err(format!(
                    "{attribute} holds the number {token}; numbers are at most {MAX_NUMBER} in magnitude"
                ));
            }
            continue;
        }
        i += 1;
    }
    Ok(())
}

fn check_extent(name: &str, v: f64, limits: &Limits) -> Result<(), String> {
    if !v.is_finite() || v.abs() > f64::from(limits.max_size) {
        return Err(format!("{name} {v} is out of range (at most {} user units)", limits.max_size));
    }
    Ok(())
}

/// The number at the start of an attribute value ("48px" → 48).
fn number_prefix(s: &str) -> Option<f64> {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|&(i, c)| {
            !(c.is_ascii_digit() || c == '.' || ((c == '-' || c == '+') && (i == 0 || s[..i].ends_with(['e', 'E']))))
                && !((c == 'e' || c == 'E') && i > 0)
        })
        .map_or(s.len(), |(i, _)| i);
    s[..end].parse().ok()
}

/// Element counts and nesting with `<use>` references followed, memoised per element.
struct Expansion<'a, 'input> {
    doc: &'a roxmltree::Document<'input>,
    ids: HashMap<&'a str, roxmltree::NodeId>,
    /// `None` while an element is being counted: meeting it again is a reference cycle.
    done: HashMap<roxmltree::NodeId, Option<(usize, usize)>>,
    limits: &'a Limits,
}

impl Expansion<'_, '_> {
    /// (elements, nesting depth) of `node` and everything it draws; `level` is where the
    /// walk stands, so that a long chain of references fails before it is deep on the stack.
    fn size(&mut self, node: roxmltree::Node, level: usize) -> Result<(usize, usize), String> {
        self.bound(0, level)?;
        match self.done.get(&node.id()) {
            Some(Some(known)) => return Ok(*known),
            Some(None) => return Err(format!("<{}> refers to itself through <use>", node.tag_name().name())),
            None => {}
        }
        self.done.insert(node.id(), None);
        let (mut count, mut depth) = (1usize, 0usize);
        for child in node.children().filter(|c| c.is_element()) {
            let (c, d) = self.size(child, level + 1)?;
            count = count.saturating_add(c);
            depth = depth.max(d);
            self.bound(count, depth)?;
        }
        if node.tag_name().name() == "use" {
            let href = node.attribute((XLINK_NS, "href")).or_else(|| node.attribute("href"));
            if let Some(target) = href.and_then(|h| h.strip_prefix('#')).and_then(|id| self.ids.get(id).copied()) {
                let target = self.doc.get_node(target).expect("ids come from this document");
                let (c, d) = self.size(target, level + 1)?;
                count = count.saturating_add(c);
                depth = depth.max(d);
            }
        }
        let known = (count, depth + 1);
        self.bound(known.0, known.1)?;
        self.done.insert(node.id(), Some(known));
        Ok(known)
    }

    fn bound(&self, count: usize, depth: usize) -> Result<(), String> {
        if count > self.limits.max_elements {
            return Err(format!(
                "the SVG has more than {} elements with each <use> expanded",
                self.limits.max_elements
            ));
        }
        if depth > self.limits.max_depth {
            return Err(format!(
                "elements are nested more than {} deep with each <use> expanded",
                self.limits.max_depth
            ));
        }
        Ok(())
    }
}

/// How far beyond the canvas a shape may reach, in canvas widths.
const REACH: f32 = 8.0;

/// Work the parsed drawing asks of the renderer.
#[derive(Default)]
struct Work {
    segments: usize,
    layers: usize,
    dashes: f64,
    pattern_pixels: f32,
    painted_pixels: f32,
}

impl Work {
    /// Adds the part of `bounds` (canvas pixels) that lies on the canvas.
    fn paint(&mut self, bounds: Option<tiny_skia::Rect>, side: u32, limits: &Limits) -> Result<(), String> {
        let side = side as f32;
        if let Some(b) = bounds {
            let w = (b.right().min(side) - b.left().max(0.0)).max(0.0);
            let h = (b.bottom().min(side) - b.top().max(0.0)).max(0.0);
            self.painted_pixels += w * h;
        }
        if self.painted_pixels.is_nan() || self.painted_pixels > limits.max_painted_canvases * side * side {
            return Err(format!("the drawing paints more than {} canvases of pixels", limits.max_painted_canvases));
        }
        Ok(())
    }
}

fn check_tree(tree: &usvg::Tree, limits: &Limits, side: u32) -> Result<(), String> {
    let size = tree.size();
    check_extent("width", f64::from(size.width()), limits)?;
    check_extent("height", f64::from(size.height()), limits)?;
    let mut walker = Walker { canvas: fit(size, side), limits, side, work: Work::default() };
    walker.group(tree.root(), 0)
}

/// Adds up the work of every drawing in the tree: the document, and the clip paths, masks
/// and pattern tiles inside it.
struct Walker<'a> {
    canvas: tiny_skia::Transform,
    limits: &'a Limits,
    side: u32,
    work: Work,
}

impl Walker<'_> {
    fn group(&mut self, group: &usvg::Group, depth: usize) -> Result<(), String> {
        let limits = self.limits;
        // Paint servers, clip paths and masks are drawings inside the drawing; each counts
        // as a level so that chains of them stay as shallow as elements must.
        if depth > 2 * limits.max_depth {
            return Err(format!("patterns, masks and clip paths are nested more than {} deep", 2 * limits.max_depth));
        }
        if group.should_isolate() {
            self.work.paint(group.abs_layer_bounding_box().to_rect().transform(self.canvas), self.side, limits)?;
            self.work.layers += 1;
            if self.work.layers > limits.max_layers {
                return Err(format!(
                    "more than {} groups need a layer of their own (opacity, mask, clip path or blend mode)",
                    limits.max_layers
                ));
            }
        }
        let mut clip = group.clip_path();
        let mut level = depth;
        while let Some(c) = clip {
            level += 1;
            self.group(c.root(), level)?;
            clip = c.clip_path();
        }
        let mut mask = group.mask();
        let mut level = depth;
        while let Some(m) = mask {
            level += 1;
            self.group(m.root(), level)?;
            mask = m.mask();
        }
        for node in group.children() {
            match node {
                usvg::Node::Group(g) => self.group(g, depth + 1)?,
                usvg::Node::Path(p) => self.path(p, depth)?,
                // Neither is produced: <image> and <text> are refused before parsing.
                usvg::Node::Image(_) | usvg::Node::Text(_) => return Err("images and text are not supported".into()),
            }
        }
        Ok(())
    }

    fn path(&mut self, path: &usvg::Path, depth: usize) -> Result<(), String> {
        let (limits, side, canvas) = (self.limits, self.side, self.canvas);
        let data = path.data();
        // tiny-skia's rasteriser works in fixed point: coordinates far outside the canvas
        // overflow it (a panic, found by the fuzzer with a path moved by 1e20).
        let reach = REACH * side as f32;
        let bounds = if path.stroke().is_some() { path.abs_stroke_bounding_box() } else { path.abs_bounding_box() };
        let inside = bounds.transform(canvas).is_some_and(|b| {
            b.left() >= -reach
                && b.top() >= -reach
                && b.right() <= side as f32 + reach
                && b.bottom() <= side as f32 + reach
        });
        if !inside {
            return Err(format!("a shape reaches more than {REACH} canvas widths beyond the canvas"));
        }
        if path.fill().is_some() {
            self.work.paint(path.abs_bounding_box().transform(canvas), side, limits)?;
        }
        if path.stroke().is_some() {
            self.work.paint(path.abs_stroke_bounding_box().transform(canvas), side, limits)?;
        }
        self.work.segments += data.verbs().len();
        if self.work.segments > limits.max_path_segments {
            return Err(format!("the paths have more than {} segments", limits.max_path_segments));
        }
        if let Some(stroke) = path.stroke()
            && let Some(dashes) = stroke.dasharray()
        {
            let period: f32 = dashes.iter().sum();
            let length: f32 = data.points().windows(2).map(|w| w[0].distance(w[1])).sum();
            if period > 0.0 {
                self.work.dashes += f64::from(length / period) * dashes.len() as f64;
            }
            if self.work.dashes.is_nan() || self.work.dashes > limits.max_dashes {
                return Err(format!("dashed strokes would draw more than {} dashes", limits.max_dashes));
            }
        }
        let paints = path.fill().map(|f| f.paint()).into_iter().chain(path.stroke().map(|s| s.paint()));
        for paint in paints {
            if let usvg::Paint::Pattern(pattern) = paint {
                let (sx, sy) = canvas.pre_concat(path.abs_transform()).pre_concat(pattern.transform()).get_scale();
                let rect = pattern.rect();
                self.work.pattern_pixels += rect.width() * sx * rect.height() * sy;
                let budget = limits.max_pattern_canvases * (side * side) as f32;
                if self.work.pattern_pixels.is_nan() || self.work.pattern_pixels > budget {
                    return Err(format!(
                        "pattern tiles would cover more than {} canvases of pixels",
                        limits.max_pattern_canvases
                    ));
                }
                self.group(pattern.root(), depth + 1)?;
            }
        }
        Ok(())
    }
}

/// Scales a document of `size` to fit a `side`-pixel square, centred (as `preserveAspectRatio`
/// does by default).
pub fn fit(size: usvg::Size, side: u32) -> tiny_skia::Transform {
    let side = side as f32;
    let scale = (side / size.width()).min(side / size.height());
    let (dx, dy) = ((side - size.width() * scale) / 2.0, (side - size.height() * scale) / 2.0);
    tiny_skia::Transform::from_row(scale, 0.0, 0.0, scale, dx, dy)
}

/// Draws `tree` on a white `side`-pixel square; RGB8, row-major.
pub fn render(tree: &usvg::Tree, side: u32) -> Vec<u8> {
    let mut pixmap = tiny_skia::Pixmap::new(side, side).expect("the canvas side is validated to be positive");
    pixmap.fill(tiny_skia::Color::WHITE);
    resvg::render(tree, fit(tree.size(), side), &mut pixmap.as_mut());
    // Premultiplied RGBA over an opaque background: alpha is 255 and RGB is the colour.
    pixmap.data().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect()
}
