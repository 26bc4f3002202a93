use super::*;
use std::collections::HashSet;

fn env(json: &str) -> SvgEnv {
    SvgEnv::new(vagen_sdk::resolve_config::<SvgEnv>(json).unwrap()).unwrap()
}

/// The icon's source with every coordinate-bearing element moved by (dx, dy) user units.
fn shifted(svg: &str, dx: f32, dy: f32) -> String {
    let open = svg.find('>').unwrap() + 1;
    let close = svg.rfind("</svg>").unwrap();
    format!("{}<g transform=\"translate({dx} {dy})\">{}</g></svg>", &svg[..open], &svg[open..close])
}

#[test]
fn the_oracle_scores_one_on_200_seeds() {
    let mut e = env("{}");
    for seed in 0..200 {
        e.reset(seed);
        let step = e.step(&e.oracle().unwrap());
        assert_eq!(step.reward, 1.0, "seed {seed} ({}): {:?}", e.target_name(), step.metrics);
        assert!(step.success && step.done);
    }
}

#[test]
fn blank_scores_low_and_a_shifted_copy_in_between() {
    let mut e = env("{}");
    let (mut blank, mut moved) = (Vec::new(), Vec::new());
    for seed in 0..20 {
        e.reset(seed);
        let b = e.step("<svg viewBox=\"0 0 48 48\"></svg>");
        assert_eq!(b.valid_actions, 1);
        blank.push(b.reward);
        e.reset(seed);
        let s = e.step(&shifted(&e.oracle().unwrap(), 1.5, 1.0));
        moved.push(s.reward);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(blank.iter().all(|&r| r < 0.35), "blank: {blank:?}");
    assert!(moved.iter().all(|&r| r > 0.4 && r < 0.95), "shifted: {moved:?}");
    assert!(mean(&moved) > mean(&blank) + 0.2, "blank {} shifted {}", mean(&blank), mean(&moved));
}

#[test]
fn a_seed_gives_the_same_target_byte_for_byte() {
    let (mut a, mut b) = (env("{}"), env("{}"));
    let mut names = HashSet::new();
    for seed in [0, 1, 7, u64::MAX] {
        assert_eq!(a.reset(seed), b.reset(seed));
        assert_eq!(a.target_image(), b.target_image());
        names.insert(a.target_name());
    }
    assert!(names.len() > 1, "different seeds should draw different icons");
}

#[test]
fn the_split_partitions_the_icons() {
    let pool = |split: &str| env(&format!(r#"{{"split": "{split}"}}"#)).pool;
    let (train, test, all) = (pool("train"), pool("test"), pool("all"));
    assert_eq!(all.len(), icons::all().len());
    assert!(icons::all().len() >= 300, "{} icons embedded", icons::all().len());
    assert_eq!(train.len() + test.len(), all.len());
    assert!(train.iter().all(|i| !test.contains(i)));
    let share = test.len() as f64 / all.len() as f64;
    assert!((0.12..0.28).contains(&share), "held out {share}");
    let other = env(r#"{"split": "test", "split_seed": 1}"#).pool;
    assert_ne!(other, test, "the split seed decides the split");
}

fn refused(answer: &str) -> String {
    let mut e = env("{}");
    e.reset(0);
    let step = e.step(answer);
    assert_eq!(step.valid_actions, 0, "accepted: {}", &answer[..answer.len().min(200)]);
    assert!(!step.done);
    assert_eq!(step.observation.images.len(), 1, "an invalid answer still shows a (blank) canvas");
    step.observation.text
}

#[test]
fn hostile_answers_are_refused_by_name() {
    let why = refused("<svg viewBox=\"0 0 1e9 1e9\"><rect width=\"1e9\" height=\"1e9\"/></svg>");
    assert!(why.contains("viewBox 1000000000 is out of range"), "{why}");
    let nested = format!("<svg>{}{}</svg>", "<g>".repeat(100_000), "</g>".repeat(100_000));
    let why = refused(&nested);
    assert!(why.contains("at most 32768 are read"), "{why}");
    let mut e = env(r#"{"max_answer_bytes": 1000000}"#);
    e.reset(0);
    let why = e.step(&nested).observation.text;
    assert!(why.contains("XML nodes") || why.contains("nested more than 32"), "{why}");
    let huge = format!("<svg>{}</svg>", "<rect width=\"1\" height=\"1\"/>".repeat(400_000));
    assert!(huge.len() > 10 << 20);
    assert!(refused(&huge).contains("at most 32768 are read"));
    for malformed in ["<svg><rect></svg>", "<svg", "<svg></svg", "<svg><path d=\"M0 0 L1 1\"></svg>"] {
        let why = refused(malformed);
        assert!(why.contains("not well-formed") || why.contains("not closed"), "{malformed}: {why}");
    }
    assert!(refused("no svg here").contains("no <svg> element"));
}

#[test]
fn work_bombs_are_refused_before_drawing() {
    // Ten levels of ten <use>s: 10^10 elements once expanded.
    let mut bomb = String::from(
        "<svg xmlns:xlink=\"http://www.w3.org/1999/xlink\"><defs><rect id=\"l0\" width=\"1\" height=\"1\"/>",
    );
    for level in 1..10 {
        bomb.push_str(&format!("<g id=\"l{level}\">"));
        for _ in 0..10 {
            bomb.push_str(&format!("<use xlink:href=\"#l{}\"/>", level - 1));
        }
        bomb.push_str("</g>");
    }
    bomb.push_str("</defs><use xlink:href=\"#l9\"/></svg>");
    assert!(refused(&bomb).contains("elements with each <use> expanded"), "{}", refused(&bomb));
    let cycle = "<svg><g id=\"a\"><use href=\"#a\"/></g></svg>";
    assert!(refused(cycle).contains("refers to itself"), "{}", refused(cycle));
    let entities = "<!DOCTYPE svg [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;\">]><svg>&b;</svg>";
    // An answer's DTD lies before <svg>, where nothing is read: its entities are unknown.
    assert!(refused(entities).contains("unknown entity"), "{}", refused(entities));
    let direct = document::parse(&entities[entities.find('<').unwrap()..], &Limits::default(), 64).err().unwrap();
    assert!(direct.contains("entity declarations"), "{direct}");
    let dashes = "<svg viewBox=\"0 0 100 100\"><path d=\"M0 0 L100 0 L0 0 L100 0 L0 0\" stroke=\"red\" stroke-dasharray=\"0.01\"/></svg>";
    assert!(refused(dashes).contains("dashes"), "{}", refused(dashes));
    let pattern = "<svg viewBox=\"0 0 1 1\"><defs><pattern id=\"p\" width=\"5000\" height=\"5000\" patternUnits=\"userSpaceOnUse\"><rect width=\"1\" height=\"1\"/></pattern></defs><rect width=\"1\" height=\"1\" fill=\"url(#p)\"/></svg>";
    assert!(refused(pattern).contains("pattern tiles"), "{}", refused(pattern));
    let paint = format!("<svg viewBox=\"0 0 9 9\">{}</svg>", "<rect width=\"9\" height=\"9\"/>".repeat(101));
    assert!(refused(&paint).contains("paints more than 100 canvases"), "{}", refused(&paint));
    let layers: String = (0..100).map(|_| "<g opacity=\"0.5\"><rect width=\"1\" height=\"1\"/></g>").collect();
    let why = refused(&format!("<svg viewBox=\"0 0 9 9\">{layers}</svg>"));
    assert!(why.contains("layer of their own"), "{why}");
    let filter = "<svg><filter id=\"f\"><feGaussianBlur stdDeviation=\"5\"/></filter><rect width=\"9\" height=\"9\" filter=\"url(#f)\"/></svg>";
    assert!(refused(filter).contains("<filter> is not supported"));
    // Within the byte limit only copies reach the segment limit.
    let uses = "<use href=\"#p\"/>".repeat(10);
    let segments =
        format!("<svg viewBox=\"0 0 9 9\"><path id=\"p\" d=\"M0 0{}\"/>{uses}</svg>", " L1 1 L2 2".repeat(1500));
    assert!(refused(&segments).contains("segments"), "{}", refused(&segments));
}

#[test]
fn answers_without_namespaces_or_with_prose_around_them_draw() {
    let mut e = env("{}");
    e.reset(3);
    let svg = e.oracle().unwrap().replace(" xmlns=\"http://www.w3.org/2000/svg\"", "");
    let step = e.step(&format!("Here it is:\n```svg\n{svg}\n```"));
    assert_eq!(step.reward, 1.0, "{}", step.observation.text);
}

#[test]
fn the_state_names_shapes_and_colours() {
    let mut e = env("{}");
    for seed in 0..20 {
        e.reset(seed);
        let d = e.describe_state();
        assert!(d.starts_with("The icon has "), "{d}");
        assert!(d.contains(" (#"), "no colour in {d}");
        assert!(["shape", "circle", "ellipse", "rect"].iter().any(|k| d.contains(k)), "{d}");
    }
    assert_eq!(describe::colour_name(0x21, 0x96, 0xf3), "blue");
    assert_eq!(describe::colour_name(255, 255, 255), "white");
    assert_eq!(describe::colour_name(0xf4, 0x43, 0x36), "red");
    assert_eq!(describe::colour_name(0x4c, 0xaf, 0x50), "green");
    let text = env(r#"{"preset": "text"}"#).reset(0);
    assert!(text.images.is_empty() && text.text.contains("The icon has"), "{}", text.text);
}

#[test]
fn bad_configs_are_named() {
    for (json, key) in [
        (r#"{"image_size": 8}"#, "image_size"),
        (r#"{"test_fraction": 1.0}"#, "test_fraction"),
        (r#"{"edge_weight": 0, "ssim_weight": 0, "colour_weight": 0}"#, "at least one"),
        (r#"{"max_elements": 0}"#, "max_elements"),
        (r#"{"max_answer_bytes": 100000000}"#, "max_answer_bytes"),
    ] {
        let e = SvgEnv::new(vagen_sdk::resolve_config::<SvgEnv>(json).unwrap()).err().expect(json);
        assert!(e.to_string().contains(key), "{json}: {e}");
    }
}

/// The scores against OpenCV's Canny, scikit-image's SSIM and NumPy's histograms
/// (`reference/metrics.py`), on pairs of a target and a rendering of another answer.
#[test]
fn metrics_match_the_python_reference() {
    let python = std::env::var("VAGEN_PYTHON")
        .expect("VAGEN_PYTHON is not set: run the tests with `cargo xtask test`, or point it at a Python with opencv and scikit-image");
    let dir = std::env::temp_dir().join(format!("vagen-svg-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut e = env("{}");
    let side = 256usize;
    let mut pairs = Vec::new();
    let mut ours = Vec::new();
    for seed in 0..12u64 {
        e.reset(seed);
        let oracle = e.oracle().unwrap();
        let answer = match seed % 4 {
            0 => shifted(&oracle, 2.0, 0.5),
            1 => oracle.replace("fill=\"#", "fill=\"#8"),
            2 => shifted(&oracle, -0.7, 3.0).replace("<circle", "<ellipse rx=\"3\" ry=\"6\""),
            _ => "<svg viewBox=\"0 0 48 48\"><circle cx=\"24\" cy=\"24\" r=\"15\" fill=\"#2196F3\"/></svg>".into(),
        };
        let tree = document::parse(&document::extract(&answer, &e.limits).unwrap(), &e.limits, 256).unwrap();
        let render = document::render(&tree, 256);
        let (a, b) = (dir.join(format!("{seed}-target.rgb")), dir.join(format!("{seed}-render.rgb")));
        std::fs::write(&a, &e.target_rgb).unwrap();
        std::fs::write(&b, &render).unwrap();
        pairs.push(format!("[{:?}, {:?}]", a.display().to_string(), b.display().to_string()));
        let edges_a = metrics::canny(&metrics::luma(&e.target_rgb), side, side, 100, 200);
        ours.push((e.score(&render), edges_a));
    }
    let list = dir.join("pairs.json");
    std::fs::write(&list, format!("{{\"side\": {side}, \"pairs\": [{}]}}", pairs.join(", "))).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/reference/metrics.py");
    let out = std::process::Command::new(&python).arg(script).arg(&list).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<f64>> =
        text.lines().map(|l| l.split_whitespace().map(|v| v.parse().unwrap()).collect()).collect();
    assert_eq!(rows.len(), ours.len(), "{text}");
    for (i, ((s, edges), row)) in ours.iter().zip(&rows).enumerate() {
        let [edge_iou, ssim, colour, target_edges, ..] = row[..] else { panic!("{text}") };
        let ours_edges = edges.iter().filter(|&&e| e).count() as f64;
        // Our Canny is OpenCV's edge for edge: the same pixel count for the target, and
        // the same IoU with the rendering to the 12 places the reference prints.
        assert_eq!(ours_edges, target_edges, "pair {i}: the target's edge pixels, ours and OpenCV's");
        assert!((s.edges - edge_iou).abs() < 1e-11, "pair {i}: edge IoU {} vs OpenCV {edge_iou}", s.edges);
        assert!((s.ssim - ssim).abs() < 1e-9, "pair {i}: SSIM {} vs scikit-image {ssim}", s.ssim);
        assert!((s.colour - colour).abs() < 1e-9, "pair {i}: colour {} vs NumPy {colour}", s.colour);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
