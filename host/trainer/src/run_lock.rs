//! One writer per run folder: an exclusive lock held for the trainer's lifetime, and a new
//! run only in a folder that is new, empty, or holds nothing but a run's own files.

use anyhow::{Context, Result, bail};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::Write;
use std::path::Path;

/// The lock file; it holds the pid of the trainer that has the folder.
const LOCK: &str = ".lock";

/// What a trainer writes into its run folder, by name (plus `failure-*.json`).
const RUN_ENTRIES: &[&str] = &[
    LOCK,
    "config.toml",
    "metrics.jsonl",
    "checkpoints",
    "samples",
    "report.html",
    "rewards.html",
    "tensorboard",
    "reference",
    "reference.partial",
    "judge-cache",
];

/// Held while the trainer lives; the OS releases it when the process ends, however it ends.
pub(crate) struct RunLock {
    _file: File,
}

impl RunLock {
    pub(crate) fn acquire(run_dir: &Path) -> Result<Self> {
        let path = run_dir.join(LOCK);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let holder = std::fs::read_to_string(&path).unwrap_or_default();
                let holder: String = holder.chars().filter(char::is_ascii_digit).take(12).collect();
                bail!(
                    "{} is in use by another trainer (pid {}): one trainer writes a run folder at a time; \
                     wait for it to end, or choose another --run-dir",
                    run_dir.display(),
                    if holder.is_empty() { "unknown".into() } else { holder }
                );
            }
            Err(TryLockError::Error(e)) => return Err(e).with_context(|| format!("locking {}", path.display())),
        }
        file.set_len(0)?;
        write!(file, "{}", std::process::id())?;
        Ok(RunLock { _file: file })
    }
}

/// A new run goes into a folder that does not exist yet, is empty, or holds only a run's
/// own files (an earlier attempt that stopped before its config was written): never into
/// one of someone's folders, whose files the run's report and checkpoints would overwrite.
pub(crate) fn check_new_run_folder(run_dir: &Path) -> Result<()> {
    if !run_dir.exists() {
        return Ok(());
    }
    if !run_dir.is_dir() {
        bail!("--run-dir {} exists and is not a folder", run_dir.display());
    }
    let mut foreign: Vec<String> = std::fs::read_dir(run_dir)
        .with_context(|| format!("reading {}", run_dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !is_run_entry(name))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    foreign.sort();
    let shown: Vec<String> = foreign.iter().take(3).map(|n| format!("{n:?}")).collect();
    bail!(
        "--run-dir {} holds files that are not a run's ({}{}): a new run goes into a new or empty folder, \
         so nothing there is overwritten",
        run_dir.display(),
        shown.join(", "),
        if foreign.len() > 3 { format!(" and {} more", foreign.len() - 3) } else { String::new() }
    )
}

/// Moves the run in `run_dir` aside, whole, to a sibling `NAME.previous-K` (the first K
/// free), so a new run can start there: for a run that stopped before its first complete
/// checkpoint, which `--resume` cannot continue. Refused while a live trainer holds it.
pub fn set_aside(run_dir: &Path) -> Result<std::path::PathBuf> {
    if !run_dir.join("config.toml").is_file() {
        bail!("--restart: {} holds no run to set aside", run_dir.display());
    }
    let lock = RunLock::acquire(run_dir)?;
    let name = run_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into());
    let parent = run_dir.parent().unwrap_or(Path::new("."));
    let aside =
        (1..).map(|k| parent.join(format!("{name}.previous-{k}"))).find(|p| !p.exists()).expect("some number is free");
    std::fs::rename(run_dir, &aside)
        .with_context(|| format!("moving {} aside to {}", run_dir.display(), aside.display()))?;
    drop(lock);
    Ok(aside)
}

fn is_run_entry(name: &str) -> bool {
    RUN_ENTRIES.contains(&name) || (name.starts_with("failure-") && name.ends_with(".json"))
}
