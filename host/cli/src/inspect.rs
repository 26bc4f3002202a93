use crate::limits_arg::{limits_from, load};
use anyhow::Result;
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub struct InspectArgs {
    /// The plugin file (`.wasm`).
    #[arg(long)]
    plugin: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    let plugin = load(&a.plugin, limits_from(&[])?)?;
    let (m, info) = (plugin.manifest(), plugin.info());
    if a.json {
        println!("{}", serde_json::json!({ "manifest": m, "plugin": info }));
        return Ok(());
    }
    println!("plugin        {}", info.path.display());
    println!("kind          {} (vagen:env@{})", info.kind, info.wit_version);
    println!("size          {} bytes", info.size_bytes);
    println!("sha256        {}", info.sha256);
    println!("imports       {}", if info.imports.is_empty() { "none".into() } else { info.imports.join(", ") });
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
