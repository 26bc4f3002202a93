//! Each SDK's API reference lists every public item, and only those: the Python, JavaScript
//! and C references (their README's "API" section) against the module's or header's
//! exports, both ways; the Rust SDK's reference is its rustdoc, complete because the crates
//! deny `missing_docs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// What the README's API section says: the identifier each bullet starts with (after a
/// `class `, `static ` or `struct ` and a `Class.` prefix), and the whole section's text.
fn reference(path: &str) -> (BTreeSet<String>, String) {
    let text = read(path);
    let at = text.find("\n## API").unwrap_or_else(|| panic!("{path} has no \"## API\" section"));
    let section = &text[at..];
    let mut items = BTreeSet::new();
    for line in section.lines() {
        let Some(rest) = line.trim_start().strip_prefix("- `") else { continue };
        let rest = ["class ", "static ", "struct "].iter().fold(rest, |r, p| r.strip_prefix(p).unwrap_or(r));
        let mut name = ident(rest);
        if let Some(member) = rest[name.len()..].strip_prefix('.') {
            name = ident(member);
        }
        items.insert(name);
    }
    (items, section.to_string())
}

/// Top-level items must each have a bullet; members need only be named in the section
/// (`` `name( `` or `` `Class.name ``); every bullet must name a top-level item or member.
fn compare(sdk: &str, path: &str, top: &BTreeSet<String>, members: &BTreeSet<(String, String)>) {
    let (bullets, section) = reference(path);
    let missing: Vec<&String> = top.iter().filter(|n| !bullets.contains(*n)).collect();
    assert!(missing.is_empty(), "{path} has no line for these {sdk} exports: {missing:?}");
    let unnamed: Vec<String> = members
        .iter()
        .filter(|(class, m)| {
            ![format!("`{m}("), format!("`static {m}("), format!("`{class}.{m}")].iter().any(|n| section.contains(n))
        })
        .map(|(class, m)| format!("{class}.{m}"))
        .collect();
    assert!(unnamed.is_empty(), "{path} does not describe these {sdk} methods: {unnamed:?}");
    let known: BTreeSet<&String> = top.iter().chain(members.iter().map(|(_, m)| m)).collect();
    let stale: Vec<&String> = bullets.iter().filter(|b| !known.contains(b) && !is_member_word(b)).collect();
    assert!(stale.is_empty(), "{path} lists what the {sdk} SDK does not export: {stale:?}");
}

/// Class attributes and constructors, which the bullets may name though no method list has
/// them.
fn is_member_word(name: &str) -> bool {
    matches!(name, "NAME" | "VERSION" | "DESCRIPTION" | "DEFAULT_CONFIG" | "PRESETS" | "constructor" | "__init__")
}

#[test]
fn the_python_reference_lists_every_public_name_of_vagen_py() {
    let script = r#"
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for n in tree.body:
    if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and not n.name.startswith("_"):
        print("top", n.name)
        if isinstance(n, ast.ClassDef):
            for m in n.body:
                if isinstance(m, ast.FunctionDef) and not m.name.startswith("_"):
                    print("member", n.name, m.name)
    elif isinstance(n, ast.Assign):
        for t in n.targets:
            if isinstance(t, ast.Name) and not t.id.startswith("_"):
                print("top", t.id)
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(root().join("sdk/python/vagen.py")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (mut top, mut members) = (BTreeSet::new(), BTreeSet::new());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        match line.split(' ').collect::<Vec<_>>()[..] {
            ["top", name] => _ = top.insert(name.to_string()),
            ["member", class, name] => _ = members.insert((class.to_string(), name.to_string())),
            _ => panic!("{line}"),
        }
    }
    assert!(top.contains("ActionSpec") && members.contains(&("Reward".into(), "score".into())));
    compare("Python", "sdk/python/README.md", &top, &members);
}

#[test]
fn the_javascript_reference_lists_every_export_of_vagen_js() {
    let source = read("sdk/js/vagen.js");
    let (mut top, mut members) = (BTreeSet::new(), BTreeSet::new());
    let mut class: Option<String> = None;
    for line in source.lines() {
        if let Some(rest) = line.strip_prefix("export ") {
            let rest = ["class ", "function ", "const "].iter().fold(rest, |r, p| r.strip_prefix(p).unwrap_or(r));
            let name = ident(rest);
            class = line.starts_with("export class ").then(|| name.clone()).filter(|_| line.ends_with('{'));
            top.insert(name);
        } else if line == "}" {
            class = None;
        } else if let Some(c) = &class
            && let Some(body) = line.strip_prefix("  ")
            && !body.starts_with(' ')
        {
            let name = ident(body.strip_prefix("static ").unwrap_or(body));
            let is_method = body[body.find(&name).unwrap_or(0) + name.len()..].starts_with('(');
            if is_method && !name.is_empty() && name != "constructor" && !name.starts_with('_') {
                members.insert((c.clone(), name));
            }
        }
    }
    assert!(top.contains("ActionSpec") && members.contains(&("ActionSpec".into(), "parse".into())));
    compare("JavaScript", "sdk/js/README.md", &top, &members);
}

#[test]
fn the_c_reference_lists_every_declaration_of_vagen_h() {
    let header = read("sdk/c/vagen.h");
    let mut top = BTreeSet::new();
    for line in header.lines() {
        let words: Vec<&str> = line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).collect();
        if let Some(name) = line.strip_prefix("#define ").map(ident).filter(|n| n != "VAGEN_H") {
            top.insert(name);
        } else if line.starts_with("} ") || line.starts_with("typedef struct vagen_env") {
            top.extend(words.iter().rev().find(|w| w.starts_with("vagen_")).map(|w| w.to_string()));
        } else if !line.starts_with(' ') && !line.starts_with('/') && !line.starts_with('#') && line.contains('(') {
            let before = &line[..line.find('(').unwrap()];
            top.extend(before.rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().map(str::to_string));
        } else if line.starts_with("extern ") {
            top.extend(words.iter().rev().find(|w| !w.is_empty()).map(|w| w.to_string()));
        }
    }
    top.retain(|n| !n.is_empty());
    assert!(top.contains("vagen_parse_actions") && top.contains("vagen_step") && top.contains("VAGEN_MANIFEST"));
    compare("C", "sdk/c/README.md", &top, &BTreeSet::new());
}

#[test]
fn the_rust_sdk_documents_every_public_item() {
    // rustdoc is the Rust reference; these make an undocumented public item a build error.
    for lib in ["sdk/rust/src/lib.rs", "sdk/abi/src/lib.rs"] {
        assert!(read(lib).contains("#![deny(missing_docs)]"), "{lib} no longer denies missing_docs");
    }
}
