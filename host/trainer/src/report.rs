//! `report.html` in the run folder: curves from `metrics.jsonl` (inline SVG) and sample
//! evaluation trajectories with their images (inline PNG), one file that opens offline.

use anyhow::{Context, Result};
use base64::Engine;
use plotters::prelude::*;
use std::fmt::Write as _;
use std::path::Path;
use vagen_rollout::Trajectory;

/// Curves drawn, by metric name, with the label shown.
const CURVES: [(&str, &str); 7] = [
    ("train/reward", "reward (train)"),
    ("train/success", "success (train)"),
    ("val/success", "success (held out)"),
    ("actor/entropy", "entropy"),
    ("actor/grad_norm", "grad norm"),
    ("rollout/response_length", "response length (tokens)"),
    ("actor/pg_loss", "policy loss"),
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
    for (key, label) in CURVES {
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| Some((r.get("step")?.as_f64()?, r.get(key)?.as_f64()?)))
            .filter(|(_, y)| y.is_finite())
            .collect();
        if !points.is_empty() {
            html.push_str(&plot(label, &points)?);
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

fn plot(label: &str, points: &[(f64, f64)]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (360, 240)).into_drawing_area();
        root.fill(&WHITE)?;
        let (x0, x1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (y0, y1) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        let pad = ((y1 - y0) * 0.05).max(1e-6);
        let mut chart = ChartBuilder::on(&root)
            .caption(label, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(48)
            .build_cartesian_2d(x0..x1.max(x0 + 1.0), (y0 - pad)..(y1 + pad))?;
        chart.configure_mesh().x_desc("step").light_line_style(WHITE).draw()?;
        chart.draw_series(LineSeries::new(points.iter().copied(), &BLUE))?;
        chart.draw_series(points.iter().map(|&p| Circle::new(p, 2, BLUE.filled())))?;
        root.present()?;
    }
    Ok(svg)
}

fn png_data_uri(img: &vagen_runtime::Image) -> Option<String> {
    Some(format!("data:image/png;base64,{}", base64::engine::general_purpose::STANDARD.encode(png(img)?)))
}

/// `img` as PNG bytes; `None` when its size and pixels disagree.
pub(crate) fn png(img: &vagen_runtime::Image) -> Option<Vec<u8>> {
    let buf = image::RgbImage::from_raw(img.width, img.height, img.rgb.clone())?;
    let mut bytes = Vec::new();
    buf.write_to(&mut std::io::Cursor::new(&mut bytes), image::ImageFormat::Png).ok()?;
    Some(bytes)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}
