//! What a component says about itself, in the standard `wasm-metadata` custom sections
//! (what `wasm-tools metadata add` writes and `wkg` reads): name, version, description,
//! license (SPDX), authors, source URL, homepage, revision. Pushed, they become the
//! manifest's `org.opencontainers.image.*` annotations.

use crate::Error;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use wasm_metadata::{AddMetadata, AddMetadataField, Payload};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    pub name: Option<String>,
    pub version: Option<String>,
    pub description: Option<String>,
    /// An SPDX license expression.
    pub license: Option<String>,
    pub authors: Option<String>,
    pub source: Option<String>,
    pub homepage: Option<String>,
    pub revision: Option<String>,
}

/// The fields a shared component should have; `check` warns about each one missing.
pub const EXPECTED: [&str; 5] = ["name", "version", "description", "license", "source"];

impl Metadata {
    /// The outermost component's (or module's) metadata.
    pub fn read(bytes: &[u8]) -> Result<Self, Error> {
        let payload =
            Payload::from_binary(bytes).map_err(|e| Error::Other(format!("reading the metadata sections: {e:#}")))?;
        let m = payload.metadata();
        let text = |v: Option<String>| v.filter(|s| !s.is_empty());
        Ok(Self {
            name: text(m.name.clone()),
            version: text(m.version.as_ref().map(|v| v.to_string())),
            description: text(m.description.as_ref().map(|v| v.to_string())),
            license: text(m.licenses.as_ref().map(|v| v.to_string())),
            authors: text(m.authors.as_ref().map(|v| v.to_string())),
            source: text(m.source.as_ref().map(|v| v.to_string())),
            homepage: text(m.homepage.as_ref().map(|v| v.to_string())),
            revision: text(m.revision.as_ref().map(|v| v.to_string())),
        })
    }

    /// The expected fields this one lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        let have = [&self.name, &self.version, &self.description, &self.license, &self.source];
        EXPECTED.iter().zip(have).filter(|(_, v)| v.is_none()).map(|(k, _)| *k).collect()
    }

    /// `bytes` with these fields set (fields left `None` keep what the component had).
    /// The version must be semver and the license SPDX, as the registries' tools expect.
    pub fn embed(&self, bytes: &[u8]) -> Result<Vec<u8>, Error> {
        let bad = |field: &str, e: &dyn std::fmt::Display| Error::Other(format!("metadata {field}: {e}"));
        if let Some(v) = &self.version {
            semver::Version::parse(v).map_err(|e| bad("version", &format!("{v:?} is not semver ({e})")))?;
        }
        fn set<T: std::fmt::Debug + Clone>(v: Option<T>) -> AddMetadataField<T> {
            v.map_or(AddMetadataField::Keep, AddMetadataField::Set)
        }
        let mut add = AddMetadata::default();
        add.name = set(self.name.clone());
        add.version = set(self.version.as_deref().map(|v| wasm_metadata::Version::new(v.to_string())));
        add.description = set(self.description.as_deref().map(|v| wasm_metadata::Description::new(v.to_string())));
        add.authors = set(self.authors.as_deref().map(|v| wasm_metadata::Authors::new(v.to_string())));
        add.revision = set(self.revision.as_deref().map(|v| wasm_metadata::Revision::new(v.to_string())));
        add.licenses = set(self
            .license
            .as_deref()
            .map(wasm_metadata::Licenses::new)
            .transpose()
            .map_err(|e| bad("license", &e))?);
        add.source =
            set(self.source.as_deref().map(wasm_metadata::Source::new).transpose().map_err(|e| bad("source", &e))?);
        add.homepage = set(self
            .homepage
            .as_deref()
            .map(wasm_metadata::Homepage::new)
            .transpose()
            .map_err(|e| bad("homepage", &e))?);
        add.to_wasm(bytes).map_err(|e| Error::Other(format!("writing the metadata sections: {e:#}")))
    }

    /// The manifest annotations a registry shows (`org.opencontainers.image.*`).
    pub fn annotations(&self) -> BTreeMap<String, String> {
        let fields = [
            ("title", &self.name),
            ("version", &self.version),
            ("description", &self.description),
            ("licenses", &self.license),
            ("authors", &self.authors),
            ("source", &self.source),
            ("url", &self.homepage),
            ("revision", &self.revision),
        ];
        fields
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (format!("org.opencontainers.image.{k}"), v.clone())))
            .collect()
    }

    /// `(field, value)` rows for display, the expected ones first.
    pub fn rows(&self) -> Vec<(&'static str, Option<&str>)> {
        vec![
            ("name", self.name.as_deref()),
            ("version", self.version.as_deref()),
            ("description", self.description.as_deref()),
            ("license", self.license.as_deref()),
            ("source", self.source.as_deref()),
            ("authors", self.authors.as_deref()),
            ("homepage", self.homepage.as_deref()),
            ("revision", self.revision.as_deref()),
        ]
    }

    /// The fields of a package manifest the language already has: `Cargo.toml`'s
    /// `[package]` (workspace-inherited fields looked up), `pyproject.toml`'s `[project]`,
    /// `package.json`; any other TOML file with a `[package]` table (the C template's).
    pub fn from_package_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
        let is_json = path.extension().is_some_and(|e| e == "json");
        let parsed = match is_json {
            true => crate::metadata_files::package_json(&text),
            false => crate::metadata_files::toml_package(&text, path),
        };
        parsed.map_err(|why| Error::file(path, why))
    }
}
