//! What the trainer sees of the other ranks: its own place, a share of any list, and the
//! few collectives a data-parallel step needs, each failing with the rank to blame.
//!
//! A watchdog thread per rank beats (a counter in the store every 200 ms) and watches the
//! others: a rank whose beat stops for `timeout_s` (killed, stopped, its machine gone) or that
//! published an error ([`Ranks::fail`]) stops this one too, naming it, wherever this one is
//! (inside a collective or in a long rollout). A collective that fails (gloo sees a peer's
//! socket close at once) waits briefly for the same evidence to name the rank.

use crate::config::{Backend, DistributedConfig};
use crate::group::{CommError, Library, ProcessGroup, ReduceOp, Store};
use crate::rendezvous::Rendezvous;
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tch::{Device, Kind, Tensor};

/// The exit status of a rank stopped because another failed.
pub const EXIT_PEER_LOST: i32 = 3;
const BEAT: Duration = Duration::from_millis(200);
/// After a collective failed: a beat this old means the rank is gone.
const GONE_AFTER: Duration = Duration::from_secs(3);
/// The beat of a rank that has finished.
const DONE: &[u8] = b"done";

#[derive(Debug, thiserror::Error)]
pub enum DistError {
    #[error("{0}")]
    Comm(#[from] CommError),
    #[error("{op} failed because rank {rank} {why}")]
    Peer { op: &'static str, rank: usize, why: String },
    #[error(
        "distributed.backend = \"nccl\" needs CUDA tensors, and this rank's device is {0:?} (use \"gloo\" or \"auto\")"
    )]
    NcclOnCpu(Device),
    #[error("{0}")]
    Rendezvous(#[from] crate::rendezvous::RendezvousError),
}

pub struct Ranks {
    rank: usize,
    world: usize,
    joined: Option<Joined>,
    /// Set by [`Ranks::finish`] or [`Ranks::fail`]: what the others learn when this one ends.
    ended: std::cell::Cell<bool>,
}

struct Joined {
    store: Arc<Store>,
    /// gloo: CPU tensors (every step's metadata), and CUDA ones without NCCL.
    cpu: ProcessGroup,
    /// NCCL, for CUDA tensors.
    cuda: Option<ProcessGroup>,
    timeout: Duration,
    stop: Arc<AtomicBool>,
    /// Set by the watchdog as it returns: no beat follows.
    stopped: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl Ranks {
    /// One process: every collective is the identity.
    pub fn single() -> Self {
        Ranks { rank: 0, world: 1, joined: None, ended: false.into() }
    }

    /// Joins the ranks `rdzv` describes, with tensors on `device`.
    pub fn join(rdzv: &Rendezvous, cfg: &DistributedConfig, device: Device) -> Result<Self, DistError> {
        let timeout = Duration::from_secs_f64(cfg.timeout_s);
        let nccl = match (cfg.backend, device) {
            (Backend::Nccl, Device::Cpu) => return Err(DistError::NcclOnCpu(device)),
            (Backend::Nccl, _) => true,
            (Backend::Auto, Device::Cuda(_)) => true,
            _ => false,
        };
        let token = rdzv.job_token.as_deref();
        let store = match &rdzv.agent_store {
            Some(agent) => {
                let prefix = token.map_or_else(|| agent.clone(), |t| format!("{agent}/{t}"));
                Store::connect(&rdzv.addr, rdzv.port, false, 0, timeout, Some(&prefix))?
            }
            None => Store::connect(&rdzv.addr, rdzv.port, rdzv.rank == 0, rdzv.world, timeout, token)?,
        };
        let store = Arc::new(store);
        let cpu = ProcessGroup::new(Library::Gloo, &store, rdzv.rank, rdzv.world, timeout)?;
        let cuda = match nccl {
            true => Some(ProcessGroup::new(Library::Nccl, &store, rdzv.rank, rdzv.world, timeout)?),
            false => None,
        };
        let (stop, stopped) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let watchdog = Some(watch(store.clone(), rdzv.rank, rdzv.world, timeout, stop.clone(), stopped.clone()));
        Ok(Ranks {
            rank: rdzv.rank,
            world: rdzv.world,
            joined: Some(Joined { store, cpu, cuda, timeout, stop, stopped, watchdog }),
            ended: false.into(),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// Rank 0: the one that writes the run's files.
    pub fn is_main(&self) -> bool {
        self.rank == 0
    }

    /// This rank's contiguous block of `n` items (blocks in rank order cover `0..n`; sizes
    /// differ by at most one).
    pub fn share(&self, n: usize) -> Range<usize> {
        share(n, self.rank, self.world)
    }

    /// Tells the others this rank stops with `message`: their watchdogs stop them, naming it.
    /// (A rank dropped without [`Ranks::finish`] or this says it stopped early.)
    pub fn fail(&self, message: &str) {
        if let Some(j) = &self.joined {
            self.ended.set(true);
            let _ = j.store.set(&format!("err/{}", self.rank), message.as_bytes());
        }
    }

    /// This rank's work is done: its heartbeat may stop without alarming the others.
    pub fn finish(&self) {
        if let Some(j) = &self.joined {
            self.ended.set(true);
            j.stop.store(true, Ordering::Relaxed);
            let start = Instant::now();
            while !j.stopped.load(Ordering::Relaxed) && start.elapsed() < Duration::from_secs(5) {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = j.store.set(&format!("beat/{}", self.rank), DONE);
        }
    }

    /// Every rank's `mine`, in rank order.
    pub fn gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, DistError> {
        let Some(j) = &self.joined else {
            return Ok(vec![mine.to_vec()]);
        };
        let op = "gathering the step's data";
        let mut lens = Tensor::zeros([self.world as i64], (Kind::Int64, Device::Cpu));
        let _ = lens.get(self.rank as i64).fill_(mine.len() as i64);
        self.checked(op, j.cpu.all_reduce(&mut lens, ReduceOp::Sum))?;
        let lens: Vec<i64> = Vec::try_from(&lens).expect("int64 lengths");
        let longest = lens.iter().copied().max().unwrap_or(0).max(1);
        let mut padded = vec![0u8; longest as usize];
        padded[..mine.len()].copy_from_slice(mine);
        let input = Tensor::from_slice(&padded);
        let mut out = Tensor::zeros([self.world as i64 * longest], (Kind::Uint8, Device::Cpu));
        self.checked(op, j.cpu.all_gather(&mut out, &input))?;
        let all: Vec<u8> = Vec::try_from(&out).expect("bytes");
        Ok(lens.iter().enumerate().map(|(k, &n)| all[k * longest as usize..][..n as usize].to_vec()).collect())
    }

    /// Sums `values` over the ranks, in place (f64, so counts and sums stay exact).
    pub fn sum(&self, values: &mut [f64]) -> Result<(), DistError> {
        let Some(j) = &self.joined else {
            return Ok(());
        };
        let mut t = Tensor::from_slice(values);
        self.checked("summing the step's figures", j.cpu.all_reduce(&mut t, ReduceOp::Sum))?;
        values.copy_from_slice(&Vec::<f64>::try_from(&t).expect("f64 values"));
        Ok(())
    }

    /// Sums a tensor over the ranks in place (gradients): NCCL for CUDA tensors when the
    /// backend has it, else gloo.
    pub fn sum_tensor(&self, t: &mut Tensor, op: &'static str) -> Result<(), DistError> {
        match &self.joined {
            None => Ok(()),
            Some(j) => self.checked(op, Self::group_for(j, t).all_reduce(t, ReduceOp::Sum)),
        }
    }

    /// `out` (world × `input`'s size) takes every rank's `input`, in rank order.
    pub fn all_gather(&self, out: &mut Tensor, input: &Tensor, op: &'static str) -> Result<(), DistError> {
        match &self.joined {
            None => {
                out.copy_(input);
                Ok(())
            }
            Some(j) => self.checked(op, Self::group_for(j, input).all_gather(out, input)),
        }
    }

    /// `out` takes this rank's slice of the sum over ranks of `input` (world × `out`'s size).
    pub fn reduce_scatter(&self, out: &mut Tensor, input: &Tensor, op: &'static str) -> Result<(), DistError> {
        match &self.joined {
            None => {
                out.copy_(input);
                Ok(())
            }
            Some(j) => self.checked(op, Self::group_for(j, input).reduce_scatter(out, input)),
        }
    }

    /// Rank `root`'s tensor on every rank.
    pub fn broadcast(&self, t: &mut Tensor, root: usize, op: &'static str) -> Result<(), DistError> {
        match &self.joined {
            None => Ok(()),
            Some(j) => self.checked(op, Self::group_for(j, t).broadcast(t, root)),
        }
    }

    pub fn barrier(&self, op: &'static str) -> Result<(), DistError> {
        let Some(j) = &self.joined else {
            return Ok(());
        };
        self.checked(op, j.cpu.barrier())
    }

    fn group_for<'a>(j: &'a Joined, t: &Tensor) -> &'a ProcessGroup {
        match (t.device(), &j.cuda) {
            (Device::Cuda(_), Some(nccl)) => nccl,
            _ => &j.cpu,
        }
    }

    /// A failed collective names the rank that caused it when the store shows one within
    /// `timeout` (an error it published, or a beat that stopped).
    fn checked(&self, op: &'static str, r: Result<(), CommError>) -> Result<(), DistError> {
        let Err(e) = r else {
            return Ok(());
        };
        let Some(j) = &self.joined else {
            return Err(e.into());
        };
        let start = Instant::now();
        let mut seen: Vec<(Option<Vec<u8>>, Instant)> = vec![(None, start); self.world];
        while start.elapsed() < j.timeout {
            for k in (0..self.world).filter(|&k| k != self.rank) {
                match culprit(&j.store, k, &mut seen[k], GONE_AFTER) {
                    Ok(Some(why)) => return Err(DistError::Peer { op, rank: k, why }),
                    Ok(None) => {}
                    Err(_) if k == 0 || self.world == 2 => {
                        let why = format!("is gone (the rendezvous store does not answer: {e})");
                        return Err(DistError::Peer { op, rank: 0, why });
                    }
                    Err(_) => {}
                }
            }
            std::thread::sleep(BEAT);
        }
        Err(e.into())
    }
}

impl Drop for Ranks {
    fn drop(&mut self) {
        if let Some(j) = &mut self.joined {
            j.stop.store(true, Ordering::Relaxed);
            if let Some(w) = j.watchdog.take() {
                let _ = w.join();
            }
            if !self.ended.get() {
                let _ = j.store.set(&format!("err/{}", self.rank), b"stopped before the run ended (its log says why)");
            }
        }
    }
}

/// Rank `rank` of `world`'s contiguous block of `n` items ([`Ranks::share`]).
pub fn share(n: usize, rank: usize, world: usize) -> Range<usize> {
    n * rank / world..n * (rank + 1) / world
}

/// Why rank `k` is to blame, if it is: an error it published, or no new beat for `gone`.
/// `seen` is its last beat and when it changed.
fn culprit(
    store: &Store,
    k: usize,
    seen: &mut (Option<Vec<u8>>, Instant),
    gone: Duration,
) -> Result<Option<String>, CommError> {
    if let Some(message) = store.get(&format!("err/{k}"))? {
        return Ok(Some(format!("failed: {}", String::from_utf8_lossy(&message))));
    }
    let beat = store.get(&format!("beat/{k}"))?;
    if beat.as_deref() == Some(DONE) {
        return Ok(None);
    }
    if beat != seen.0 {
        *seen = (beat, Instant::now());
    } else if seen.1.elapsed() >= gone {
        let never = seen.0.is_none();
        let what = if never { "never joined" } else { "stopped answering" };
        return Ok(Some(format!(
            "{what} (no heartbeat for {:.0} s: killed, stopped or hung)",
            seen.1.elapsed().as_secs_f64()
        )));
    }
    Ok(None)
}

fn watch(
    store: Arc<Store>,
    rank: usize,
    world: usize,
    timeout: Duration,
    stop: Arc<AtomicBool>,
    stopped: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(format!("vagen-dist-watchdog-{rank}"))
        .spawn(move || {
            let _exit = SetOnDrop(stopped);
            let start = Instant::now();
            let mut seen: Vec<(Option<Vec<u8>>, Instant)> = vec![(None, start); world];
            let mut beats: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                beats += 1;
                let beat = store.set(&format!("beat/{rank}"), &beats.to_le_bytes());
                let mut verdict =
                    beat.err().map(|e| (0, format!("is gone (the rendezvous store does not answer: {e})")));
                for k in (0..world).filter(|&k| k != rank) {
                    if verdict.is_some() {
                        break;
                    }
                    match culprit(&store, k, &mut seen[k], timeout) {
                        Ok(Some(why)) => verdict = Some((k, why)),
                        Ok(None) => {}
                        Err(e) => verdict = Some((0, format!("is gone (the rendezvous store does not answer: {e})"))),
                    }
                }
                if let Some((k, why)) = verdict {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    eprintln!("error: rank {rank} stops: rank {k} {why}");
                    std::process::exit(EXIT_PEER_LOST);
                }
                std::thread::sleep(BEAT);
            }
        })
        .expect("spawning the watchdog thread")
}

/// Sets its flag when dropped: however the watchdog returns.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::share;

    #[test]
    fn shares_cover_the_list_in_rank_order() {
        for n in 0..20 {
            for world in 1..6 {
                let blocks: Vec<_> = (0..world).map(|r| share(n, r, world)).collect();
                assert_eq!(blocks[0].start, 0);
                assert_eq!(blocks[world - 1].end, n);
                for w in blocks.windows(2) {
                    assert_eq!(w[0].end, w[1].start);
                }
                let sizes: Vec<usize> = blocks.iter().map(|b| b.len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{n} {world} {sizes:?}");
            }
        }
    }
}
