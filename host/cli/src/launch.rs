//! `vagen-host train --nproc N`: N local ranks, started as torchrun starts them. This process
//! hosts the rendezvous store (as torchrun's agent does, so a rank's error outlives it), gives
//! each child torchrun's variables, and stops them all when one fails.

use anyhow::{Context, Result, bail};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};
use vagen_dist::Store;

/// After the first rank fails, the others get this long to stop by themselves (their
/// watchdogs see its error) before they are killed.
const GRACE: Duration = Duration::from_secs(15);

/// This process's command line less `--nproc N`, as `n` ranks (`launch`).
pub fn relaunch(n: usize, timeout: Duration) -> Result<()> {
    let mut args = vec![];
    let mut skip = false;
    for arg in std::env::args().skip(1) {
        if std::mem::take(&mut skip) {
            continue;
        }
        match arg.as_str() {
            "--nproc" => skip = true,
            _ if arg.starts_with("--nproc=") => {}
            _ => args.push(arg),
        }
    }
    launch(n, &args, timeout)
}

/// Runs this same command line without `--nproc` as `n` ranks; fails naming the first rank
/// that failed.
pub fn launch(n: usize, args: &[String], timeout: Duration) -> Result<()> {
    if n == 0 {
        bail!("--nproc 0: give the number of ranks to start (1 or more)");
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("finding a free port for the rendezvous store")?
        .port();
    let _store = Store::connect("127.0.0.1", port, true, 0, timeout, None)
        .context("hosting the rendezvous store for --nproc")?;
    // The ranks' keys live under a secret of this launch: the store listens on loopback,
    // but any local user could reach it.
    let token = format!("{:016x}{:016x}", vagen_serve::fresh_seed(), vagen_serve::fresh_seed());
    let exe = std::env::current_exe().context("finding this program to start the ranks")?;
    let mut children: Vec<Option<Child>> = Vec::new();
    for rank in 0..n {
        let child = Command::new(&exe)
            .args(args)
            .env("RANK", rank.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env("MASTER_PORT", port.to_string())
            .env("TORCHELASTIC_USE_AGENT_STORE", "True")
            .env("TORCHELASTIC_RESTART_COUNT", "0")
            .env("VAGEN_JOB_TOKEN", &token)
            .spawn()
            .with_context(|| format!("starting rank {rank}"));
        match child {
            Ok(c) => children.push(Some(c)),
            Err(e) => {
                stop(&mut children);
                return Err(e);
            }
        }
    }
    let mut first: Option<(usize, ExitStatus)> = None;
    let mut failed_at: Option<Instant> = None;
    loop {
        for (rank, slot) in children.iter_mut().enumerate() {
            let Some(child) = slot else { continue };
            if let Ok(Some(status)) = child.try_wait() {
                *slot = None;
                if !status.success() && first.is_none() {
                    (first, failed_at) = (Some((rank, status)), Some(Instant::now()));
                }
            }
        }
        if children.iter().all(Option::is_none) {
            break;
        }
        if failed_at.is_some_and(|t| t.elapsed() > GRACE) {
            stop(&mut children);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    match first {
        None => Ok(()),
        Some((rank, status)) => bail!("rank {rank} of {n} failed ({}); the other ranks were stopped", describe(status)),
    }
}

fn stop(children: &mut [Option<Child>]) {
    for child in children.iter_mut().flatten() {
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}
