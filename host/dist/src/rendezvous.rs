//! Where this process stands among the ranks, from the variables launchers set: torchrun and
//! Kubernetes' PyTorchJob (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`),
//! Slurm (`SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, with `MASTER_ADDR` from the batch
//! script), and `vagen-host train --nproc N`, which sets torchrun's names itself.

use std::fmt;

/// A rank's place and the store all ranks meet at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous {
    pub rank: usize,
    pub world: usize,
    /// The rank among this node's processes: which GPU it takes.
    pub local_rank: usize,
    pub addr: String,
    pub port: u16,
    /// The store is the launcher's (torchrun's agent, `--nproc`'s parent): every rank
    /// connects to it as a client, its keys under this prefix (one per restart).
    pub agent_store: Option<String>,
    /// `VAGEN_JOB_TOKEN`: a secret every rank of the job shares, under which its keys live,
    /// so that someone who reaches the store but does not know it writes keys no rank reads
    /// (`--nproc` draws one; set the same on every node of a multi-node job).
    pub job_token: Option<String>,
    /// Which variables gave it, for messages.
    pub source: &'static str,
}

#[derive(Debug, thiserror::Error)]
pub enum RendezvousError {
    #[error("{0} is set but {1} is not: a launcher sets both")]
    Missing(&'static str, &'static str),
    #[error("{name} = {value:?} is not {what}")]
    Bad { name: &'static str, value: String, what: &'static str },
    #[error("rank {rank} is outside a world of {world} ({given_by})")]
    Outside { rank: usize, world: usize, given_by: &'static str },
}

/// torchrun's default port, used when a Slurm script leaves `MASTER_PORT` unset.
pub const DEFAULT_PORT: u16 = 29500;

impl Rendezvous {
    /// Rank `rank` of `world` on this machine, meeting at `127.0.0.1:port` with no launcher
    /// (a world of one, tests), named `source` in messages.
    pub fn local(rank: usize, world: usize, port: u16, source: &'static str) -> Self {
        let addr = "127.0.0.1".to_string();
        Rendezvous { rank, world, local_rank: rank, addr, port, agent_store: None, job_token: None, source }
    }

    /// `None` outside any launcher (or in a world of one): a single process.
    pub fn from_env() -> Result<Option<Self>, RendezvousError> {
        Self::from_vars(&|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    pub fn from_vars(get: &dyn Fn(&str) -> Option<String>) -> Result<Option<Self>, RendezvousError> {
        let number = |name: &'static str| -> Result<Option<usize>, RendezvousError> {
            get(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| RendezvousError::Bad { name, value: v, what: "a count" })
                })
                .transpose()
        };
        let (rank, world, local, source) = match (number("RANK")?, number("WORLD_SIZE")?) {
            (Some(r), Some(w)) => (r, w, number("LOCAL_RANK")?, "RANK / WORLD_SIZE"),
            (Some(_), None) => return Err(RendezvousError::Missing("RANK", "WORLD_SIZE")),
            (None, Some(_)) => return Err(RendezvousError::Missing("WORLD_SIZE", "RANK")),
            (None, None) => match (number("SLURM_PROCID")?, number("SLURM_NTASKS")?) {
                (Some(r), Some(w)) => (r, w, number("SLURM_LOCALID")?, "SLURM_PROCID / SLURM_NTASKS"),
                (Some(_), None) => return Err(RendezvousError::Missing("SLURM_PROCID", "SLURM_NTASKS")),
                _ => return Ok(None),
            },
        };
        if rank >= world {
            return Err(RendezvousError::Outside { rank, world, given_by: source });
        }
        if world == 1 {
            return Ok(None);
        }
        let addr = get("MASTER_ADDR").ok_or(RendezvousError::Missing(source, "MASTER_ADDR"))?;
        let port = match get("MASTER_PORT") {
            Some(v) => v.trim().parse::<u16>().ok().filter(|&p| p > 0).ok_or(RendezvousError::Bad {
                name: "MASTER_PORT",
                value: v,
                what: "a port",
            })?,
            None if source.starts_with("SLURM") => DEFAULT_PORT,
            None => return Err(RendezvousError::Missing(source, "MASTER_PORT")),
        };
        // torchrun (elastic) hosts the store in its agent and runs every worker as a client,
        // under a prefix per restart: as torch.distributed's env:// rendezvous does.
        let agent_store = get("TORCHELASTIC_USE_AGENT_STORE")
            .filter(|v| v.eq_ignore_ascii_case("true"))
            .map(|_| format!("/worker/attempt_{}", get("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|| "0".into())));
        let job_token = get("VAGEN_JOB_TOKEN").filter(|t| !t.is_empty());
        let local_rank = local.unwrap_or(rank);
        Ok(Some(Rendezvous { rank, world, local_rank, addr, port, agent_store, job_token, source }))
    }
}

impl fmt::Display for Rendezvous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} of {} (local {}) at {}:{}", self.rank, self.world, self.local_rank, self.addr, self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn read(vars: &[(&str, &str)]) -> Result<Option<Rendezvous>, RendezvousError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Rendezvous::from_vars(&|k| map.get(k).cloned())
    }

    #[test]
    fn torchrun_slurm_and_nothing() {
        assert_eq!(read(&[]).unwrap(), None);
        let r =
            read(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "7")]).unwrap().unwrap();
        assert_eq!((r.rank, r.world, r.local_rank, r.port, r.agent_store), (1, 2, 1, 7, None));
        let r = read(&[
            ("RANK", "3"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "7"),
            ("TORCHELASTIC_USE_AGENT_STORE", "True"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((r.local_rank, r.agent_store.as_deref()), (1, Some("/worker/attempt_2")));
        let r = read(&[("SLURM_PROCID", "5"), ("SLURM_NTASKS", "8"), ("SLURM_LOCALID", "1"), ("MASTER_ADDR", "n0")])
            .unwrap()
            .unwrap();
        assert_eq!((r.rank, r.world, r.local_rank, r.port), (5, 8, 1, DEFAULT_PORT));
        // torchrun's names win over Slurm's (torchrun inside an allocation).
        let r = read(&[
            ("RANK", "0"),
            ("WORLD_SIZE", "2"),
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "8"),
            ("MASTER_ADDR", "h"),
            ("MASTER_PORT", "9"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!((r.rank, r.world), (0, 2));
        assert_eq!(read(&[("RANK", "0"), ("WORLD_SIZE", "1")]).unwrap(), None, "a world of one is one process");
    }

    #[test]
    fn partial_or_bad_variables_are_named() {
        let e = |vars: &[(&str, &str)]| read(vars).unwrap_err().to_string();
        assert!(e(&[("RANK", "0")]).contains("WORLD_SIZE"));
        assert!(e(&[("RANK", "x"), ("WORLD_SIZE", "2")]).contains("RANK = \"x\""));
        assert!(e(&[("RANK", "2"), ("WORLD_SIZE", "2")]).contains("outside a world of 2"));
        assert!(e(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_PORT", "1")]).contains("MASTER_ADDR"));
        assert!(e(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h")]).contains("MASTER_PORT"));
        assert!(
            e(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "99999")])
                .contains("not a port")
        );
    }
}
