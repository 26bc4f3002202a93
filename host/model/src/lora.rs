//! LoRA (Hu et al., 2021) as PEFT lays it out: an adapted linear layer computes
//! `W x + s · B A dropout(x)`, A `[r, in]`, B `[out, r]`, s = alpha / r (alpha / √r with
//! rsLoRA). Adapters are saved as PEFT saves them, `adapter_config.json` and
//! `adapter_model.safetensors` with `base_model.model.<module>.lora_{A,B}.weight` keys, so
//! `PeftModel.from_pretrained` loads what we train and we load what PEFT trains.
//!
//! Adapter weights stay in f32 whatever the base's dtype (PEFT's `autocast_adapter_dtype`):
//! the low-rank path is computed in f32 and cast back, as PEFT's layer does.

use crate::linear::{Linear, Lora, Site, hf_module_name};
use crate::sampling::gaussian;
use crate::{Error, Result};
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::path::Path;
use tch::nn::Path as VarPath;
use tch::{Device, Kind, Tensor};

pub const ADAPTER_CONFIG: &str = "adapter_config.json";
pub const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
/// What PEFT puts before a module's name in saved keys.
const KEY_PREFIX: &str = "base_model.model.";

/// `[model.lora]`: PEFT's `LoraConfig` fields under their TOML names, PEFT's defaults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// Rank of each adapter.
    #[serde(default = "default_rank")]
    pub r: NonZeroUsize,
    /// PEFT's `lora_alpha`: the low-rank path is scaled by alpha / r (alpha / √r with
    /// `rslora`).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// Dropout on the adapter's input, in training forwards only.
    #[serde(default)]
    pub dropout: f64,
    /// PEFT's names: a layer is adapted when its module name is one of these or ends with
    /// `.` and one of these (`q_proj` adapts every layer's query projection); or
    /// `"all-linear"`: every linear layer but the LM head, the vision tower's included.
    #[serde(default)]
    pub target_modules: Targets,
    #[serde(default)]
    pub init: LoraInit,
    /// Rank-stabilised scaling (Kalajdzievski, 2023): alpha / √r.
    #[serde(default)]
    pub rslora: bool,
    /// PEFT's `modules_to_save`: modules trained whole beside the adapters and saved in the
    /// adapter file (a module whose transformers name ends with one of these, PEFT's rule:
    /// `norm` is every norm, `model.norm` the last). A LoRA-adapted layer cannot be one.
    #[serde(default)]
    pub modules_to_save: Vec<String>,
}

fn default_rank() -> NonZeroUsize {
    NonZeroUsize::new(8).expect("non-zero")
}

fn default_alpha() -> f64 {
    8.0
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            r: default_rank(),
            alpha: default_alpha(),
            dropout: 0.0,
            target_modules: Targets::default(),
            init: LoraInit::default(),
            rslora: false,
            modules_to_save: Vec::new(),
        }
    }
}

/// How a new adapter's A is drawn; B starts at zero either way, so a fresh adapter leaves
/// the model's outputs exactly as they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoraInit {
    /// PEFT's `init_lora_weights = True`: Kaiming-uniform with a = √5, i.e. U(±1/√in).
    #[default]
    Default,
    /// PEFT's `"gaussian"`: N(0, 1/r).
    Gaussian,
}

/// Which linear layers get an adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "TargetsText", into = "TargetsText")]
pub enum Targets {
    AllLinear,
    Names(Vec<String>),
}

impl Default for Targets {
    /// PEFT's default for Qwen2 and Qwen2.5-VL.
    fn default() -> Self {
        Targets::Names(vec!["q_proj".into(), "v_proj".into()])
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum TargetsText {
    One(String),
    Many(Vec<String>),
}

impl TryFrom<TargetsText> for Targets {
    type Error = String;
    fn try_from(t: TargetsText) -> std::result::Result<Self, String> {
        match t {
            TargetsText::One(s) if s == "all-linear" => Ok(Targets::AllLinear),
            TargetsText::One(s) => Err(format!(
                "target_modules {s:?}: a single string must be \"all-linear\" (PEFT's regular expressions \
                 are not supported); otherwise give a list of module names"
            )),
            TargetsText::Many(names) if names.is_empty() => Err("target_modules: the list is empty".into()),
            TargetsText::Many(names) => match names.iter().find(|n| n.is_empty() || n.starts_with('.')) {
                Some(bad) => Err(format!("target_modules: {bad:?} is not a module name")),
                None => Ok(Targets::Names(names)),
            },
        }
    }
}

impl From<Targets> for TargetsText {
    fn from(t: Targets) -> Self {
        match t {
            Targets::AllLinear => TargetsText::One("all-linear".into()),
            Targets::Names(n) => TargetsText::Many(n),
        }
    }
}

impl Targets {
    /// PEFT's rule for a list: the whole name, or its end after a dot.
    fn matches(&self, module: &str) -> Option<usize> {
        match self {
            Targets::AllLinear => Some(0),
            Targets::Names(names) => names.iter().position(|n| {
                module == n || (module.ends_with(n.as_str()) && module[..module.len() - n.len()].ends_with('.'))
            }),
        }
    }
}

impl LoraConfig {
    /// Whether it adapts the layer transformers names `module`.
    pub fn targets(&self, module: &str) -> bool {
        self.target_modules.matches(module).is_some()
    }

    /// Whether the module transformers names `module` is trained whole (PEFT's plain
    /// suffix rule for `modules_to_save`).
    pub fn saves(&self, module: &str) -> bool {
        self.modules_to_save.iter().any(|m| module.ends_with(m.as_str()))
    }

    /// The factor on the low-rank path.
    pub fn scale(&self) -> f64 {
        let r = self.r.get() as f64;
        if self.rslora { self.alpha / r.sqrt() } else { self.alpha / r }
    }

    /// Values serde cannot refuse by type.
    pub fn check(&self) -> Result<()> {
        if !self.alpha.is_finite() || self.alpha <= 0.0 {
            return Err(Error::Invalid(format!("lora.alpha = {}: must be a positive number", self.alpha)));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return Err(Error::Invalid(format!("lora.dropout = {}: must be in [0, 1)", self.dropout)));
        }
        Ok(())
    }

    /// `adapter_config.json` as PEFT writes it.
    pub(crate) fn to_peft_json(&self, base: &str, task_type: &str, extra_modules: &[&str]) -> Value {
        let modules_to_save: Vec<&str> =
            self.modules_to_save.iter().map(String::as_str).chain(extra_modules.iter().copied()).collect();
        let init = match self.init {
            LoraInit::Default => json!(true),
            LoraInit::Gaussian => json!("gaussian"),
        };
        json!({
            "peft_type": "LORA",
            "task_type": task_type,
            "base_model_name_or_path": base,
            "r": self.r.get(),
            "lora_alpha": self.alpha,
            "lora_dropout": self.dropout,
            "target_modules": self.target_modules,
            "use_rslora": self.rslora,
            "init_lora_weights": init,
            "bias": "none",
            "fan_in_fan_out": false,
            "use_dora": false,
            "modules_to_save": if modules_to_save.is_empty() { Value::Null } else { json!(modules_to_save) },
            "rank_pattern": {},
            "alpha_pattern": {},
            "layers_to_transform": null,
            "inference_mode": true,
        })
    }

    /// An adapter folder's `adapter_config.json`: the config, the base it names and the
    /// modules it saves whole. What we cannot reproduce exactly (DoRA, bias training, per-
    /// layer ranks, …) is refused by name rather than loaded approximately.
    pub(crate) fn from_peft_json(value: &Value, path: &Path) -> Result<(LoraConfig, AdapterMeta)> {
        let bad = |message: String| Error::Config { path: path.into(), message };
        let field = |k: &str| value.get(k).filter(|v| !v.is_null());
        if let Some(t) = field("peft_type").and_then(Value::as_str).filter(|t| *t != "LORA") {
            return Err(bad(format!("peft_type {t:?}: only LORA adapters load here")));
        }
        let unsupported = [
            ("use_dora", field("use_dora").is_some_and(|v| v != &json!(false))),
            ("bias", field("bias").is_some_and(|v| v != &json!("none"))),
            ("fan_in_fan_out", field("fan_in_fan_out").is_some_and(|v| v != &json!(false))),
            ("rank_pattern", field("rank_pattern").is_some_and(|v| v != &json!({}))),
            ("alpha_pattern", field("alpha_pattern").is_some_and(|v| v != &json!({}))),
            ("layers_to_transform", field("layers_to_transform").is_some()),
            ("trainable_token_indices", field("trainable_token_indices").is_some()),
            ("target_parameters", field("target_parameters").is_some()),
        ];
        if let Some((name, _)) = unsupported.iter().find(|(_, set)| *set) {
            return Err(bad(format!("{name} = {}: not supported here", value[name])));
        }
        let r = field("r")
            .and_then(Value::as_u64)
            .and_then(|r| NonZeroUsize::new(r as usize))
            .ok_or_else(|| bad("r: expected a positive whole number".into()))?;
        let number = |k: &str, default: f64| match field(k) {
            None => Ok(default),
            Some(v) => v.as_f64().ok_or_else(|| bad(format!("{k}: expected a number, found {v}"))),
        };
        let target_modules = match field("target_modules") {
            Some(v) => serde_json::from_value::<Targets>(v.clone()).map_err(|e| bad(e.to_string()))?,
            None => return Err(bad("target_modules: missing".into())),
        };
        let init = match field("init_lora_weights") {
            Some(Value::String(s)) if s == "gaussian" => LoraInit::Gaussian,
            _ => LoraInit::Default,
        };
        let config = LoraConfig {
            r,
            alpha: number("lora_alpha", default_alpha())?,
            dropout: number("lora_dropout", 0.0)?,
            target_modules,
            init,
            rslora: field("use_rslora").and_then(Value::as_bool).unwrap_or(false),
            modules_to_save: match field("modules_to_save") {
                None => Vec::new(),
                Some(v) => serde_json::from_value::<Vec<String>>(v.clone())
                    .map_err(|_| bad(format!("modules_to_save: expected a list of names, found {v}")))?,
            },
        };
        config.check().map_err(|e| bad(e.to_string()))?;
        let base = field("base_model_name_or_path").and_then(Value::as_str).map(str::to_string);
        Ok((config, AdapterMeta { base }))
    }
}

/// What an adapter folder says beside its LoRA settings.
#[derive(Debug, Clone)]
pub struct AdapterMeta {
    /// `base_model_name_or_path`: the model the adapter was trained on.
    pub base: Option<String>,
}

/// The modules of `vars` (our names, e.g. `model.norm`) that `config` trains whole. One
/// that is also a LoRA target, or an embedding `tied` to the LM head, is refused.
fn saved_modules(vars: &HashMap<String, Tensor>, config: &LoraConfig, vl: bool, tied: bool) -> Result<Vec<String>> {
    let mut modules: Vec<String> = vars
        .keys()
        .filter(|n| !is_adapter_tensor(n))
        .filter_map(|n| n.rsplit_once('.').map(|(m, _)| m.to_string()))
        .filter(|m| config.saves(&hf_module_name(m, vl)))
        .collect();
    modules.sort();
    modules.dedup();
    if let Some(m) =
        config.modules_to_save.iter().find(|m| !modules.iter().any(|n| hf_module_name(n, vl).ends_with(m.as_str())))
    {
        return Err(Error::Invalid(format!("lora.modules_to_save: {m:?} names no module of this model")));
    }
    if let Some(m) = modules.iter().find(|m| vars.contains_key(&format!("{m}.lora_A.weight"))) {
        return Err(Error::Invalid(format!("lora.modules_to_save: {m} is also a LoRA target (target_modules)")));
    }
    if let Some(m) = modules.iter().find(|m| tied && m.as_str() == "model.embed_tokens") {
        return Err(Error::Invalid(format!(
            "lora.modules_to_save: {m} is tied to the LM head here; training a tied embedding whole is not supported"
        )));
    }
    Ok(modules)
}

/// Our name for a module of a saved key's (either transformers' naming).
fn our_module_name(hf: &str) -> String {
    if let Some(rest) = hf.strip_prefix("model.language_model.") {
        format!("model.{rest}")
    } else if let Some(rest) = hf.strip_prefix("model.visual.") {
        format!("visual.{rest}")
    } else {
        hf.to_string()
    }
}

/// The variable path of the module a dotted name (`model.layers.0.mlp`) names below `root`.
pub(crate) fn module_path<'a>(root: &VarPath<'a>, dotted: &str) -> VarPath<'a> {
    let mut parts = dotted.split('.');
    let first = root.sub(parts.next().unwrap_or_default());
    parts.fold(first, |p, part| p.sub(part))
}

/// Makes each of `shared` a (frozen) variable of `root`'s store as it is, not copied.
pub(crate) fn add_shared(root: &VarPath, shared: HashMap<String, Tensor>) {
    for (name, t) in shared {
        let (module, last) = name.rsplit_once('.').expect("a variable name has a module");
        let _ = module_path(root, module).add(last, t, false);
    }
}

/// A model's adapters once attached: their settings and the modules trained whole (our
/// names), derived once.
pub(crate) struct Attached {
    pub config: LoraConfig,
    pub whole: Vec<String>,
}

/// Every linear layer of a decoder and, for a VL model, of its vision tower.
pub(crate) fn sites<'m>(model: &'m mut crate::Qwen2Model, vision: Option<&'m mut crate::Vision>) -> Vec<Site<'m>> {
    let mut sites = model.sites(vision.is_some());
    if let Some(v) = vision {
        sites.extend(v.tower.sites());
    }
    sites
}

/// Gives the `sites` `config` targets their adapters (see [`attach`]), then leaves
/// trainable in `vs` only those and the modules trained whole: `modules_to_save`, and the
/// `extra` ones (a critic's head).
pub(crate) fn attach_trainable(
    vs: &tch::nn::VarStore,
    sites: Vec<Site>,
    config: &LoraConfig,
    seed: u64,
    (vl, tied): (bool, bool),
    extra: &[&str],
) -> Result<(usize, Attached)> {
    let count = attach(&vs.root(), sites, config, seed)?;
    let vars = vs.variables();
    let mut whole = saved_modules(&vars, config, vl, tied)?;
    whole.extend(extra.iter().map(|m| m.to_string()));
    for (name, t) in vars {
        let _ = t.set_requires_grad(is_adapter_tensor(&name) || in_modules(&name, &whole));
    }
    Ok((count, Attached { config: config.clone(), whole }))
}

/// Gives every site `config` targets a new adapter (A drawn from `seed`, B zero), its two
/// tensors trainable variables of `root`'s store named `<layer>.lora_A.weight` /
/// `.lora_B.weight`. A target name that matches no layer is refused, as PEFT refuses it.
pub(crate) fn attach(root: &VarPath, sites: Vec<Site>, config: &LoraConfig, seed: u64) -> Result<usize> {
    install(root, sites, config, seed, true, |layer, lora| layer.lora = Some(lora))
}

/// Adds one more served adapter to every site's bank (`None` where `config` does not
/// target the layer), its tensors frozen variables of `root`'s store (to be filled).
pub(crate) fn attach_served(root: &VarPath, sites: Vec<Site>, config: &LoraConfig) -> Result<usize> {
    let (targeted, untouched): (Vec<Site>, Vec<Site>) = sites.into_iter().partition(|s| config.targets(&s.hf_name));
    for site in untouched {
        site.layer.bank.push(None);
    }
    install(root, targeted, config, 0, false, |layer, lora| layer.bank.push(Some(lora)))
}

/// New adapters on the sites `config` targets, handed to `put`.
fn install(
    root: &VarPath,
    sites: Vec<Site>,
    config: &LoraConfig,
    seed: u64,
    trainable: bool,
    mut put: impl FnMut(&mut Linear, Lora),
) -> Result<usize> {
    config.check()?;
    let r = config.r.get() as i64;
    // Past every targeted layer's smaller side a rank adds nothing (the product is already
    // full rank) but memory: refused before anything is allocated.
    let widest = sites
        .iter()
        .filter(|s| config.targets(&s.hf_name))
        .filter_map(|s| s.layer.weight.size().iter().copied().min())
        .max()
        .unwrap_or(0);
    if r > widest && widest > 0 {
        return Err(Error::Invalid(format!(
            "lora.r = {r}: larger than any adapted layer's smaller side ({widest}), which is the most \
             a low-rank update can use"
        )));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6c6f_7261);
    let mut used = vec![false; if let Targets::Names(n) = &config.target_modules { n.len() } else { 0 }];
    let mut count = 0;
    let device = root.device();
    for site in sites {
        let Some(which) = config.target_modules.matches(&site.hf_name) else { continue };
        if let Some(u) = used.get_mut(which) {
            *u = true;
        }
        let [out, inp] = site.layer.weight.size()[..] else { unreachable!("a linear weight is 2-D") };
        let a = draw_a(&mut rng, config.init, r, inp).to_device(device);
        let b = Tensor::zeros([out, r], (Kind::Float, device));
        let layer = module_path(root, &site.name);
        let a = (&layer / "lora_A").add("weight", a, trainable);
        let b = (&layer / "lora_B").add("weight", b, trainable);
        put(site.layer, Lora { a, b, scale: config.scale(), dropout: config.dropout });
        count += 1;
    }
    if let Targets::Names(names) = &config.target_modules
        && let Some(i) = used.iter().position(|u| !u)
    {
        return Err(Error::Invalid(format!(
            "lora.target_modules: {:?} names no linear layer of this model (PEFT's names: q_proj, k_proj, \
             v_proj, o_proj, gate_proj, up_proj, down_proj; a VL model's vision tower also has qkv, \
             attn.proj, mlp.0, mlp.2)",
            names[i]
        )));
    }
    Ok(count)
}

/// A `[r, in]` draw of `init`'s distribution, portable across machines (not libtorch's
/// generator).
fn draw_a(rng: &mut ChaCha8Rng, init: LoraInit, r: i64, inp: i64) -> Tensor {
    let n = (r * inp) as usize;
    let data: Vec<f32> = match init {
        LoraInit::Default => {
            let bound = 1.0 / (inp as f64).sqrt();
            (0..n)
                .map(|_| ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * bound)
                .map(|v| v as f32)
                .collect()
        }
        LoraInit::Gaussian => {
            let std = 1.0 / r as f64;
            (0..n).map(|_| (gaussian(rng) * std) as f32).collect()
        }
    };
    Tensor::from_slice(&data).view([r, inp])
}

/// Is `name` one of an adapter's tensors?
pub(crate) fn is_adapter_tensor(name: &str) -> bool {
    name.contains(".lora_A.") || name.contains(".lora_B.")
}

/// Whether variable `name` belongs to one of the `modules` (our names).
pub(crate) fn in_modules<S: AsRef<str>>(name: &str, modules: &[S]) -> bool {
    modules
        .iter()
        .any(|m| name.strip_prefix(m.as_ref()).is_some_and(|rest| rest.starts_with('.') && !rest[1..].contains('.')))
}

/// The adapter tensors of `vars` (and the `extra` whole modules, e.g. `score`) under PEFT's
/// saved keys, f32 on the CPU, for `adapter_model.safetensors`.
pub(crate) fn saved_tensors<S: AsRef<str>>(
    vars: HashMap<String, Tensor>,
    vl: bool,
    extra: &[S],
) -> Vec<(String, Tensor)> {
    let mut out: Vec<(String, Tensor)> = vars
        .into_iter()
        .filter(|(n, _)| is_adapter_tensor(n) || in_modules(n, extra))
        .map(|(n, t)| {
            let key = format!("{KEY_PREFIX}{}", hf_module_name(&n, vl));
            (key, t.detach().to_device(Device::Cpu).to_kind(Kind::Float).contiguous())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Copies a saved adapter's tensors into the variables of `vars` that are adapter tensors
/// or belong to `extra` modules. Every such variable must be in the file with its shape,
/// and every tensor of the file must land somewhere: an adapter for layers this config does
/// not adapt is refused, not half-loaded.
pub(crate) fn fill<S: AsRef<str>>(
    vars: &HashMap<String, Tensor>,
    saved: Vec<(String, Tensor)>,
    extra: &[S],
    path: &Path,
) -> Result<()> {
    let bad = |message: String| Error::Weights { path: path.into(), message };
    let mut by_name: HashMap<String, Tensor> = HashMap::new();
    for (key, t) in saved {
        let module =
            key.strip_prefix(KEY_PREFIX).ok_or_else(|| bad(format!("tensor {key}: not under {KEY_PREFIX}")))?;
        // PEFT keeps the adapter's name in memory (`lora_A.default.weight`); saved files
        // normally drop it, some tools do not.
        let module = module
            .replace(".lora_A.default.", ".lora_A.")
            .replace(".lora_B.default.", ".lora_B.")
            .replace(".modules_to_save.default.", ".");
        by_name.insert(our_module_name(&module), t);
    }
    let _guard = tch::no_grad_guard();
    let mut names: Vec<&String> = vars.keys().filter(|n| is_adapter_tensor(n) || in_modules(n, extra)).collect();
    names.sort();
    for name in names {
        let mut var = vars[name].shallow_clone();
        let t = by_name.remove(name).ok_or_else(|| bad(format!("tensor {name} is missing")))?;
        if t.size() != var.size() {
            return Err(bad(format!(
                "tensor {name} has shape {:?}; this model's adapter has {:?}",
                t.size(),
                var.size()
            )));
        }
        var.f_copy_(&t)?;
    }
    if let Some(extra) = by_name.keys().min() {
        return Err(bad(format!(
            "tensor {extra} adapts no layer that adapter_config.json's target_modules names here"
        )));
    }
    Ok(())
}

/// `adapter_config.json` and `adapter_model.safetensors` in `dir`, each written aside and
/// renamed, so a crash never leaves half an adapter.
pub(crate) fn write_folder(dir: &Path, config: &Value, tensors: &[(String, Tensor)]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let weights = dir.join(ADAPTER_WEIGHTS);
    let tmp = weights.with_extension("safetensors.partial");
    Tensor::write_safetensors(tensors, &tmp)
        .map_err(|e| Error::Weights { path: tmp.clone(), message: e.to_string() })?;
    std::fs::rename(&tmp, &weights).map_err(|e| Error::io(&weights, e))?;
    crate::folder::write_json(&dir.join(ADAPTER_CONFIG), config)
}

/// A safetensors file's tensors by saved name.
pub(crate) type Named = Vec<(String, Tensor)>;

/// An adapter folder's config.
pub(crate) fn read_config(dir: &Path) -> Result<(LoraConfig, AdapterMeta)> {
    let folder = crate::folder::ModelFolder::open(dir)?;
    let path = dir.join(ADAPTER_CONFIG);
    let json = folder
        .read_json(ADAPTER_CONFIG, crate::FileKind::Json)?
        .ok_or_else(|| Error::Config { path: path.clone(), message: "missing: not an adapter folder".into() })?;
    LoraConfig::from_peft_json(&json, &path)
}

/// An adapter folder's config and tensors, the config's rank checked against the tensors'
/// before anything is allocated for it (a config's `r` sizes every adapter a model
/// attaches: one of 10⁹ over tensors of rank 4 asked for a terabyte).
pub(crate) fn read_folder(dir: &Path) -> Result<(LoraConfig, AdapterMeta, Named)> {
    let (config, meta) = read_config(dir)?;
    let weights = dir.join(ADAPTER_WEIGHTS);
    let tensors = crate::weights::read_file(&weights)?;
    check_rank(&config, &tensors).map_err(|message| Error::Config { path: dir.join(ADAPTER_CONFIG), message })?;
    Ok((config, meta, tensors))
}

/// The saved A and B matrices' rank (A: `[r, in]`, B: `[out, r]`) is the config's `r`; an
/// adapter file holds at least one pair.
fn check_rank(config: &LoraConfig, tensors: &Named) -> std::result::Result<(), String> {
    let r = config.r.get() as i64;
    let mut pairs = 0;
    for (name, t) in tensors {
        let rank = if name.ends_with(".lora_A.weight") {
            t.size().first().copied()
        } else if name.ends_with(".lora_B.weight") {
            t.size().get(1).copied()
        } else {
            continue;
        };
        pairs += usize::from(name.ends_with(".lora_A.weight"));
        if rank != Some(r) {
            return Err(format!("r = {r}, but {name} has shape {:?} (rank {})", t.size(), rank.unwrap_or(0)));
        }
    }
    if pairs == 0 {
        return Err(format!("{ADAPTER_WEIGHTS} holds no lora_A / lora_B matrices"));
    }
    Ok(())
}

/// Whether `dir` holds an adapter rather than a whole model.
pub fn is_adapter_folder(dir: &Path) -> bool {
    dir.join(ADAPTER_CONFIG).is_file() && !dir.join("config.json").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_match_as_peft_matches() {
        let t = Targets::Names(vec!["q_proj".into(), "mlp.0".into()]);
        assert_eq!(t.matches("model.layers.3.self_attn.q_proj"), Some(0));
        assert_eq!(t.matches("q_proj"), Some(0));
        assert_eq!(t.matches("model.layers.3.self_attn.xq_proj"), None);
        assert_eq!(t.matches("model.visual.merger.mlp.0"), Some(1));
        assert_eq!(t.matches("model.visual.merger.mlp.2"), None);
        assert_eq!(Targets::AllLinear.matches("anything"), Some(0));
    }

    #[test]
    fn config_reads_toml_and_refuses_what_it_cannot_honour() {
        let c: LoraConfig = toml::from_str("r = 16\nalpha = 32\ntarget_modules = \"all-linear\"").unwrap();
        assert_eq!((c.r.get(), c.scale(), &c.target_modules), (16, 2.0, &Targets::AllLinear));
        let c: LoraConfig = toml::from_str("r = 16\nalpha = 32\nrslora = true").unwrap();
        assert_eq!(c.scale(), 8.0);
        assert_eq!(c.target_modules, Targets::default());
        for (bad, says) in [
            ("r = 0", "nonzero"),
            ("target_modules = \".*q_proj\"", "regular expressions"),
            ("target_modules = []", "empty"),
            ("rank = 4", "unknown field"),
        ] {
            let e = toml::from_str::<LoraConfig>(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let c = LoraConfig { dropout: 1.0, ..LoraConfig::default() };
        assert!(c.check().unwrap_err().to_string().contains("lora.dropout"));
    }

    #[test]
    fn peft_json_round_trips_and_unsupported_settings_are_named() {
        let c = LoraConfig { r: NonZeroUsize::new(4).unwrap(), alpha: 16.0, rslora: true, ..Default::default() };
        let json = c.to_peft_json("default@0", "CAUSAL_LM", &[]);
        let (back, meta) = LoraConfig::from_peft_json(&json, Path::new("a.json")).unwrap();
        assert_eq!(back, c);
        assert_eq!(meta.base.as_deref(), Some("default@0"));
        for (key, value) in [("use_dora", json!(true)), ("bias", json!("all")), ("rank_pattern", json!({"q_proj": 8}))]
        {
            let mut j = json.clone();
            j[key] = value;
            let e = LoraConfig::from_peft_json(&j, Path::new("a.json")).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }

    #[test]
    fn module_names_map_both_ways() {
        assert_eq!(hf_module_name("model.layers.0.mlp.up_proj", true), "model.language_model.layers.0.mlp.up_proj");
        assert_eq!(hf_module_name("visual.blocks.1.attn.qkv", true), "model.visual.blocks.1.attn.qkv");
        assert_eq!(hf_module_name("model.layers.0.mlp.up_proj", false), "model.layers.0.mlp.up_proj");
        for name in ["model.layers.0.mlp.up_proj", "visual.blocks.1.attn.qkv"] {
            assert_eq!(our_module_name(&hf_module_name(name, true)), name);
        }
    }
}
