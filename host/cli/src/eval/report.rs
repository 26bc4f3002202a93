//! `report.html`: an evaluation's table and a few episodes to read (a won one and a lost one
//! first), their pictures shown from `images/`.

use super::records::{EpisodeRecord, Finish};
use super::summary::{Summary, finish_name};
use std::fmt::Write;

/// Episodes shown in full.
const SHOWN: usize = 6;

pub fn html(s: &Summary, records: &[EpisodeRecord]) -> String {
    let set = &s.settings;
    let mut h = String::from("<!doctype html><meta charset=utf-8><title>vagen eval</title>");
    h += "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px;text-align:left}\
          pre{white-space:pre-wrap;background:#f4f4f4;padding:4px}</style>";
    let _ = write!(
        h,
        "<h1>{} on {} {}</h1><p>{} seeds from {}, {} sample(s) each, temperature {}; env sha256 {}</p>",
        escape(&set.model.name),
        escape(&set.env.name),
        escape(&set.env.version),
        set.seeds,
        set.seed_start,
        set.samples,
        set.temperature,
        escape(&set.env.sha256)
    );
    h += "<table><tr><th>figure</th><th>value</th><th>95% interval</th></tr>";
    if let Some(e) = &s.success {
        let _ = write!(
            h,
            "<tr><td>success (avg@{})</td><td>{:.3}</td><td>{:.3} – {:.3} (Wilson)</td></tr>",
            set.samples, e.value, e.low, e.high
        );
    }
    for (k, e) in &s.pass_at_k {
        let _ =
            write!(h, "<tr><td>{k}</td><td>{:.3}</td><td>{:.3} – {:.3} (bootstrap)</td></tr>", e.value, e.low, e.high);
    }
    for (name, v) in
        [("mean reward", s.mean_reward), ("mean turns", s.mean_turns), ("format valid", s.format_valid_rate)]
    {
        let _ = write!(h, "<tr><td>{name}</td><td>{}</td><td></td></tr>", v.map_or("-".into(), |v| format!("{v:.3}")));
    }
    let ends: Vec<String> = s.finish.iter().map(|(f, n)| format!("{n} {}", finish_name(*f))).collect();
    let _ = write!(h, "<tr><td>ended</td><td colspan=2>{}</td></tr></table>", ends.join(", "));
    for r in shown(records) {
        episode(&mut h, r);
    }
    h
}

/// The first won and the first not won, then the rest in order, [`SHOWN`] in all.
fn shown(records: &[EpisodeRecord]) -> Vec<&EpisodeRecord> {
    let won = records.iter().find(|r| r.success);
    let lost = records.iter().find(|r| !r.success && r.finish != Finish::Lost);
    let mut out: Vec<&EpisodeRecord> = won.into_iter().chain(lost).collect();
    for r in records {
        if out.len() >= SHOWN {
            break;
        }
        if !out.iter().any(|o| std::ptr::eq(*o, r)) {
            out.push(r);
        }
    }
    out
}

fn episode(h: &mut String, r: &EpisodeRecord) {
    let _ = write!(
        h,
        "<h2>seed {} sample {}: {} (reward {:.2}, {} turns)</h2><details><summary>system</summary><pre>{}</pre></details>",
        r.seed,
        r.sample,
        finish_name(r.finish),
        r.reward,
        r.turns,
        escape(&r.system)
    );
    for (k, t) in r.steps.iter().enumerate() {
        let _ = write!(h, "<h3>turn {k}</h3><pre>{}</pre>", escape(&t.prompt));
        for image in &t.images {
            let _ = write!(h, "<img src=\"{}\" width=160>", escape(image));
        }
        let _ = write!(
            h,
            "<pre>{}</pre><p>reward {:.2}{}</p>",
            escape(&t.answer),
            t.reward,
            if t.format_valid { "" } else { ", format invalid" }
        );
    }
    if let Some(e) = &r.error {
        let _ = write!(h, "<p>error: {}</p>", escape(e));
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}
