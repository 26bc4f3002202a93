use crate::limits_arg::{limits_from, load};
use anyhow::Result;
use clap::Args;
use std::path::{Path, PathBuf};
use vagen_registry::metadata::Metadata;
use vagen_runtime::PluginInfo;

#[derive(Args)]
pub struct InspectArgs {
    /// The plugin file (`.wasm`).
    #[arg(long)]
    plugin: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// The plugin is a reward function (`vagen:env/reward`).
    #[arg(long)]
    reward: bool,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    if a.reward {
        return inspect_reward(&a);
    }
    let plugin = load(&a.plugin, limits_from(&[])?)?;
    let (m, info) = (plugin.manifest(), plugin.info());
    let metadata = component_metadata(&info.path, info.kind)?;
    if a.json {
        println!("{}", serde_json::json!({ "manifest": m, "plugin": info, "metadata": metadata }));
        return Ok(());
    }
    print_source(&a.plugin, &info.path);
    if info.kind == "openenv" {
        // A server: its protocol, and the digest of what its /schema says.
        println!("kind          openenv server ({})", info.wit_version);
    } else {
        println!("kind          {} (vagen:env@{})", info.kind, info.wit_version);
        println!("size          {} bytes", info.size_bytes);
    }
    println!("sha256        {}", info.sha256);
    if let Some(inputs) = &info.build_inputs {
        println!("build inputs  {inputs}");
    }
    print_imports(info);
    print_metadata(metadata.as_ref());
    println!("name          {} {}", m.name, m.version);
    println!("description   {}", m.description);
    let modalities: Vec<_> = m.modalities.iter().map(|x| format!("{x:?}").to_lowercase()).collect();
    println!("modalities    {}", modalities.join(", "));
    if m.action_names.is_empty() {
        println!("actions       free-form");
    } else {
        println!(
            "actions       {} (separator {:?}, up to {} per turn)",
            m.action_names.join(", "),
            m.action_separator,
            m.max_actions_per_turn
        );
    }
    println!("max turns     {}", m.default_max_turns);
    println!("oracle        {}", if m.has_oracle { "yes" } else { "no" });
    println!("config        {}", m.default_config);
    Ok(())
}

fn inspect_reward(a: &InspectArgs) -> Result<()> {
    let plugin = vagen_runtime::Runtime::new(limits_from(&[])?)?.load_reward(&a.plugin)?;
    let m = plugin.manifest();
    let metadata = component_metadata(plugin.path(), "wasm")?;
    let config: serde_json::Value = serde_json::from_str(&m.default_config).unwrap_or(serde_json::Value::Null);
    if a.json {
        let manifest = serde_json::json!({"name": m.name, "version": m.version, "description": m.description,
            "default_config": config});
        let info = serde_json::json!({"path": plugin.path(), "kind": "reward", "wit_version": "0.3.0",
            "size_bytes": plugin.size_bytes(), "sha256": plugin.sha256()});
        println!("{}", serde_json::json!({ "manifest": manifest, "plugin": info, "metadata": metadata }));
        return Ok(());
    }
    print_source(&a.plugin, plugin.path());
    println!("kind          reward function ({})", vagen_runtime::reward::REWARD_EXPORT);
    println!("size          {} bytes", plugin.size_bytes());
    println!("sha256        {}", plugin.sha256());
    print_metadata(metadata.as_ref());
    println!("name          {} {}", m.name, m.version);
    println!("description   {}", m.description);
    println!("config        {}", m.default_config);
    Ok(())
}

/// One row per imported interface: what the component asks for beside what the sandbox
/// lets it reach through it (the table in `host/runtime/src/sandbox.rs`).
fn print_imports(info: &PluginInfo) {
    if info.kind == "native" {
        println!("imports       everything the host process can reach (native code is trusted: no sandbox)");
        return;
    }
    if info.imports.is_empty() {
        println!("imports       none");
        return;
    }
    let denied = info.imports.iter().filter(|i| i.access == "denied").count();
    println!("imports       {} interfaces, {denied} denied by the sandbox:", info.imports.len());
    let width = info.imports.iter().map(|i| i.name.len()).max().unwrap_or(0);
    for i in &info.imports {
        println!("  {:width$}  {:7}  {}", i.name, i.access, i.how);
    }
}

/// A component's metadata sections, read from the file it loaded from (a native plugin or
/// a server has none).
fn component_metadata(file: &Path, kind: &str) -> Result<Option<Metadata>> {
    match kind {
        "wasm" => Ok(Some(crate::share::read_metadata(file)?)),
        _ => Ok(None),
    }
}

/// The name as given, and for an `oci://` reference the cached file it stands for.
fn print_source(name: &Path, file: &Path) {
    println!("plugin        {}", name.display());
    if name != file {
        println!("file          {}", file.display());
    }
}

fn print_metadata(metadata: Option<&Metadata>) {
    let Some(m) = metadata else { return };
    let rows: Vec<_> = m.rows().into_iter().filter_map(|(k, v)| v.map(|v| format!("{k}: {v}"))).collect();
    match rows.is_empty() {
        true => println!("metadata      none (`metadata` writes it)"),
        false => {
            println!("metadata      {}", rows[0]);
            rows[1..].iter().for_each(|r| println!("              {r}"));
        }
    }
}
