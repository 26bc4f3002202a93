//! TensorBoard event files: the run's metrics (the names `metrics.jsonl` uses) and sample
//! frames, under `RUN/tensorboard/`. `tensorboard --logdir RUN/tensorboard` shows them;
//! `wandb sync --sync-tensorboard RUN/tensorboard` uploads them.
//!
//! The format is small and stable, so it is written here rather than through a protobuf
//! stack: a file of records (little-endian u64 length, its masked CRC-32C, the bytes, their
//! masked CRC-32C), each an `Event` protobuf from tensorflow/core/util/event.proto:
//! `wall_time` (1, double), `step` (2, int64), `file_version` (3, string), `summary` (5:
//! `Summary { repeated Value value = 1 }`, `Value { tag = 1, simple_value = 2 (float),
//! image = 4 }`, `Image { height = 1, width = 2, colorspace = 3, encoded_image_string = 4 }`)
//! and `session_log` (7: `SessionLog { status = 1 }`, START = 1).

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// One event file, opened for this process (each start of a run writes a new one, as
/// TensorFlow's writers do).
pub struct EventWriter {
    path: PathBuf,
    file: std::fs::File,
}

impl EventWriter {
    /// A new event file in `dir`.
    pub fn create(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        // Unique per start even within one second: nanoseconds and the process id.
        let name = format!("events.out.tfevents.{}.{}-{}.vagen", now.as_secs(), now.subsec_nanos(), std::process::id());
        let path = dir.join(name);
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        let w = EventWriter { path, file };
        w.header()?;
        Ok(w)
    }

    /// Starts over: the other event files in this folder are removed and this one emptied,
    /// for a resumed run to write its log as it now stands. (TensorBoard's own way, a
    /// `SessionLog START` at the resumed step, drops every tag's later points, SFT's too,
    /// whose steps are counted apart.)
    pub fn restart(&self) -> Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?.flatten() {
            let p = entry.path();
            if p != self.path && p.file_name().is_some_and(|n| n.to_string_lossy().contains("tfevents")) {
                std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
            }
        }
        self.file.set_len(0).with_context(|| format!("emptying {}", self.path.display()))?;
        self.header()
    }

    fn header(&self) -> Result<()> {
        let mut version = Message::default();
        version.double(1, wall_time());
        version.bytes(3, b"brain.Event:2");
        self.record(&version.0)
    }

    /// Scalars at `step`, one event for all of them.
    pub fn scalars<'a>(&self, step: usize, values: impl IntoIterator<Item = (&'a str, f64)>) -> Result<()> {
        let mut summary = Message::default();
        for (tag, v) in values {
            let mut value = Message::default();
            value.bytes(1, tag.as_bytes());
            value.float(2, v as f32);
            summary.bytes(1, &value.0);
        }
        self.summary(step, &summary)
    }

    /// An RGB8 image at `step`, PNG-encoded.
    pub fn image(&self, step: usize, tag: &str, width: u32, height: u32, png: &[u8]) -> Result<()> {
        let mut image = Message::default();
        image.varint(1, u64::from(height));
        image.varint(2, u64::from(width));
        image.varint(3, 3);
        image.bytes(4, png);
        let mut value = Message::default();
        value.bytes(1, tag.as_bytes());
        value.bytes(4, &image.0);
        let mut summary = Message::default();
        summary.bytes(1, &value.0);
        self.summary(step, &summary)
    }

    fn summary(&self, step: usize, summary: &Message) -> Result<()> {
        let mut event = Message::default();
        event.double(1, wall_time());
        event.varint(2, step as u64);
        event.bytes(5, &summary.0);
        self.record(&event.0)
    }

    /// One record, written with one call so that a kill leaves it whole or cut short at the
    /// end (TensorBoard stops reading at a cut record).
    fn record(&self, data: &[u8]) -> Result<()> {
        let len = (data.len() as u64).to_le_bytes();
        let mut rec = Vec::with_capacity(data.len() + 16);
        rec.extend_from_slice(&len);
        rec.extend_from_slice(&masked_crc(&len).to_le_bytes());
        rec.extend_from_slice(data);
        rec.extend_from_slice(&masked_crc(data).to_le_bytes());
        (&self.file).write_all(&rec).context("writing a TensorBoard event")
    }
}

fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs_f64()
}

/// TFRecord's checksum: CRC-32C, rotated and offset so that CRCs of CRCs stay distinct.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Protobuf fields in wire format, appended in order.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn key(&mut self, field: u32, wire: u8) {
        self.raw_varint(u64::from(field) << 3 | u64::from(wire));
    }

    fn raw_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn varint(&mut self, field: u32, v: u64) {
        self.key(field, 0);
        self.raw_varint(v);
    }

    fn double(&mut self, field: u32, v: f64) {
        self.key(field, 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn float(&mut self, field: u32, v: f32) {
        self.key(field, 5);
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, field: u32, v: &[u8]) {
        self.key(field, 2);
        self.raw_varint(v.len() as u64);
        self.0.extend_from_slice(v);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_and_varints_match_the_formats_published_values() {
        // CRC-32C of "123456789" is 0xE3069283 (RFC 3720's check value).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xE306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8));
        let mut m = Message::default();
        m.varint(2, 300);
        // Field 2 varint: key 0x10, then 300 = 0b1_0010_1100 as 0xAC 0x02.
        assert_eq!(m.0, [0x10, 0xAC, 0x02]);
        let mut s = Message::default();
        s.bytes(1, b"ab");
        assert_eq!(s.0, [0x0A, 2, b'a', b'b']);
    }
}
