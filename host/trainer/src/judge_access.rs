//! What an `openai` judge may reach and which secret it may send: the user's to say (the
//! command line, or `~/.config/vagen/judge.toml`), never a run's config, which may come from
//! someone else and could otherwise send any environment variable to any host.

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Hosts a judge may reach beyond this machine's loopback, and the environment variable
/// holding the API key sent to them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JudgeAccess {
    /// `None`: no key is sent.
    pub key_env: Option<String>,
    pub hosts: Vec<String>,
}

/// `judge.toml` in the user's config folder: `api_key_env = "NAME"`, `hosts = ["..."]`.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UserFile {
    api_key_env: Option<String>,
    #[serde(default)]
    hosts: Vec<String>,
}

impl JudgeAccess {
    /// The user file (`$XDG_CONFIG_HOME/vagen/judge.toml`, else `~/.config/vagen/judge.toml`),
    /// with the command line's key variable over its one and its hosts added.
    pub fn from_user(key_env: Option<String>, hosts: Vec<String>) -> Result<Self> {
        let mut access = match user_file() {
            Some(path) if path.is_file() => {
                let f = read_user_file(&path)?;
                JudgeAccess { key_env: f.api_key_env, hosts: f.hosts }
            }
            _ => JudgeAccess::default(),
        };
        if key_env.is_some() {
            access.key_env = key_env;
        }
        access.hosts.extend(hosts);
        Ok(access)
    }

    /// Refuses a judge URL whose host is neither loopback nor allowed.
    pub fn check(&self, url: &str) -> Result<()> {
        let host = host_of(url).with_context(|| format!("judge.url {url:?}"))?;
        if is_loopback(&host) || self.hosts.iter().any(|h| h.eq_ignore_ascii_case(&host)) {
            return Ok(());
        }
        bail!(
            "judge.url {url:?}: host {host:?} is not one a judge may reach; allow it with `--judge-host {host}` \
             (or `hosts` in ~/.config/vagen/judge.toml): a run's config alone cannot send requests off this machine"
        )
    }

    /// The API key, from the variable the user named (never a config's).
    pub fn key(&self) -> Option<String> {
        self.key_env.as_ref().and_then(|name| std::env::var(name).ok()).filter(|k| !k.is_empty())
    }
}

/// The user file, trusted only when no one but its owner (this user) can have written it or
/// swapped it: neither it nor its folder writable by group or others, both owned by this
/// user, as ssh treats `~/.ssh/config` (a writable file could name any host and key).
fn read_user_file(path: &Path) -> Result<UserFile> {
    use std::os::unix::fs::MetadataExt;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    let folder = path.parent().unwrap_or(Path::new("."));
    for p in [path, folder] {
        let m = std::fs::metadata(p).with_context(|| format!("reading {}", p.display()))?;
        let mode = m.mode() & 0o777;
        if mode & 0o022 != 0 {
            bail!(
                "{}: mode {mode:03o} lets others than its owner write it, so it cannot say which hosts and key a \
                 judge may use; `chmod go-w {}` (as ssh requires of its config)",
                p.display(),
                p.display()
            );
        }
        if me.is_some_and(|me| m.uid() != me && m.uid() != 0) {
            bail!("{}: owned by user {}, not by you; a judge trusts only your own file", p.display(), m.uid());
        }
    }
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("reading {}", path.display()))
}

fn user_file() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("vagen").join("judge.toml"))
}

/// The host of an `http(s)://` URL, lower-cased, without user info, port or brackets.
fn host_of(url: &str) -> Result<String> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .context("not an http:// or https:// URL")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    if host.is_empty() {
        bail!("no host");
    }
    Ok(host.to_ascii_lowercase())
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_read_from_urls_and_only_loopback_or_allowed_ones_pass() {
        for (url, host) in [
            ("http://127.0.0.1:8000/v1", "127.0.0.1"),
            ("https://API.example.com/v1", "api.example.com"),
            ("http://user:pw@evil.test:80/v1", "evil.test"),
            ("http://[::1]:9/v1", "::1"),
            ("http://localhost", "localhost"),
        ] {
            assert_eq!(host_of(url).unwrap(), host, "{url}");
        }
        assert!(host_of("ftp://x").is_err() && host_of("http:///v1").is_err());
        let none = JudgeAccess::default();
        assert!(none.check("http://127.0.0.1:8000/v1").is_ok() && none.check("http://[::1]/v1").is_ok());
        let err = none.check("http://127.0.0.1.evil.test/v1").unwrap_err().to_string();
        assert!(err.contains("--judge-host 127.0.0.1.evil.test"), "{err}");
        let some = JudgeAccess { key_env: None, hosts: vec!["api.example.com".into()] };
        assert!(some.check("https://api.example.com/v1").is_ok());
        assert!(some.check("https://api.example.com.evil.test/v1").is_err());
    }

    #[test]
    fn a_user_file_others_can_write_is_refused_naming_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("vagen");
        std::fs::create_dir(&folder).unwrap();
        let file = folder.join("judge.toml");
        std::fs::write(&file, "api_key_env = \"K\"\nhosts = [\"api.example.com\"]\n").unwrap();
        let set = |p: &Path, mode: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        set(&folder, 0o755);
        set(&file, 0o644);
        assert_eq!(read_user_file(&file).unwrap().hosts, ["api.example.com"]);
        set(&file, 0o666);
        let e = read_user_file(&file).unwrap_err().to_string();
        assert!(e.contains("mode 666") && e.contains("chmod go-w"), "{e}");
        set(&file, 0o600);
        set(&folder, 0o777);
        let e = read_user_file(&file).unwrap_err().to_string();
        assert!(e.contains("mode 777") && e.contains(&folder.display().to_string()), "{e}");
    }
}
