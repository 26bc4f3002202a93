//! An OpenAI-compatible server of our own engine, as `vagen-host serve` runs it (`/v1/models`,
//! `/v1/chat/completions` with and without streaming). A worker thread owns the model and
//! drives the engine's step loop: requests arriving while others generate join the running
//! batch at the next step (up to `--max-batch` rows; past it they wait for rows to end),
//! and an idle server gathers what arrives within `--batch-wait-ms` of the first request
//! into one prefill.
//!
//! OpenAI's semantics: draws are fresh per request unless `seed` is given (choice i of a
//! seeded request draws with `seed + i`, so `n = 4` equals four single requests seeded
//! `seed` … `seed + 3`); `n` completions share the prompt's prefill (the engine's prefix
//! sharing); `logprobs` are the sampled tokens' under the temperature-scaled distribution
//! they were drawn from; every choice carries its `token_ids` (our extension). Fields we do
//! not implement (`functions`, JSON `response_format`, …) are refused by name, never ignored;
//! tools are offered through the model's chat template and its calls read back (`tools.rs`);
//! every error, on every route (404, 405 and 413 included), has OpenAI's JSON shape. Bodies come typed
//! (`vagen_policy::openai`, shared with the judge's client).
//!
//! A training run hosts the same server for its harness episodes (`episodes.rs`): each
//! episode's calls recorded as training sequences, its harness process run by `harness.rs`.

mod episodes;
mod forward;
pub mod harness;
mod hosted;
mod request;
mod server;
mod stream;
mod tokens;
mod tools;
mod worker;

pub use episodes::{Call, EpisodeBook, EpisodeRecord, EpisodeSampling, Reported, Ticket};
pub use forward::{Forward, forward_episodes};
pub use hosted::host_episodes;
pub use request::ImageLimits;
pub use server::{ServerOptions, accept, fresh_seed, listen, read_body, server};
pub use worker::Worker;
