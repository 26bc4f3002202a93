//! `vagen-host bench model`: prefill and decode throughput of the generation engine, next to
//! transformers' `generate` on the same shape, batch and lengths (prints figures). For a VL
//! model each prompt also shows images, and the vision encoder is timed on its own.

use crate::bench::{JsonOutput, Subject};
use anyhow::{Context, Result, bail};
use clap::Args;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use std::path::PathBuf;
use std::time::Instant;
use tch::Tensor;
use vagen_model::{
    Engine, EngineKind, EngineOptions, EngineRequest, GenerateOptions, Model, OpCount, PixelValues, Prompt,
    Qwen2Config, Qwen2VlConfig, count_ops,
};

#[derive(Args)]
pub struct BenchModelArgs {
    #[command(flatten)]
    subject: Subject,
    /// Images per prompt for a VL model (random pixels, ahead of the prompt's text).
    #[arg(long, default_value_t = 1)]
    images: usize,
    /// Side of each (square) image in pixels, a multiple of 28.
    #[arg(long, default_value_t = 448)]
    image_size: usize,
    /// Batch sizes, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    batch: Vec<usize>,
    /// Prompt tokens per row.
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    /// Generated tokens per row (end-of-sequence ignored, so every row makes this many).
    #[arg(long, default_value_t = 64)]
    new_tokens: usize,
    /// The engine timed: `continuous` (the rollouts' and `serve`'s) or `static` (one
    /// left-padded batch, the baseline).
    #[arg(long, default_value = "continuous", value_parser = parse_engine)]
    engine: EngineKind,
    /// Decode without CUDA graphs (`engine.cuda_graphs = false`): one launch per operator.
    #[arg(long)]
    no_cuda_graphs: bool,
    /// Attend with SDPA over a mask instead of varlen flash attention
    /// (`engine.flash_attention = false`; flash runs on CUDA in bf16 or f16).
    #[arg(long)]
    no_flash_attention: bool,
    /// Read each decode step's tokens before launching the next (`engine.step_ahead =
    /// false`; steps go ahead where the padded step samples, i.e. with CUDA graphs).
    #[arg(long)]
    no_step_ahead: bool,
    #[command(flatten)]
    reference: Transformers,
    // The JSON line: the model (parameters, bytes of weights and of KV cache per token) and a
    // row per batch size.
    #[command(flatten)]
    out: JsonOutput,
}

struct Figures {
    /// Images per second through the vision tower alone (VL models).
    vision: Option<f64>,
    prefill: f64,
    decode: f64,
    /// One decode step of the continuous engine: operators dispatched and those waiting for
    /// the device, and the engine's reads back to the host (none for transformers').
    step: Option<StepCount>,
    /// CUDA graphs the timed engine captured (in the untimed warm-up) and their seconds.
    graphs: Option<(usize, f64)>,
    /// Whether the timed engine's decode attended through varlen flash attention, and
    /// launched steps before reading the last one's tokens.
    flash: bool,
    ahead: bool,
}

#[derive(Clone, Copy)]
struct StepCount {
    ops: OpCount,
    host_reads: usize,
}

fn parse_engine(s: &str) -> Result<EngineKind, String> {
    serde_json::from_value(serde_json::Value::String(s.into())).map_err(|_| format!("{s:?}: continuous or static"))
}

pub(crate) enum Shape {
    Text(Qwen2Config),
    Vl(Qwen2VlConfig),
}

/// Where transformers finds the same model: a config for random weights, or a folder.
pub(crate) enum HfSource {
    Config(tempfile::NamedTempFile),
    Folder(PathBuf),
    Saved(tempfile::TempDir),
}

pub fn bench_model(a: BenchModelArgs) -> Result<()> {
    if !a.image_size.is_multiple_of(28) || a.image_size == 0 {
        bail!("--image-size {}: use a positive multiple of 28 (patch 14 x merge 2)", a.image_size);
    }
    let (mut model, source) = subject(&a.subject, a.reference.transformers)?;
    let images = if model.vision.is_some() { a.images } else { 0 };
    // Every row generates exactly new_tokens, as on the transformers side.
    model.eos_token_ids.clear();
    let c = model.config();
    let params: i64 = model.vs.variables().values().map(|t| t.numel() as i64).sum();
    let weight_bytes: i64 =
        model.vs.variables().values().map(|t| t.numel() as i64 * t.kind().elt_size_in_bytes() as i64).sum();
    // Whether the decode replays CUDA graphs (asked, and on CUDA).
    let graphed = !a.no_cuda_graphs && model.device().is_cuda();
    let described = serde_json::json!({
        "name": a.subject.name(),
        "parameters": params,
        "weight_bytes": weight_bytes,
        "kv_bytes_per_token": vagen_model::KvCache::bytes_per_position(c, model.dtype.kind()),
        "dtype": format!("{:?}", model.dtype),
        "device": format!("{:?}", model.device()),
    });
    println!(
        "model: hidden {} x {} layers, vocab {}, {:.1} M parameters, {:?} on {:?}; prompt {} + {} new tokens{}",
        c.hidden_size,
        c.num_hidden_layers,
        c.vocab_size,
        params as f64 / 1e6,
        model.dtype,
        model.device(),
        a.prompt_len,
        a.new_tokens,
        if images > 0 { format!(" after {images} image(s) of {0}x{0} each", a.image_size) } else { String::new() }
    );
    let bench = Bench {
        images,
        image_size: a.image_size,
        prompt_len: a.prompt_len,
        new_tokens: a.new_tokens,
        engine: a.engine,
        cuda_graphs: !a.no_cuda_graphs,
        flash_attention: !a.no_flash_attention,
        step_ahead: !a.no_step_ahead,
    };
    Bench { prompt_len: a.prompt_len.min(8), new_tokens: 2, ..bench }.measure(&model, 1)?; // warm-up
    let mut ours = Vec::new();
    for &b in &a.batch {
        let figures = bench.measure(&model, b)?;
        if let Some((n, seconds)) = figures.graphs {
            let attention = if figures.flash { "varlen flash attention" } else { "SDPA" };
            let read =
                if figures.ahead { "each step launched before the last is read" } else { "each step read first" };
            println!(
                "batch {b}: {n} CUDA graph(s) captured in {seconds:.2} s, before the timed runs; {attention}; {read}"
            );
        }
        ours.push(figures);
    }
    let layers = model.config().num_hidden_layers;
    // Free our weights before transformers loads its copy (a 3B model twice may not fit).
    drop(model);
    let theirs = if a.reference.transformers { Some(run_transformers(&a, &source, images)?) } else { None };
    print_table(&a.batch, &ours, theirs.as_deref(), images > 0);
    if a.out.json {
        let rows = json_rows(&a.batch, &ours, theirs.as_deref(), layers);
        let line = serde_json::json!({
            "model": described,
            "engine": a.engine,
            "cuda_graphs": graphed,
            "images": images,
            "image_size": a.image_size,
            "prompt_len": a.prompt_len,
            "new_tokens": a.new_tokens,
            "rows": rows,
        });
        println!("{line}");
    }
    Ok(())
}

/// The JSON line's row per batch size: ours, transformers' where it ran, and the decode
/// step's operator count.
fn json_rows(batch: &[usize], ours: &[Figures], theirs: Option<&[Figures]>, layers: usize) -> Vec<serde_json::Value> {
    batch
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            let t = theirs.map(|t| &t[i]);
            serde_json::json!({
                "batch": b,
                "vision_img_s": ours[i].vision,
                "prefill_tok_s": ours[i].prefill,
                "decode_tok_s": ours[i].decode,
                "hf_vision_img_s": t.and_then(|t| t.vision),
                "hf_prefill_tok_s": t.map(|t| t.prefill),
                "hf_decode_tok_s": t.map(|t| t.decode),
                "ops_per_decode_step": ours[i].step.map(|s| s.ops.ops),
                "ops_per_layer": ours[i].step.map(|s| s.ops.ops as f64 / layers as f64),
                "computing_ops_per_decode_step": ours[i].step.map(|s| s.ops.computing),
                "computing_ops_per_layer": ours[i].step.map(|s| s.ops.computing as f64 / layers as f64),
                "waits_per_decode_step": ours[i].step.map(|s| s.ops.waits),
                "host_reads_per_decode_step": ours[i].step.map(|s| s.host_reads),
                "graph_captures": ours[i].graphs.map(|g| g.0),
                "graph_capture_s": ours[i].graphs.map(|g| g.1),
                "flash_attention": ours[i].flash,
                "step_ahead": ours[i].ahead,
            })
        })
        .collect()
}

fn print_table(batch: &[usize], ours: &[Figures], theirs: Option<&[Figures]>, vision: bool) {
    let fmt = |x: Option<f64>, digits: usize| x.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut head = format!("{:>6} |", "batch");
    if vision {
        head += &format!(" {:>12}", "vision img/s");
    }
    head += &format!(" {:>14} {:>14} |", "prefill tok/s", "decode tok/s");
    if vision {
        head += &format!(" {:>15}", "hf vision img/s");
    }
    head += &format!(" {:>16} {:>16} |", "hf prefill tok/s", "hf decode tok/s");
    head += &format!(" {:>8} {:>9} {:>6} {:>6}", "ops/step", "computing", "waits", "reads");
    println!("{head}");
    for (i, &b) in batch.iter().enumerate() {
        let t = theirs.map(|t| &t[i]);
        let mut row = format!("{b:>6} |");
        if vision {
            row += &format!(" {:>12}", fmt(ours[i].vision, 2));
        }
        row += &format!(" {:>14.0} {:>14.0} |", ours[i].prefill, ours[i].decode);
        if vision {
            row += &format!(" {:>15}", fmt(t.and_then(|t| t.vision), 2));
        }
        row += &format!(" {:>16} {:>16} |", fmt(t.map(|t| t.prefill), 0), fmt(t.map(|t| t.decode), 0));
        if let Some(s) = ours[i].step {
            row += &format!(" {:>8} {:>9} {:>6} {:>6}", s.ops.ops, s.ops.computing, s.ops.waits, s.host_reads);
        }
        println!("{row}");
    }
}

#[derive(Clone, Copy)]
struct Bench {
    images: usize,
    image_size: usize,
    prompt_len: usize,
    new_tokens: usize,
    engine: EngineKind,
    cuda_graphs: bool,
    flash_attention: bool,
    step_ahead: bool,
}

impl Bench {
    /// Prefill alone is timed as a one-token generation; decode is the rest of a full one.
    /// Prefill counts every prompt token, image tokens included.
    fn measure(&self, model: &Model, batch: usize) -> Result<Figures> {
        let mut rng = ChaCha8Rng::seed_from_u64(batch as u64);
        let vocab = model.tokenizer.vocab_size().min(model.config().vocab_size) as u64;
        let prompts: Vec<Prompt> = (0..batch)
            .map(|_| {
                let text = (0..self.prompt_len).map(|_| (rng.next_u64() % vocab) as u32).collect();
                self.with_images(model, text)
            })
            .collect();
        let vision = self.time_vision(model, &prompts)?;
        let width = prompts[0].ids.len();
        let options = |n| GenerateOptions { max_new_tokens: n, temperature: 1.0, ..Default::default() };
        // Nothing reused between runs: every run prefills its prompts whole.
        let mut engine = Engine::new(EngineOptions {
            max_batch: std::num::NonZeroUsize::new(batch).context("a batch of 0")?,
            reuse: false,
            cuda_graphs: self.cuda_graphs,
            flash_attention: self.flash_attention,
            step_ahead: self.step_ahead,
            ..Default::default()
        });
        let generate = |engine: &mut Engine, n| -> Result<Vec<vagen_model::Generation>> {
            Ok(match self.engine {
                EngineKind::Static => model.generate_vl(&prompts, &options(n))?,
                EngineKind::Continuous => {
                    // The cache's memory is kept, and with it the CUDA graphs that read it.
                    engine.forget_cached();
                    model.generate_with(engine, &requests(&prompts), &options(n))?
                }
            })
        };
        // Untimed first: the allocator grows to this batch's size once, and on CUDA the
        // decode's graphs are captured.
        let warm = if model.device().is_cuda() { self.new_tokens } else { 1 };
        generate(&mut engine, warm)?;
        let s = engine.stats();
        let (graphs, flash, ahead) = (
            model.device().is_cuda().then_some((s.graph_captures, s.graph_capture_seconds)),
            s.flash_steps > 0,
            s.steps_ahead > 0,
        );
        let mut generate = |n| generate(&mut engine, n);
        let t = Instant::now();
        generate(1)?;
        let prefill_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let out = generate(self.new_tokens)?;
        let total_s = t.elapsed().as_secs_f64();
        if out.iter().any(|g| g.token_ids.len() != self.new_tokens) {
            bail!("a row stopped before {} tokens", self.new_tokens);
        }
        let decode_s = (total_s - prefill_s).max(1e-9);
        Ok(Figures {
            vision,
            prefill: (batch * width) as f64 / prefill_s,
            decode: (batch * (self.new_tokens - 1)) as f64 / decode_s,
            step: Some(self.count_step(model, &prompts)?),
            graphs,
            flash,
            ahead,
        })
    }

    /// The continuous engine's decode steps counted (the mean of 4, after the prefill and a
    /// first step).
    fn count_step(&self, model: &Model, prompts: &[Prompt]) -> Result<StepCount> {
        const STEPS: usize = 4;
        let mut engine = Engine::new(EngineOptions {
            max_batch: std::num::NonZeroUsize::new(prompts.len()).context("a batch of 0")?,
            cuda_graphs: self.cuda_graphs,
            flash_attention: self.flash_attention,
            step_ahead: self.step_ahead,
            ..Default::default()
        });
        // Rows end after the counted steps: these are steady decode steps, no row leaving.
        let options = GenerateOptions { max_new_tokens: STEPS + 4, temperature: 1.0, ..Default::default() };
        for r in requests(prompts) {
            engine.submit(model, r, &options)?;
        }
        engine.step(model)?;
        engine.step(model)?;
        let before = engine.stats().host_reads;
        let (stepped, ops) = count_ops(|| (0..STEPS).try_for_each(|_| engine.step(model).map(drop)));
        stepped?;
        let host_reads = (engine.stats().host_reads - before) / STEPS;
        Ok(StepCount { ops: ops.per(STEPS as u64), host_reads })
    }

    /// `text` after `images` random images (`<|vision_start|>`, pads, `<|vision_end|>` each).
    fn with_images(&self, model: &Model, text: Vec<u32>) -> Prompt {
        let Some(v) = &model.vision else { return Prompt::text(text) };
        let c = &v.config;
        let side = self.image_size / c.vision.patch_size;
        let pixels = || PixelValues {
            values: Tensor::randn([(side * side) as i64, c.vision.patch_dim() as i64], tch::kind::FLOAT_CPU),
            grid: [1, side, side],
        };
        let images: Vec<PixelValues> = (0..self.images).map(|_| pixels()).collect();
        let tokens = images[0].tokens(c.vision.spatial_merge_size);
        let mut ids = vec![];
        for _ in 0..self.images {
            ids.push(c.vision_start_token_id);
            ids.extend(std::iter::repeat_n(c.image_token_id, tokens));
            ids.push(c.vision_end_token_id);
        }
        ids.extend(text);
        Prompt { ids, images }
    }

    /// Images per second through the vision tower alone, for all of the batch's images.
    fn time_vision(&self, model: &Model, prompts: &[Prompt]) -> Result<Option<f64>> {
        let Some(v) = &model.vision else { return Ok(None) };
        let _g = tch::no_grad_guard();
        let all: Vec<&PixelValues> = prompts.iter().flat_map(|p| &p.images).collect();
        let pixels = Tensor::cat(&all.iter().map(|p| &p.values).collect::<Vec<_>>(), 0);
        let grids: Vec<[usize; 3]> = all.iter().map(|p| p.grid).collect();
        let t = Instant::now();
        let out = v.tower.forward(&pixels, &grids);
        // Reading one value waits for the device to finish.
        let _ = out.sum(tch::Kind::Float).double_value(&[]);
        Ok(Some(all.len() as f64 / t.elapsed().as_secs_f64()))
    }
}

/// The prompts as engine requests, each its own trajectory and draw stream.
fn requests(prompts: &[Prompt]) -> Vec<EngineRequest> {
    prompts
        .iter()
        .enumerate()
        .map(|(i, p)| EngineRequest {
            key: i as u64,
            ids: p.ids.clone(),
            images: p.images.clone(),
            max_new_tokens: usize::MAX,
            seed: i as u64,
            adapter: 0,
        })
        .collect()
}

/// The model to benchmark (random weights of a shape, or `--model`) and where transformers
/// finds the same one.
pub(crate) fn subject(subject: &Subject, transformers: bool) -> Result<(Model, HfSource)> {
    let (args, config) = (&subject.model, subject.config.as_deref());
    if let (Some(shape), Some(dir)) = (config, &args.adapter) {
        bail!(
            "--adapter {} with --config {shape}: random weights of a shape take no adapter; give --model",
            dir.display()
        );
    }
    Ok(match config {
        Some(shape) => {
            let started = Instant::now();
            let (model, raw) = match shape_config(shape)? {
                Shape::Text(c) => (vagen_model::benchmark_model(c.clone(), None, 0, args.options()?)?, c.raw),
                Shape::Vl(c) => {
                    (vagen_model::benchmark_model(c.text.clone(), Some(c.clone()), 0, args.options()?)?, c.raw)
                }
            };
            eprintln!("random weights ready in {:.1} s", started.elapsed().as_secs_f64());
            (model, HfSource::Config(tempfile_with(&raw.to_string())?))
        }
        None => {
            let model = args.load()?;
            let source = match &args.model {
                vagen_model::ModelSource::Folder(dir) => HfSource::Folder(dir.clone()),
                // The embedded models have no folder: transformers reads the one saved here.
                _ if transformers => {
                    let dir = tempfile::tempdir()?;
                    model.save(dir.path())?;
                    HfSource::Saved(dir)
                }
                _ => HfSource::Folder(args.model.to_string().into()),
            };
            (model, source)
        }
    })
}

impl HfSource {
    /// The reference scripts' arguments naming the model.
    pub(crate) fn args(&self) -> [&std::ffi::OsStr; 2] {
        match self {
            HfSource::Config(f) => ["--config".as_ref(), f.path().as_os_str()],
            HfSource::Folder(dir) => ["--model".as_ref(), dir.as_os_str()],
            HfSource::Saved(dir) => ["--model".as_ref(), dir.path().as_os_str()],
        }
    }
}

/// A reference script of `host/model/reference/`: from `VAGEN_REFERENCE_DIR` where set (a
/// copy of that folder, as the GPU bundle ships it), else from this source tree.
pub(crate) fn reference_script(name: &str) -> PathBuf {
    match std::env::var_os("VAGEN_REFERENCE_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../model/reference").join(name),
    }
}

/// `--transformers [--python P]`, as both benches take them.
#[derive(clap::Args, Debug)]
pub(crate) struct Transformers {
    /// Also time transformers (the bench's script in host/model/reference/) with `--python`,
    /// else `VAGEN_PYTHON` (`cargo xtask env` exports the project venv's), else `python3`.
    #[arg(long)]
    pub transformers: bool,
    #[arg(long)]
    pub python: Option<PathBuf>,
}

impl Transformers {
    /// The Python that runs the transformers side.
    pub fn python(&self) -> PathBuf {
        let python = self.python.clone().or_else(|| std::env::var_os("VAGEN_PYTHON").map(PathBuf::from));
        python.unwrap_or_else(|| "python3".into())
    }
}

fn run_transformers(a: &BenchModelArgs, source: &HfSource, images: usize) -> Result<Vec<Figures>> {
    let script = reference_script("bench_transformers.py");
    let python = a.reference.python();
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(&script).args(source.args());
    cmd.args(["--images", &images.to_string(), "--image-size", &a.image_size.to_string()]);
    let batches = a.batch.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    cmd.args([
        "--batch",
        &batches,
        "--prompt-len",
        &a.prompt_len.to_string(),
        "--new-tokens",
        &a.new_tokens.to_string(),
    ]);
    cmd.args(["--dtype", &a.subject.model.dtype.to_string(), "--device", &a.subject.model.device.to_string()]);
    let out = cmd.output().with_context(|| format!("starting {} {}", python.display(), script.display()))?;
    if !out.status.success() {
        bail!("bench_transformers.py failed: {}", String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or(""));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<serde_json::Value> =
        text.lines().filter(|l| l.starts_with('{')).map(serde_json::from_str).collect::<Result<_, _>>()?;
    if rows.len() != a.batch.len() {
        bail!("bench_transformers.py printed {} rows for {} batch sizes", rows.len(), a.batch.len());
    }
    Ok(rows
        .iter()
        .map(|r| Figures {
            step: None,
            graphs: None,
            flash: false,
            ahead: false,
            vision: r["vision_images_per_s"].as_f64(),
            prefill: r["prefill_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
            decode: r["decode_tokens_per_s"].as_f64().unwrap_or(f64::NAN),
        })
        .collect())
}

pub(crate) fn shape_config(shape: &str) -> Result<Shape> {
    let text = match shape {
        "qwen2.5-0.5b" => QWEN2_5_0_5B.to_string(),
        "qwen2.5-vl-3b" => QWEN2_5_VL_3B.to_string(),
        path => std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?,
    };
    let is_vl = serde_json::from_str::<serde_json::Value>(&text)
        .map(|v| v.get("model_type").and_then(|t| t.as_str()) == Some("qwen2_5_vl"))
        .unwrap_or(false);
    let shape_err = |e: String| anyhow::anyhow!("{shape}: {e}");
    Ok(if is_vl {
        Shape::Vl(Qwen2VlConfig::from_json(&text).map_err(shape_err)?)
    } else {
        Shape::Text(Qwen2Config::from_json(&text).map_err(shape_err)?)
    })
}

pub(crate) fn tempfile_with(text: &str) -> Result<tempfile::NamedTempFile> {
    use std::io::Write;
    let mut f = tempfile::Builder::new().suffix(".json").tempfile()?;
    f.write_all(text.as_bytes())?;
    Ok(f)
}

/// The shape of Qwen/Qwen2.5-0.5B-Instruct's config.json.
const QWEN2_5_0_5B: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
  "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
  "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
  "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
  "tie_word_embeddings": true, "initializer_range": 0.02, "use_sliding_window": false,
  "bos_token_id": 151643, "eos_token_id": 151645
}"#;

/// The shape of Qwen/Qwen2.5-VL-3B-Instruct's config.json (transformers 4 layout).
const QWEN2_5_VL_3B: &str = r#"{
  "architectures": ["Qwen2_5_VLForConditionalGeneration"], "model_type": "qwen2_5_vl",
  "hidden_act": "silu", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 11008,
  "num_hidden_layers": 36, "num_attention_heads": 16, "num_key_value_heads": 2,
  "max_position_embeddings": 128000, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
  "tie_word_embeddings": true, "initializer_range": 0.02, "use_sliding_window": false,
  "bos_token_id": 151643, "eos_token_id": 151645, "image_token_id": 151655,
  "video_token_id": 151656, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
  "vision_config": {
    "depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
    "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
    "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2
  }
}"#;
