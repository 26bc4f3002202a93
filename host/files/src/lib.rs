//! vagen-files: reading a file that someone else may have planted (a plugin, a cache entry, a model
//! folder's shard): the open never waits on a pipe, the type is checked on the open file
//! before a byte is read, and no more than a cap is read whatever the metadata says.

use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Why a file was not read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("not a regular file (a {0})")]
    NotRegular(&'static str),
    #[error("larger than the cap of {}", human_bytes(*cap))]
    TooLarge { cap: u64 },
}

/// Whether the last component of the path may be a symbolic link.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Links {
    Follow,
    Refuse,
}

/// Opens `path` for reading and checks it is a regular file, without reading it.
pub fn open_regular(path: &Path, links: Links) -> Result<(File, Metadata), ReadError> {
    // Non-blocking: opening a FIFO for reading would otherwise wait for a writer forever,
    // before the type could be checked.
    let mut flags = libc::O_NONBLOCK;
    if links == Links::Refuse {
        flags |= libc::O_NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ELOOP) && links == Links::Refuse {
            ReadError::NotRegular("symbolic link")
        } else {
            ReadError::Io(e)
        }
    })?;
    let meta = file.metadata()?;
    let kind = meta.file_type();
    let what = if kind.is_file() {
        return Ok((file, meta));
    } else if kind.is_dir() {
        "folder"
    } else if kind.is_fifo() {
        "FIFO"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else {
        "special file"
    };
    Err(ReadError::NotRegular(what))
}

/// All of an open file's bytes, refused past `cap` (checked on the size first, then on what
/// is really read: a file may grow while it is read).
pub fn read_capped(file: File, meta: &Metadata, cap: u64) -> Result<Vec<u8>, ReadError> {
    if meta.len() > cap {
        return Err(ReadError::TooLarge { cap });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(ReadError::TooLarge { cap });
    }
    Ok(bytes)
}

/// [`open_regular`] then [`read_capped`].
pub fn read_regular(path: &Path, links: Links, cap: u64) -> Result<Vec<u8>, ReadError> {
    let (file, meta) = open_regular(path, links)?;
    read_capped(file, &meta, cap)
}

/// `1.5 GiB`, `64 MiB`, `12 KiB`, `100 B`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 { format!("{value} {}", UNITS[unit]) } else { format!("{value:.1} {}", UNITS[unit]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipes_devices_links_and_big_files_are_refused_before_reading() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read_regular(&fifo, Links::Follow, 10), Err(ReadError::NotRegular("FIFO"))));
        let zero = Path::new("/dev/zero");
        assert!(matches!(read_regular(zero, Links::Follow, 10), Err(ReadError::NotRegular("character device"))));
        let file = dir.path().join("f");
        std::fs::write(&file, b"0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert_eq!(read_regular(&link, Links::Follow, 10).unwrap(), b"0123456789");
        assert!(matches!(read_regular(&link, Links::Refuse, 10), Err(ReadError::NotRegular("symbolic link"))));
        let err = read_regular(&file, Links::Follow, 9).unwrap_err();
        assert_eq!(err.to_string(), "larger than the cap of 9 B");
        assert_eq!(human_bytes(64 << 20), "64 MiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
    }
}
