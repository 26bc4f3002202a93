//! A training run's endpoint for one batch of harness episodes: a server on a free loopback
//! port with a book of episodes, the harness processes run against it, and the model
//! answering on the caller's thread (the one that may use it) until the last episode ends.

use crate::episodes::{EpisodeBook, EpisodeSampling};
use crate::harness::{HarnessConfig, HarnessRun, Task, run_episodes};
use crate::request::ImageLimits;
use crate::server::{ServerOptions, accept, server};
use anyhow::{Context, Result};
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use vagen_model::Model;

impl ServerOptions {
    /// A run's endpoint for `rows` episodes at once: text only, one call of each at a time
    /// (a few queued), the model named `policy`.
    pub fn for_episodes(rows: NonZeroUsize) -> Self {
        ServerOptions {
            names: vec!["policy".into()],
            max_batch: rows,
            // Calls of running episodes join the running batch at the next step anyway; an
            // idle one is answered at once.
            batch_wait: Duration::ZERO,
            max_body: 16 << 20,
            images: ImageLimits { per_request: 0, pixels_per_image: 0, pixels_per_request: 0 },
            max_server_pixels: 0,
            max_queue: NonZeroUsize::new(4 * rows.get()).expect("positive"),
            read_timeout: Duration::from_secs(30),
            kv_cache_mib: NonZeroUsize::new(1024).expect("positive"),
            // Text calls: nothing large to give back, and a trim costs each call.
            trim_memory: false,
        }
    }
}

/// `app` served on a free loopback port for `rows` episodes at once, by a runtime of its
/// own (dropping it stops the server): the runtime and the base URL.
pub(crate) fn on_loopback(app: axum::Router, rows: NonZeroUsize) -> Result<(tokio::runtime::Runtime, String)> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the episodes' server")?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .context("listening on a loopback port for the harness episodes")?;
    let base = format!("http://{}", listener.local_addr()?);
    runtime.spawn(accept(listener, app, 4 * rows.get() + 16, Duration::from_secs(30)));
    Ok((runtime, base))
}

/// Runs `tasks` as harness episodes answered by `model` (sampling as `sampling` says,
/// answers recorded as policy `version`); see [`run_episodes`] for `need_reward`.
pub fn host_episodes(
    model: &Model,
    harness: &HarnessConfig,
    tasks: Vec<Task>,
    sampling: EpisodeSampling,
    version: u64,
    need_reward: bool,
) -> Result<Vec<HarnessRun>> {
    let book = Arc::new(EpisodeBook::new(sampling));
    book.set_version(version);
    let rows = NonZeroUsize::new(harness.concurrency.max(1)).expect("at least 1");
    let options = ServerOptions::for_episodes(rows);
    let (app, worker) = server(model, &options, Some(book.clone()));
    let (runtime, base) = on_loopback(app, rows)?;
    let runs = std::thread::scope(|scope| {
        let book = &book;
        let playing = scope.spawn(move || {
            let runs = run_episodes(harness, tasks, book, &base, need_reward);
            // The routes hold the worker's queue: once they are gone, the worker ends.
            drop(runtime);
            runs
        });
        worker.run(model);
        playing.join()
    });
    runs.map_err(|_| anyhow::anyhow!("the harness runner panicked"))
}
