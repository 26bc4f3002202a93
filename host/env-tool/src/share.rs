//! Sharing components through OCI registries: `push`, `pull`, `keygen`, `metadata`, and the
//! trust flags every command that loads a plugin honours.

use anyhow::{Context, Result, bail};
use clap::Args;
use std::io::Read;
use std::path::{Path, PathBuf};
use vagen_registry::metadata::Metadata;
use vagen_registry::{Credentials, OciRef, Signer, Trust};

/// Which components from registries to accept; given on the command line, each falls back
/// to `[plugins]` in `~/.config/vagen/config.toml`.
#[derive(Args, Clone, Debug, Default)]
pub struct TrustArgs {
    /// A cosign public key (`cosign.pub`): an `oci://` component signed by another key is
    /// refused.
    #[arg(long, global = true, value_name = "FILE")]
    pub verify_key: Option<PathBuf>,
    /// Refuse an `oci://` component with no signature by the --verify-key key.
    #[arg(long, global = true)]
    pub require_signed: bool,
}

impl TrustArgs {
    /// Sets the process's trust for every `oci://` load (once, before any command runs).
    pub fn apply(self) {
        vagen_registry::set_trust(Trust { verify_key: self.verify_key, require_signed: self.require_signed });
    }
}

/// Registry credentials for a push or pull: `--username` with the password (or token) read
/// from stdin or a named variable; without them, the user's `docker login`.
#[derive(Args, Clone, Debug, Default)]
pub struct LoginArgs {
    #[arg(long)]
    pub username: Option<String>,
    /// Read the password from stdin (one line).
    #[arg(long, requires = "username", conflicts_with = "password_env")]
    pub password_stdin: bool,
    /// The environment variable holding the password.
    #[arg(long, requires = "username", value_name = "NAME")]
    pub password_env: Option<String>,
}

impl LoginArgs {
    pub fn credentials(&self) -> Result<Credentials> {
        let Some(username) = &self.username else {
            return Ok(Credentials::DockerConfig);
        };
        let password = match (&self.password_env, self.password_stdin) {
            (Some(name), _) => std::env::var(name).with_context(|| format!("--password-env {name}: not set"))?,
            (None, true) => {
                let mut line = String::new();
                std::io::stdin().read_to_string(&mut line).context("reading the password from stdin")?;
                line.trim_end_matches(['\n', '\r']).to_string()
            }
            (None, false) => bail!("--username needs the password: --password-stdin or --password-env NAME"),
        };
        Ok(Credentials::Basic { username: username.clone(), password })
    }
}

#[derive(Args)]
pub struct PushArgs {
    /// The component (`.wasm`).
    file: PathBuf,
    /// Where: `oci://REGISTRY/REPOSITORY:TAG`.
    target: String,
    /// Sign it with this cosign private key (`keygen`, or `cosign generate-key-pair`); its
    /// password from COSIGN_PASSWORD (empty when unset).
    #[arg(long, value_name = "FILE")]
    sign_key: Option<PathBuf>,
    #[command(flatten)]
    login: LoginArgs,
}

pub fn push(a: PushArgs) -> Result<()> {
    let target = OciRef::parse(&a.target)?;
    let signer = a.sign_key.as_deref().map(|k| Signer::from_file(k, cosign_password().as_bytes())).transpose()?;
    let pushed = vagen_registry::push(&a.file, &target, &a.login.credentials()?, signer.as_ref())?;
    let missing = pushed.metadata.missing();
    if !missing.is_empty() {
        eprintln!("warning: {} has no {} in its metadata (see `metadata`)", a.file.display(), missing.join(", "));
    }
    println!("pushed      {}", pushed.reference);
    println!("component   {}", pushed.component);
    println!("signed      {}", if pushed.signed { "yes" } else { "no" });
    Ok(())
}

#[derive(Args)]
pub struct PullArgs {
    /// `oci://REGISTRY/REPOSITORY:TAG` or `…@sha256:HEX`.
    reference: String,
    /// Also copy the component here.
    #[arg(short, long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    login: LoginArgs,
}

pub fn pull(a: PullArgs) -> Result<()> {
    let r = OciRef::parse(&a.reference)?;
    let fetched = vagen_registry::fetch(&r, &a.login.credentials()?, &vagen_registry::trust()?)?;
    println!("pulled      {}", fetched.reference);
    println!("component   {}", fetched.component);
    println!("cached at   {}", fetched.path.display());
    match &fetched.verified_with {
        Some(key) => println!("signature   verified with {}", key.display()),
        None => println!("signature   not checked (--verify-key FILE checks it)"),
    }
    if let Some(out) = &a.out {
        std::fs::copy(&fetched.path, out).with_context(|| format!("copying to {}", out.display()))?;
        println!("wrote       {}", out.display());
    }
    Ok(())
}

#[derive(Args)]
pub struct KeygenArgs {
    /// Folder for `cosign.key` (private, encrypted with COSIGN_PASSWORD) and `cosign.pub`.
    #[arg(long, default_value = ".")]
    out_dir: PathBuf,
}

pub fn keygen(a: KeygenArgs) -> Result<()> {
    let (private, public) = (a.out_dir.join("cosign.key"), a.out_dir.join("cosign.pub"));
    for p in [&private, &public] {
        if p.exists() {
            bail!("{} exists: keygen never replaces a key", p.display());
        }
    }
    let pair = vagen_registry::generate_key_pair(cosign_password().as_bytes())?;
    std::fs::create_dir_all(&a.out_dir)?;
    write_private(&private, &pair.private_pem)?;
    std::fs::write(&public, &pair.public_pem).with_context(|| format!("writing {}", public.display()))?;
    println!("private key {} (push --sign-key)", private.display());
    println!(
        "public key  {} (--verify-key, or verify_key in [plugins] of ~/.config/vagen/config.toml)",
        public.display()
    );
    Ok(())
}

fn write_private(path: &Path, pem: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(pem.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// cosign's own variable for the private key's password.
fn cosign_password() -> String {
    std::env::var("COSIGN_PASSWORD").unwrap_or_default()
}

#[derive(Args)]
pub struct MetadataArgs {
    /// The component to write the metadata into (in place, unless --out).
    file: PathBuf,
    /// Take the fields from the package manifest: Cargo.toml (`[package]`), pyproject.toml
    /// (`[project]`), package.json, or any TOML file with a `[package]` table.
    #[arg(long, value_name = "FILE")]
    from: Option<PathBuf>,
    #[arg(long)]
    name: Option<String>,
    /// Semver.
    #[arg(long)]
    version: Option<String>,
    #[arg(long)]
    description: Option<String>,
    /// An SPDX expression (`Apache-2.0`, `MIT OR Apache-2.0`).
    #[arg(long)]
    license: Option<String>,
    #[arg(long)]
    authors: Option<String>,
    /// The source repository's URL.
    #[arg(long)]
    source: Option<String>,
    #[arg(long)]
    homepage: Option<String>,
    /// The source revision (a commit).
    #[arg(long)]
    revision: Option<String>,
    #[arg(short, long)]
    out: Option<PathBuf>,
}

/// Embeds the standard metadata sections; the flags override what `--from` gives.
pub fn metadata(a: MetadataArgs) -> Result<()> {
    let base = match &a.from {
        Some(f) => Metadata::from_package_file(f)?,
        None => Metadata::default(),
    };
    let pick = |flag: Option<String>, file: Option<String>| flag.or(file);
    let m = Metadata {
        name: pick(a.name, base.name),
        version: pick(a.version, base.version),
        description: pick(a.description, base.description),
        license: pick(a.license, base.license),
        authors: pick(a.authors, base.authors),
        source: pick(a.source, base.source),
        homepage: pick(a.homepage, base.homepage),
        revision: pick(a.revision, base.revision),
    };
    let bytes = std::fs::read(&a.file).with_context(|| format!("reading {}", a.file.display()))?;
    let out_bytes = m.embed(&bytes).with_context(|| a.file.display().to_string())?;
    let out = a.out.unwrap_or_else(|| a.file.clone());
    let tmp = out.with_extension("wasm.tmp");
    std::fs::write(&tmp, out_bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("writing {}", out.display()))?;
    let missing = Metadata::read(&std::fs::read(&out)?)?.missing();
    if !missing.is_empty() {
        eprintln!("warning: {} has no {} in its metadata", out.display(), missing.join(", "));
    }
    Ok(())
}

/// A loaded component's metadata, from the file it was loaded from (for an `oci://` name,
/// the cached file), for `inspect` and `check`.
pub fn read_metadata(file: &Path) -> Result<Metadata> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    Ok(Metadata::read(&bytes)?)
}
