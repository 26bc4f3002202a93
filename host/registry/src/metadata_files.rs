//! The package manifests `Metadata::from_package_file` reads.

use crate::metadata::Metadata;
use std::path::Path;

pub(crate) fn package_json(text: &str) -> Result<Metadata, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    // `author` and `repository` are a string or an object (npm's package.json).
    let author = v
        .get("author")
        .and_then(|a| a.as_str().map(str::to_string).or_else(|| a.get("name")?.as_str().map(str::to_string)));
    let repo = v
        .get("repository")
        .and_then(|r| r.as_str().map(str::to_string).or_else(|| r.get("url")?.as_str().map(str::to_string)));
    Ok(Metadata {
        name: s("name"),
        version: s("version"),
        description: s("description"),
        license: s("license"),
        authors: author,
        source: repo.map(|r| r.trim_start_matches("git+").to_string()),
        homepage: s("homepage"),
        revision: None,
    })
}

pub(crate) fn toml_package(text: &str, path: &Path) -> Result<Metadata, String> {
    let doc: toml::Table = toml::from_str(text).map_err(|e| format!("not TOML: {e}"))?;
    if let Some(project) = doc.get("project").and_then(|p| p.as_table()) {
        return Ok(pyproject(project));
    }
    let package = doc.get("package").and_then(|p| p.as_table()).ok_or("it has neither [package] nor [project]")?;
    let mut workspace = None;
    let mut field = |k: &str| -> Result<Option<toml::Value>, String> {
        match package.get(k) {
            Some(toml::Value::Table(t)) if t.get("workspace").and_then(|w| w.as_bool()) == Some(true) => {
                if workspace.is_none() {
                    workspace = Some(workspace_package(path)?);
                }
                Ok(workspace.as_ref().and_then(|w: &toml::Table| w.get(k).cloned()))
            }
            other => Ok(other.cloned()),
        }
    };
    let text = |v: Option<toml::Value>| v.and_then(|v| v.as_str().map(str::to_string));
    let authors = field("authors")?
        .and_then(|a| a.as_array().map(|a| join(a.iter().filter_map(|x| x.as_str()))))
        .filter(|s| !s.is_empty());
    Ok(Metadata {
        name: text(field("name")?),
        version: text(field("version")?),
        description: text(field("description")?),
        license: text(field("license")?),
        authors,
        source: text(field("repository")?),
        homepage: text(field("homepage")?),
        revision: None,
    })
}

fn pyproject(p: &toml::Table) -> Metadata {
    let s = |k: &str| p.get(k).and_then(|x| x.as_str()).map(str::to_string);
    // PEP 621: `license` is an SPDX string or `{ text = ... }`; authors are `{ name, email }`.
    let license = p
        .get("license")
        .and_then(|l| l.as_str().map(str::to_string).or_else(|| l.get("text")?.as_str().map(str::to_string)));
    let authors =
        p.get("authors").and_then(|a| a.as_array()).map(|a| join(a.iter().filter_map(|x| x.get("name")?.as_str())));
    let url = |keys: &[&str]| {
        let urls = p.get("urls")?.as_table()?;
        keys.iter().find_map(|k| urls.get(*k)?.as_str().map(str::to_string))
    };
    Metadata {
        name: s("name"),
        version: s("version"),
        description: s("description"),
        license,
        authors: authors.filter(|s| !s.is_empty()),
        source: url(&["Source", "Repository", "source", "repository"]),
        homepage: url(&["Homepage", "homepage"]),
        revision: None,
    }
}

fn join<'a>(items: impl Iterator<Item = &'a str>) -> String {
    items.collect::<Vec<_>>().join(", ")
}

/// `[workspace.package]` of the nearest Cargo.toml above `path` that has one.
fn workspace_package(path: &Path) -> Result<toml::Table, String> {
    let start = path.canonicalize().map_err(|e| e.to_string())?;
    for dir in start.ancestors().skip(2) {
        let candidate = dir.join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&candidate) else { continue };
        let doc: toml::Table = toml::from_str(&text).map_err(|e| format!("{}: {e}", candidate.display()))?;
        if let Some(p) = doc.get("workspace").and_then(|w| w.get("package")).and_then(|p| p.as_table()) {
            return Ok(p.clone());
        }
    }
    Err("it inherits fields from a workspace, and no Cargo.toml above it has [workspace.package]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_manifest_gives_the_same_fields() {
        let cargo = "[package]\nname = \"maze\"\nversion = \"1.2.0\"\ndescription = \"d\"\nlicense = \"MIT\"\nauthors = [\"A <a@x>\", \"B\"]\nrepository = \"https://x/maze\"\n";
        let py = "[project]\nname = \"maze\"\nversion = \"1.2.0\"\ndescription = \"d\"\nlicense = { text = \"MIT\" }\nauthors = [{ name = \"A <a@x>\" }, { name = \"B\" }]\n[project.urls]\nSource = \"https://x/maze\"\n";
        let js = r#"{"name":"maze","version":"1.2.0","description":"d","license":"MIT","author":{"name":"A <a@x>, B"},"repository":{"type":"git","url":"git+https://x/maze"}}"#;
        let a = toml_package(cargo, Path::new("Cargo.toml")).unwrap();
        assert_eq!(a, toml_package(py, Path::new("pyproject.toml")).unwrap());
        assert_eq!(a, package_json(js).unwrap());
        assert_eq!((a.authors.as_deref(), a.source.as_deref()), (Some("A <a@x>, B"), Some("https://x/maze")));
        assert!(toml_package("[x]\n", Path::new("a.toml")).unwrap_err().contains("neither"));
    }
}
