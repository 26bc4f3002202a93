//! `report.html` in the run folder: curves from `metrics.jsonl` (inline SVG) and sample
//! evaluation trajectories with their images (inline PNG), one file that opens offline.

use anyhow::{Context, Result};
use base64::Engine;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;
use vagen_rollout::Trajectory;

/// A curve: the metric on the y axis, the one counting steps on the x axis, the caption.
struct Curve {
    y: &'static str,
    x: &'static str,
    label: &'static str,
}

const fn rl(y: &'static str, label: &'static str) -> Curve {
    Curve { y, x: "step", label }
}

/// Curves drawn, in order: SFT's loss over its own steps, then RL's over RL steps.
const CURVES: [Curve; 10] = [
    Curve { y: "sft/loss", x: "sft/step", label: "SFT loss" },
    rl("train/reward", "reward (train)"),
    rl("train/success", "success (train)"),
    rl("val/success", "success (held out)"),
    rl("train/format_correct_rate", "format correct (train)"),
    rl("val/format_correct_rate", "format correct (held out)"),
    rl("actor/entropy", "entropy"),
    rl("actor/grad_norm", "grad norm"),
    rl("rollout/response_length", "response length (tokens)"),
    rl("actor/pg_loss", "policy loss"),
];

/// Trajectories shown per evaluation.
const SAMPLES: usize = 4;

/// Keeps the first few evaluation trajectories (text and images) for the report.
pub fn save_samples(run_dir: &Path, step: usize, trajs: &[Trajectory]) -> Result<()> {
    let dir = run_dir.join("samples");
    std::fs::create_dir_all(&dir)?;
    let mut html = String::new();
    for t in trajs.iter().take(SAMPLES) {
        let _ = write!(
            html,
            "<details><summary>seed {} — {} in {} turns, reward {:.2}</summary>",
            t.seed,
            if t.success { "success" } else { "failure" },
            t.turns.len(),
            t.total_reward()
        );
        for (k, turn) in t.turns.iter().enumerate() {
            let _ = write!(html, "<div class=turn><b>turn {k}</b><pre>{}</pre>", escape(&turn.user));
            for img in &turn.images {
                if let Some(uri) = png_data_uri(img) {
                    let _ = write!(html, "<img src=\"{uri}\" width=128>");
                }
            }
            let _ = write!(
                html,
                "<pre class=response>{}</pre><small>reward {:.2} (env {:.2}, format {:.2}), valid {} effective {}</small></div>",
                escape(&turn.response),
                turn.reward,
                turn.env_reward,
                turn.format_reward,
                turn.valid_actions,
                turn.effective_actions
            );
        }
        html.push_str("</details>");
    }
    std::fs::write(dir.join(format!("step-{step:06}.html")), html)?;
    Ok(())
}

/// The reward functions' last step: the judge's exchanges and a few scored turns
/// (`samples/rewards.html`, replaced every step).
pub(crate) fn save_rewards(run_dir: &Path, step: usize, scored: &crate::rewards::Scored) -> Result<()> {
    if scored.judged.is_empty() && scored.examples.is_empty() {
        return Ok(());
    }
    let mut html = format!("<p>RL step {step}</p>");
    for (name, response, paid) in &scored.examples {
        let paid = match paid {
            Ok(r) => format!("paid {r:.3}"),
            Err(e) => format!("unscored: {}", escape(e)),
        };
        let _ = write!(
            html,
            "<div class=turn><b>{}</b> {paid}<pre class=response>{}</pre></div>",
            escape(name),
            escape(response)
        );
    }
    for (prompt, answer) in &scored.judged {
        let answer = match answer {
            Ok(a) => escape(a),
            Err(e) => format!("<i>failed: {}</i>", escape(e)),
        };
        let _ = write!(
            html,
            "<div class=turn><b>judge</b><pre>{}</pre><pre class=response>{answer}</pre></div>",
            escape(prompt)
        );
    }
    let dir = run_dir.join("samples");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("rewards.html"), html)?;
    Ok(())
}

pub fn write(run_dir: &Path) -> Result<()> {
    let rows = crate::metrics::read(run_dir)?;
    let mut html = String::from(
        "<!doctype html><meta charset=utf-8><title>vagen run</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}\
         .plots{display:flex;flex-wrap:wrap}pre{white-space:pre-wrap;background:#f4f4f4;padding:4px}.response{background:#eef}\
         .turn{margin:6px 0 12px 12px}</style>",
    );
    let _ = write!(html, "<h1>Run {}</h1>", escape(&run_dir.display().to_string()));
    if let Ok(config) = std::fs::read_to_string(run_dir.join("config.toml")) {
        let _ = write!(html, "<details><summary>config.toml</summary><pre>{}</pre></details>", escape(&config));
    }
    html.push_str("<div class=plots>");
    for curve in &CURVES {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.get(curve.x)?.as_f64()?, r.get(curve.y)?.as_f64()?)))
            .filter(|(_, y)| y.is_finite())
            .collect();
        if !points.is_empty() {
            let x_desc = if curve.x == "step" { "RL step" } else { "SFT step" };
            html.push_str(&plot(curve.label, x_desc, &points)?);
        }
    }
    html.push_str("</div><h2>Held-out trajectories</h2>");
    let mut samples: Vec<_> = std::fs::read_dir(run_dir.join("samples"))
        .map(|d| d.flatten().filter(|e| e.file_name().to_string_lossy().starts_with("step-")).collect())
        .unwrap_or_default();
    samples.sort_by_key(|e: &std::fs::DirEntry| e.file_name());
    // The first and the last evaluation (one, when there was only one).
    let last = samples.last().filter(|_| samples.len() > 1);
    for s in samples.first().into_iter().chain(last) {
        let name = s.file_name().to_string_lossy().trim_end_matches(".html").to_string();
        let body = std::fs::read_to_string(s.path())?;
        let _ = write!(html, "<h3>{name}</h3>{body}");
    }
    if let Ok(body) = std::fs::read_to_string(run_dir.join("samples/rewards.html")) {
        let _ = write!(html, "<h2>Reward functions and the judge (the last step)</h2>{body}");
    }
    let path = run_dir.join("report.html");
    std::fs::write(&path, html).with_context(|| format!("writing {}", path.display()))
}

/// One curve as inline SVG. Steps are whole numbers: the x axis ticks only at whole steps
/// (at most 6 of them). A flat series gets a range around its value, and the y labels keep
/// the digits that tell ticks apart, with no "-0".
fn plot(label: &str, x_desc: &str, points: &[(f64, f64)]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (360, 250)).into_drawing_area();
        root.fill(&WHITE)?;
        let (x0, x1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (x0, x1) = (x0.floor(), x1.ceil().max(x0.floor() + 1.0));
        let (y0, y1) = y_range(points);
        let decimals = decimals(y1 - y0);
        let steps = (x1 - x0) as usize;
        let x_labels = (steps + 1).min(6);
        let mut chart = ChartBuilder::on(&root)
            .caption(label, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(40)
            .y_label_area_size(52)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .x_labels(x_labels)
            .x_label_formatter(&|x| format!("{}", x.round() as i64))
            .y_labels(5)
            .y_label_formatter(&|y| number(*y, decimals))
            .light_line_style(WHITE)
            .draw()?;
        chart.draw_series(LineSeries::new(points.iter().copied(), &BLUE))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, BLUE.filled())))?;
        root.present()?;
    }
    Ok(svg)
}

/// The y axis: the data's range with 5 % on each side, or, for a flat series, its value
/// ± 5 % of its size (± 0.5 at zero).
fn y_range(points: &[(f64, f64)]) -> (f64, f64) {
    let (y0, y1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
    let pad = if y1 > y0 {
        (y1 - y0) * 0.05
    } else if y0 != 0.0 {
        y0.abs() * 0.05
    } else {
        0.5
    };
    (y0 - pad, y1 + pad)
}

/// Decimals that tell apart ticks a fifth of `span` apart.
fn decimals(span: f64) -> usize {
    let tick = span / 5.0;
    if tick <= 0.0 || !tick.is_finite() { 1 } else { (-tick.log10().floor()).clamp(0.0, 6.0) as usize }
}

/// `y` to `decimals` places; a value that rounds to zero is "0", never "-0".
fn number(y: f64, decimals: usize) -> String {
    let text = format!("{y:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

fn png_data_uri(img: &vagen_runtime::Image) -> Option<String> {
    Some(format!(
        "data:image/png;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(crate::metrics::png(img)?)
    ))
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `<text>` of `svg`: the band it covers vertically (top, bottom; glyphs from 0.76
    /// of the font size above the baseline to 0.24 below, the baseline at `y` + `dy`), its
    /// anchor and its words.
    fn texts(svg: &str) -> Vec<((f64, f64), String, String)> {
        let attr = |tag: &str, name: &str| -> Option<String> {
            let at = tag.find(&format!(" {name}=\""))? + name.len() + 3;
            Some(tag[at..at + tag[at..].find('"')?].to_string())
        };
        svg.split("<text")
            .skip(1)
            .map(|t| {
                let (tag, rest) = t.split_once('>').unwrap();
                let words = rest.split("</text>").next().unwrap().trim().to_string();
                let num = |name: &str| attr(tag, name).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN);
                let (y, size) = (num("y"), num("font-size"));
                let dy = attr(tag, "dy").unwrap_or_default();
                let shift = match (dy.strip_suffix("em"), dy.strip_suffix("ex")) {
                    (Some(em), _) => em.parse::<f64>().unwrap() * size,
                    (_, Some(ex)) => ex.parse::<f64>().unwrap() * size / 2.0,
                    _ => 0.0,
                };
                let baseline = y + shift;
                ((baseline - 0.76 * size, baseline + 0.24 * size), attr(tag, "text-anchor").unwrap_or_default(), words)
            })
            .collect()
    }

    #[test]
    fn the_report_plots_sft_loss_and_format_rate_on_whole_steps_with_readable_axes() {
        let dir = tempfile::tempdir().unwrap();
        let mut lines = Vec::new();
        for k in 1..=5 {
            lines.push(serde_json::json!({"step": 0, "sft/step": k, "sft/loss": 3.0 / k as f64}));
        }
        lines.push(serde_json::json!({"step": 0, "val/success": 0.0, "val/format_correct_rate": 1.0}));
        for s in 1..=3 {
            lines.push(serde_json::json!({"step": s, "train/success": 0.0, "train/format_correct_rate": 1.0,
                "train/reward": -0.25 * s as f64}));
        }
        let text: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        std::fs::write(dir.path().join("metrics.jsonl"), text.join("\n") + "\n").unwrap();
        write(dir.path()).unwrap();
        let html = std::fs::read_to_string(dir.path().join("report.html")).unwrap();
        let svgs: Vec<&str> = html.split("<svg").skip(1).map(|s| s.split("</svg>").next().unwrap()).collect();
        let captions: Vec<String> = svgs.iter().map(|s| texts(s)[0].2.clone()).collect();
        for want in
            ["SFT loss", "success (train)", "format correct (train)", "format correct (held out)", "reward (train)"]
        {
            assert!(captions.iter().any(|c| c == want), "no {want:?} plot in {captions:?}");
        }
        for (svg, caption) in svgs.iter().zip(&captions) {
            let t = texts(svg);
            let desc = t.iter().find(|(_, _, w)| w.ends_with("step")).unwrap_or_else(|| panic!("{caption}: {t:?}"));
            let y_ticks: Vec<&String> = t.iter().filter(|(_, a, _)| a == "end").map(|(_, _, w)| w).collect();
            let x_ticks: Vec<&((f64, f64), String, String)> =
                t.iter().filter(|(_, a, w)| a == "middle" && w != caption && !w.ends_with("step")).collect();
            assert!(x_ticks.len() >= 2, "{caption}: {t:?}");
            for ((_, bottom), _, w) in &x_ticks {
                assert!(w.parse::<i64>().is_ok(), "{caption}: a step tick reads {w:?}");
                let top = desc.0.0;
                assert!(top >= *bottom, "{caption}: the step label (from y {top:.1}) overlaps a tick (to {bottom:.1})");
            }
            let distinct: std::collections::BTreeSet<&&String> = y_ticks.iter().collect();
            assert_eq!(distinct.len(), y_ticks.len(), "{caption}: repeated y labels {y_ticks:?}");
            assert!(
                y_ticks.len() >= 2 && y_ticks.iter().all(|w| !w.starts_with("-0") || w.parse::<f64>().unwrap() != 0.0),
                "{caption}: {y_ticks:?}"
            );
        }
    }
}
