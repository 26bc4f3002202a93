//! A model folder's files, read within bounds: a folder may come from anyone (a download, a
//! shared checkpoint), so every name it lists stays inside it, every file is a regular one,
//! and each kind of file has a size cap (docs/architecture.md, "Trust").

use crate::{Error, Result};
use std::path::{Component, Path, PathBuf};
use vagen_files::{self as files, Links, ReadError};

/// What a file holds, which sets how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// `config.json`, `generation_config.json`, the processor's and the shard index.
    Json,
    /// `tokenizer_config.json` (may list every added token).
    TokenizerConfig,
    /// `tokenizer.json` (Qwen2.5's is 7 MiB).
    Tokenizer,
    /// `chat_template.jinja` / `chat_template.json`.
    ChatTemplate,
    /// A `.safetensors` file (transformers shards at 5 GB; a whole 7B model in f32 is 30 GB).
    Weights,
}

impl FileKind {
    pub const fn cap(self) -> u64 {
        match self {
            FileKind::Json => 16 << 20,
            FileKind::TokenizerConfig => 32 << 20,
            FileKind::Tokenizer => 64 << 20,
            FileKind::ChatTemplate => 1 << 20,
            FileKind::Weights => 64 << 30,
        }
    }
}

/// A model folder, with the folders its files may resolve into.
pub struct ModelFolder {
    dir: PathBuf,
    /// The folder itself and, for a Hugging Face cache snapshot (`…/snapshots/<rev>`), the
    /// repository folder above it: a snapshot's files are links into its `blobs/`.
    roots: Vec<PathBuf>,
}

impl ModelFolder {
    pub fn open(dir: &Path) -> Result<Self> {
        let real = dir.canonicalize().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::io(dir, std::io::Error::new(std::io::ErrorKind::NotFound, "no such model folder"))
            }
            _ => Error::io(dir, e),
        })?;
        if !real.is_dir() {
            return Err(Error::io(dir, std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a model folder")));
        }
        let mut roots = vec![real.clone()];
        if let Some(snapshots) = real.parent()
            && snapshots.file_name().is_some_and(|n| n == "snapshots")
            && let Some(repo) = snapshots.parent()
        {
            roots.push(repo.to_path_buf());
        }
        Ok(ModelFolder { dir: dir.to_path_buf(), roots })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The bytes of `name`, `None` when the folder has no such file.
    pub fn read(&self, name: &str, kind: FileKind) -> Result<Option<Vec<u8>>> {
        let Some(real) = self.resolve(name)? else {
            return Ok(None);
        };
        let shown = self.dir.join(name);
        // The resolved path has no links left in it; one planted since is refused.
        files::read_regular(&real, Links::Refuse, kind.cap()).map(Some).map_err(|e| match e {
            ReadError::Io(e) => Error::io(&shown, e),
            ReadError::TooLarge { cap } => Error::Bounds {
                path: shown,
                message: format!("larger than the cap of {} for this kind of file ({kind:?})", files::human_bytes(cap)),
            },
            other => Error::Bounds { path: shown, message: other.to_string() },
        })
    }

    /// [`Self::read`] as UTF-8 text.
    pub fn read_text(&self, name: &str, kind: FileKind) -> Result<Option<String>> {
        let Some(bytes) = self.read(name, kind)? else {
            return Ok(None);
        };
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| Error::Bounds { path: self.dir.join(name), message: "not UTF-8 text".into() })
    }

    /// [`Self::read_text`] parsed as JSON.
    pub fn read_json(&self, name: &str, kind: FileKind) -> Result<Option<serde_json::Value>> {
        let Some(text) = self.read_text(name, kind)? else {
            return Ok(None);
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Error::Config { path: self.dir.join(name), message: e.to_string() })
    }

    /// Where `name` really is, when it names a file inside the folder: a relative path of
    /// plain components, resolving (links followed) into one of the roots.
    fn resolve(&self, name: &str) -> Result<Option<PathBuf>> {
        let shown = self.dir.join(name);
        let outside = |why: &str| Error::Bounds { path: shown.clone(), message: format!("{why}: not read") };
        let rel = Path::new(name);
        if name.is_empty() || name.contains('\0') || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(outside("not a plain relative name inside the model folder (no `..`, `/…` or `.`)"));
        }
        let real = match self.roots[0].join(rel).canonicalize() {
            Ok(real) => real,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&shown, e)),
        };
        if !self.roots.iter().any(|root| real.starts_with(root)) {
            return Err(outside(&format!("a link to {}, outside the model folder", real.display())));
        }
        Ok(Some(real))
    }
}

/// One of a model folder's JSON files: `value` pretty-printed, with a final newline.
pub(crate) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).expect("a JSON value serialises");
    std::fs::write(path, text + "\n").map_err(|e| Error::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<Option<Vec<u8>>>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn names_leaving_the_folder_pipes_and_oversized_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("model");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(tmp.path().join("secret"), b"s").unwrap();
        std::fs::write(dir.join("config.json"), b"{}").unwrap();
        let folder = ModelFolder::open(&dir).unwrap();
        assert_eq!(folder.read("config.json", FileKind::Json).unwrap().unwrap(), b"{}");
        assert!(folder.read("absent.json", FileKind::Json).unwrap().is_none());
        for name in ["../secret", "/etc/passwd", "./config.json", "a/../config.json", ""] {
            assert!(message(folder.read(name, FileKind::Json)).contains("not a plain relative name"), "{name}");
        }
        std::os::unix::fs::symlink(tmp.path().join("secret"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        assert!(message(folder.read("link", FileKind::Json)).contains("outside the model folder"));
        assert!(message(folder.read("zero", FileKind::Weights)).contains("outside the model folder"));
        std::os::unix::fs::symlink("config.json", dir.join("inside")).unwrap();
        assert_eq!(folder.read("inside", FileKind::Json).unwrap().unwrap(), b"{}");
        let fifo = std::ffi::CString::new(dir.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert!(message(folder.read("fifo", FileKind::Json)).contains("not a regular file (a FIFO)"));
        std::fs::write(dir.join("big.jinja"), vec![b'x'; (1 << 20) + 1]).unwrap();
        let big = message(folder.read("big.jinja", FileKind::ChatTemplate));
        assert!(big.contains("larger than the cap of 1 MiB"), "{big}");
    }

    #[test]
    fn a_hugging_face_snapshot_may_link_into_its_blobs() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("models--org--name");
        let snapshot = repo.join("snapshots/0123abcd");
        std::fs::create_dir_all(&snapshot).unwrap();
        std::fs::create_dir_all(repo.join("blobs")).unwrap();
        std::fs::write(repo.join("blobs/f00d"), b"{}").unwrap();
        std::os::unix::fs::symlink("../../blobs/f00d", snapshot.join("config.json")).unwrap();
        let folder = ModelFolder::open(&snapshot).unwrap();
        assert_eq!(folder.read("config.json", FileKind::Json).unwrap().unwrap(), b"{}");
    }
}
