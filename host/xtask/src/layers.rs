//! `cargo xtask layers`: the house rules a reader relies on, checked on every test run.
//!
//! - The modules of `host/trainer/src` and `host/model/src` import each other in one
//!   direction: no circle in the graph of `crate::` paths between top-level modules (a folder
//!   module is one node; names re-exported by `lib.rs` count as their defining module, so a
//!   re-export cannot hide an edge; `#[cfg(test)] mod tests` blocks and comments are left out).
//! - No function in `host/` is longer than [`MAX_FN_LINES`] lines, from its `fn` line to its
//!   closing brace.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::read_dir_sorted;

/// The crates whose module graph must have no circle.
const LAYERED: [&str; 2] = ["host/trainer/src", "host/model/src"];
pub const MAX_FN_LINES: usize = 80;

pub fn check(root: &Path) -> Result<(), String> {
    let mut problems = Vec::new();
    for src in LAYERED {
        let graph = module_graph(&root.join(src))?;
        for circle in circles(&graph) {
            let edges: Vec<String> = circle
                .iter()
                .map(|m| {
                    let within: Vec<&str> =
                        graph[m].iter().filter(|d| circle.contains(*d)).map(String::as_str).collect();
                    format!("{m} -> {}", within.join(", "))
                })
                .collect();
            problems.push(format!("{src}: modules import each other in a circle: {}", edges.join("; ")));
        }
    }
    for (file, line, name, len) in long_functions(&root.join("host"))? {
        let file = file.strip_prefix(root).unwrap_or(&file).display().to_string();
        problems.push(format!("{file}:{line}: fn {name} is {len} lines (at most {MAX_FN_LINES})"));
    }
    if problems.is_empty() {
        eprintln!("layers: no import circle in {}; no function over {MAX_FN_LINES} lines in host/", LAYERED.join(", "));
        Ok(())
    } else {
        Err(format!("layers:\n  {}", problems.join("\n  ")))
    }
}

/// Top-level module -> the top-level modules its code names through `crate::`.
fn module_graph(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let mut files: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in read_dir_sorted(src)? {
        let name = entry.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if entry.is_dir() {
            files.insert(name, rust_files(&entry)?);
        } else if let Some(module) = name.strip_suffix(".rs")
            && module != "lib"
            && module != "main"
        {
            files.entry(module.to_string()).or_default().push(entry);
        }
    }
    let lib =
        std::fs::read_to_string(src.join("lib.rs")).map_err(|e| format!("reading {}/lib.rs: {e}", src.display()))?;
    let reexports = reexports(&lib);
    let mut graph = BTreeMap::new();
    for (module, paths) in &files {
        let mut deps = BTreeSet::new();
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            for first in crate_paths(&code_only(&text)) {
                let target = if files.contains_key(&first) { Some(first) } else { reexports.get(&first).cloned() };
                if let Some(t) = target.filter(|t| t != module) {
                    deps.insert(t);
                }
            }
        }
        graph.insert(module.clone(), deps);
    }
    Ok(graph)
}

/// `pub use module::{A, B as C};` in lib.rs: each name it makes -> `module`.
fn reexports(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in code_only(lib).split(';') {
        let stmt = stmt.trim();
        let Some(path) = stmt.strip_prefix("pub use ").or_else(|| stmt.strip_prefix("pub(crate) use ")) else {
            continue;
        };
        let path = path.trim_start_matches("crate::").trim_start_matches("self::");
        let Some((module, rest)) = path.split_once("::") else { continue };
        for item in split_group(rest) {
            let last = item.rsplit(" as ").next().unwrap_or(&item).rsplit("::").next().unwrap_or("").trim().to_string();
            if !last.is_empty() {
                names.insert(last, module.trim().to_string());
            }
        }
    }
    names
}

/// The first segment after every `crate::` (each element of a `crate::{a, b::c}` group).
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        // `vagen_model::crate::` does not occur; `$crate::` in macros names this crate too.
        rest = &rest[i + "crate::".len()..];
        if rest.starts_with('{') {
            let end = matching_brace(rest).unwrap_or(rest.len());
            out.extend(split_group(&rest[..end]).iter().map(|item| first_segment(item)));
        } else {
            out.push(first_segment(rest));
        }
    }
    out.retain(|s| !s.is_empty() && s != "self");
    out
}

fn first_segment(path: &str) -> String {
    path.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

/// `{a, b::{c, d}, e as f}` -> `a`, `b::{c, d}`, `e as f` (a bare name -> itself).
fn split_group(group: &str) -> Vec<String> {
    let group = group.trim();
    let Some(inner) = group.strip_prefix('{') else {
        return vec![group.to_string()];
    };
    let inner = inner.strip_suffix('}').unwrap_or(inner);
    let (mut items, mut depth, mut current) = (Vec::new(), 0, String::new());
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current).trim().to_string());
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current.trim().to_string());
    items.retain(|i| !i.is_empty());
    items
}

/// The index just past the brace that closes the one `text` starts with.
fn matching_brace(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// `text` without `//` comments and without `#[cfg(test)]` blocks.
fn code_only(text: &str) -> String {
    let mut out = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut test_next = false;
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        if let Some(depth) = skip_depth.as_mut() {
            *depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
            if *depth <= 0 && code.contains('}') {
                skip_depth = None;
            }
            continue;
        }
        if code.trim() == "#[cfg(test)]" {
            test_next = true;
            continue;
        }
        if test_next {
            test_next = false;
            let depth = code.matches('{').count() as i32 - code.matches('}').count() as i32;
            if depth > 0 {
                skip_depth = Some(depth);
            }
            continue;
        }
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every circle (strongly connected component of two or more modules), Tarjan's way.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            for w in self.graph.get(v).into_iter().flatten() {
                let w = w.as_str();
                if !self.graph.contains_key(w) {
                    continue;
                }
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.stack.contains(&w) {
                    let iw = self.index[w];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in graph.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v);
        }
    }
    walk.found
}

/// (file, line, name, length) of every function over [`MAX_FN_LINES`] under `dir`.
fn long_functions(dir: &Path) -> Result<Vec<(PathBuf, usize, String, usize)>, String> {
    let mut found = Vec::new();
    for file in rust_files(dir)? {
        let text = std::fs::read_to_string(&file).map_err(|e| format!("reading {}: {e}", file.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(name) = fn_name(line) else { continue };
            let indent = &line[..line.len() - line.trim_start().len()];
            let close = format!("{indent}}}");
            if let Some(end) = lines[i + 1..].iter().position(|l| l.trim_end() == close) {
                let len = end + 2;
                if len > MAX_FN_LINES {
                    found.push((file.clone(), i + 1, name, len));
                }
            }
        }
    }
    Ok(found)
}

/// The name of the function a line starts (with a body on later lines), if it does.
fn fn_name(line: &str) -> Option<String> {
    let code = line.split("//").next().unwrap_or("").trim_end();
    if code.ends_with(';') || code.ends_with('}') {
        return None;
    }
    let mut words = code.split_whitespace().peekable();
    while let Some(w) = words.peek() {
        let qualifier = w.starts_with("pub") || ["async", "unsafe", "const", "extern", "\"C\"", "default"].contains(w);
        if !qualifier {
            break;
        }
        words.next();
    }
    if words.next() != Some("fn") {
        return None;
    }
    words.next().map(|n| n.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect())
}

/// `.rs` files under `dir`, leaving out build output.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for path in read_dir_sorted(dir)? {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                files.extend(rust_files(&path)?);
            }
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(edges: &[(&str, &[&str])]) -> BTreeMap<String, BTreeSet<String>> {
        edges.iter().map(|(m, d)| (m.to_string(), d.iter().map(|s| s.to_string()).collect())).collect()
    }

    #[test]
    fn finds_a_circle_and_only_that() {
        let g = graph(&[("a", &["b"]), ("b", &["c"]), ("c", &["a"]), ("d", &["a"])]);
        assert_eq!(circles(&g), vec![vec!["a".to_string(), "b".into(), "c".into()]]);
        assert!(circles(&graph(&[("a", &["b"]), ("b", &[]), ("c", &["a", "b"])])).is_empty());
    }

    #[test]
    fn reads_paths_groups_and_reexports() {
        let code = "use crate::collect::Collected;\nuse crate::{config::X, Trainer};\nlet x = crate::scalar(t);";
        assert_eq!(crate_paths(code), ["collect", "config", "Trainer", "scalar"]);
        let lib = "mod train;\npub use train::{Trainer, load_model as load};\npub use config::TrainConfig;";
        let r = reexports(lib);
        assert_eq!(r["Trainer"], "train");
        assert_eq!(r["load"], "train");
        assert_eq!(r["TrainConfig"], "config");
    }

    #[test]
    fn leaves_out_comments_and_test_blocks() {
        let text = "use crate::a::X; // crate::b\n/// [`crate::c`]\n#[cfg(test)]\nmod tests {\n    use crate::d;\n    fn f() {\n    }\n}\nuse crate::e;";
        assert_eq!(crate_paths(&code_only(text)), ["a", "e"]);
    }

    #[test]
    fn names_functions_with_bodies() {
        assert_eq!(fn_name("    pub(crate) async fn run(&self) -> Result<()> {").as_deref(), Some("run"));
        assert_eq!(fn_name("fn f<T>(x: T)").as_deref(), Some("f"));
        assert_eq!(fn_name("    fn decl(&self);"), None);
        assert_eq!(fn_name("    fn one() { 1 }"), None);
        assert_eq!(fn_name("    let fn_ptr = 3;"), None);
    }
}
