//! `vagen-host dist-check`: do the collectives work here? Every collective the trainer uses,
//! on tensors of the chosen device, checked against its definition, and the all-reduce's
//! bandwidth. Under torchrun / Slurm / a PyTorchJob it checks the launcher's ranks (one line
//! per rank); `--nproc N` starts N local ranks; alone it is a world of one (which still goes
//! through the backend, so NCCL on one GPU is exercised).

use anyhow::{Context, Result, bail, ensure};
use clap::Args;
use std::time::Instant;
use tch::{Device, Kind, Tensor};
use vagen_dist::{Backend, DistributedConfig, Ranks, Rendezvous};
use vagen_model::DeviceChoice;

#[derive(Args)]
pub struct DistCheckArgs {
    /// `auto` (NCCL for CUDA tensors, else gloo), `gloo` or `nccl`.
    #[arg(long, default_value = "auto")]
    backend: String,
    /// Where the tensors live: `cpu`, `cuda` (each rank its local GPU) or `cuda:K` (every
    /// rank on GPU K: gloo over CUDA tensors on a machine with one GPU).
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Start this many local ranks.
    #[arg(long, value_name = "N")]
    nproc: Option<usize>,
    /// Size of the all-reduce timed for bandwidth.
    #[arg(long, default_value_t = 64)]
    mib: usize,
    /// Seconds a collective may wait.
    #[arg(long, default_value_t = 60.0)]
    timeout_s: f64,
}

pub fn dist_check(a: DistCheckArgs) -> Result<()> {
    if let Some(n) = a.nproc {
        return crate::launch::relaunch(n, std::time::Duration::from_secs_f64(a.timeout_s.max(60.0)));
    }
    let backend = match a.backend.as_str() {
        "auto" => Backend::Auto,
        "gloo" => Backend::Gloo,
        "nccl" => Backend::Nccl,
        other => bail!("--backend {other:?}: auto, gloo or nccl"),
    };
    let rdzv = match Rendezvous::from_env()? {
        Some(r) => r,
        None => {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
            Rendezvous::local(0, 1, port, "a world of one")
        }
    };
    let device = match a.device.as_str() {
        "cuda" => Device::Cuda(rdzv.local_rank),
        other => other.parse::<DeviceChoice>().map_err(anyhow::Error::msg)?.resolve()?,
    };
    let cfg = DistributedConfig { backend, timeout_s: a.timeout_s };
    let ranks = Ranks::join(&rdzv, &cfg, device).with_context(|| format!("joining as {rdzv} ({})", rdzv.source))?;
    let result = check(&ranks, device, a.mib);
    match &result {
        Ok(line) => {
            ranks.finish();
            println!("{line}");
        }
        Err(e) => ranks.fail(&format!("{e:#}")),
    }
    result.map(|_| ())
}

fn check(ranks: &Ranks, device: Device, mib: usize) -> Result<serde_json::Value> {
    let (r, n) = (ranks.rank() as f64, ranks.world() as f64);
    let values = |t: &Tensor| Vec::<f32>::try_from(&t.to_device(Device::Cpu)).expect("f32");
    let f32s = (Kind::Float, device);
    let mut t = Tensor::ones([1000], f32s) * (r + 1.0);
    ranks.sum_tensor(&mut t, "all-reduce")?;
    let want = n * (n + 1.0) / 2.0;
    ensure!(values(&t).iter().all(|&x| x as f64 == want), "all-reduce: {:?}, not {want}", &values(&t)[..3]);
    let mut all = Tensor::zeros([2 * ranks.world() as i64], f32s);
    ranks.all_gather(&mut all, &(Tensor::ones([2], f32s) * r), "all-gather")?;
    let want: Vec<f32> = (0..ranks.world()).flat_map(|k| [k as f32, k as f32]).collect();
    ensure!(values(&all) == want, "all-gather: {:?}, not {want:?}", values(&all));
    let input = Tensor::arange(2 * ranks.world() as i64, f32s);
    let mut mine = Tensor::zeros([2], f32s);
    ranks.reduce_scatter(&mut mine, &input, "reduce-scatter")?;
    let k = 2.0 * r as f32;
    ensure!(values(&mine) == [k * n as f32, (k + 1.0) * n as f32], "reduce-scatter: {:?}", values(&mine));
    let mut b = Tensor::full([3], r + 7.0, f32s);
    ranks.broadcast(&mut b, 0, "broadcast")?;
    ensure!(values(&b) == [7.0; 3], "broadcast: {:?}", values(&b));
    let bytes = ranks.gather_bytes(format!("rank {}", ranks.rank()).as_bytes())?;
    ensure!(bytes.iter().enumerate().all(|(k, b)| *b == format!("rank {k}").into_bytes()), "gathered bytes");
    ranks.barrier("barrier")?;
    // Bandwidth: the all-reduce the gradients take, timed after a warm-up.
    let elements = (mib << 20) / 4;
    let mut big = Tensor::ones([elements as i64], f32s);
    ranks.sum_tensor(&mut big, "all-reduce (warm-up)")?;
    let rounds = 5;
    let start = Instant::now();
    for _ in 0..rounds {
        ranks.sum_tensor(&mut big, "all-reduce (timed)")?;
    }
    if let Device::Cuda(i) = device {
        tch::Cuda::synchronize(i as i64);
    }
    let seconds = start.elapsed().as_secs_f64() / rounds as f64;
    // NCCL's "bus bandwidth": what each link carries in a ring all-reduce.
    let bus = 2.0 * (n - 1.0) / n * (mib as f64 / 1024.0) / seconds;
    Ok(serde_json::json!({
        "rank": ranks.rank(), "world": ranks.world(), "device": format!("{device:?}"),
        "collectives": "ok", "all_reduce_mib": mib, "all_reduce_s": seconds, "bus_gib_per_s": bus,
    }))
}
