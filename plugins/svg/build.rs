//! Fetches the icon set from the npm registry (once; kept in `target/downloads`), checks it
//! against the digest the registry published, and writes the icons that pass the plugin's
//! own parser, limits and scorer to `$OUT_DIR/icons.tsv`, which the plugin embeds.
//!
//! Offline: set `VAGEN_SVG_ICONS` to a copy of the package's `.tgz` (same digest).

#[allow(dead_code)]
#[path = "src/document.rs"]
mod document;
#[allow(dead_code)]
#[path = "src/metrics.rs"]
mod metrics;

use std::io::Read;
use std::path::{Path, PathBuf};

/// Icons8's Flat Color Icons (MIT), in Iconify's JSON packaging. Keep in step with README.md.
const PACKAGE: &str = "@iconify-json/flat-color-icons";
const VERSION: &str = "1.2.3";
const TARBALL: &str = "https://registry.npmjs.org/@iconify-json/flat-color-icons/-/flat-color-icons-1.2.3.tgz";
/// `dist.integrity` of that version on registry.npmjs.org.
const INTEGRITY: &str =
    "sha512-KcmJ7CY0TKFv5GuBjiS4/v++jEcNXna1jfY+yq014tnw/MN/jMI2oYpoMHGuIpYtUqDu7eove+WySnOYO8nS3w==";
/// The side targets are drawn at by default; an icon must have edges there to be scoreable.
const SIDE: u32 = 256;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/document.rs");
    println!("cargo:rerun-if-changed=src/metrics.rs");
    println!("cargo:rerun-if-env-changed=VAGEN_SVG_ICONS");
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let tgz = tarball()?;
    let bytes = std::fs::read(&tgz).map_err(|e| format!("reading {}: {e}", tgz.display()))?;
    check_digest(&bytes, &tgz)?;
    let json = icons_json(&bytes)?;
    let set: serde_json::Value = serde_json::from_str(&json).map_err(|e| format!("{PACKAGE} icons.json: {e}"))?;
    let (width, height) = (set["width"].as_f64().unwrap_or(16.0), set["height"].as_f64().unwrap_or(16.0));
    let icons = set["icons"].as_object().ok_or(format!("{PACKAGE} icons.json has no \"icons\" object"))?;
    let limits = document::Limits::default();
    let mut kept = String::new();
    let mut dropped = Vec::new();
    for (name, icon) in icons {
        let body = icon["body"].as_str().unwrap_or_default();
        let (w, h) = (icon["width"].as_f64().unwrap_or(width), icon["height"].as_f64().unwrap_or(height));
        let (left, top) = (icon["left"].as_f64().unwrap_or(0.0), icon["top"].as_f64().unwrap_or(0.0));
        let svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" xmlns:xlink=\"http://www.w3.org/1999/xlink\" viewBox=\"{left} {top} {w} {h}\">{}</svg>",
            body.replace(['\n', '\t', '\r'], " ")
        );
        match usable(&svg, &limits) {
            Ok(()) => kept.push_str(&format!("{name}\t{svg}\n")),
            Err(why) => dropped.push(format!("{name}: {why}")),
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("icons.tsv"), kept).map_err(|e| format!("writing icons.tsv: {e}"))?;
    std::fs::write(out.join("dropped.txt"), dropped.join("\n")).map_err(|e| format!("writing dropped.txt: {e}"))?;
    Ok(())
}

/// An icon renders within the limits, is not blank, and has Canny edges to compare.
fn usable(svg: &str, limits: &document::Limits) -> Result<(), String> {
    let tree = document::parse(svg, limits, SIDE)?;
    let rgb = document::render(&tree, SIDE);
    if rgb.iter().all(|&v| v == 255) {
        return Err("draws nothing".into());
    }
    let side = SIDE as usize;
    if !metrics::canny(&metrics::luma(&rgb), side, side, 100, 200).contains(&true) {
        return Err("has no edges at Canny(100, 200)".into());
    }
    Ok(())
}

/// `VAGEN_SVG_ICONS`, or the cached download, or a fresh download.
fn tarball() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("VAGEN_SVG_ICONS") {
        return Ok(PathBuf::from(path));
    }
    let dir = downloads_dir();
    let path = dir.join(format!("flat-color-icons-{VERSION}.tgz"));
    if path.is_file() && std::fs::read(&path).is_ok_and(|b| check_digest(&b, &path).is_ok()) {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let partial = path.with_extension("part");
    let status = std::process::Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--location", "--retry", "3", "--output"])
        .arg(&partial)
        .arg(TARBALL)
        .status()
        .map_err(|e| format!("cannot run curl to fetch {TARBALL}: {e} (or set VAGEN_SVG_ICONS to the .tgz)"))?;
    if !status.success() {
        return Err(format!(
            "curl could not fetch {TARBALL} ({status}); set VAGEN_SVG_ICONS to the .tgz to build offline"
        ));
    }
    std::fs::rename(&partial, &path).map_err(|e| format!("moving {}: {e}", partial.display()))?;
    Ok(path)
}

/// `target/downloads`: cargo marks its target folder with CACHEDIR.TAG, so both the guest
/// and the native build (different OUT_DIRs) find the same copy.
fn downloads_dir() -> PathBuf {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    out.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(|d| d.join("downloads"))
        .unwrap_or_else(|| out.join("downloads"))
}

fn check_digest(bytes: &[u8], path: &Path) -> Result<(), String> {
    use base64::Engine;
    use sha2::Digest;
    let got = format!("sha512-{}", base64::engine::general_purpose::STANDARD.encode(sha2::Sha512::digest(bytes)));
    if got != INTEGRITY {
        return Err(format!(
            "{} is not {PACKAGE}@{VERSION}: its digest is {got}, the registry's {INTEGRITY}",
            path.display()
        ));
    }
    Ok(())
}

fn icons_json(tgz: &[u8]) -> Result<String, String> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(tgz));
    for entry in archive.entries().map_err(|e| format!("reading the tarball: {e}"))? {
        let mut entry = entry.map_err(|e| format!("reading the tarball: {e}"))?;
        if entry.path().is_ok_and(|p| p == Path::new("package/icons.json")) {
            let mut json = String::new();
            entry.read_to_string(&mut json).map_err(|e| format!("reading icons.json: {e}"))?;
            return Ok(json);
        }
    }
    Err(format!("{PACKAGE}@{VERSION} has no package/icons.json"))
}
