//! Environments written in Python, JavaScript and C: each SDK's build command turns its
//! example from source into a component (installing its toolchain on first use, into
//! the user's cache folder), and `vagen-env` (no libtorch) checks it and plays it deterministically.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn ok(o: Output, what: &str) -> String {
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{what} failed ({}):\n{out}\n{err}", o.status);
    out.into_owned()
}

fn host(cache: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vagen-env"))
        .args(args)
        .env("VAGEN_CACHE_DIR", cache)
        .output()
        .expect("vagen-env runs")
}

/// `sdk/<sdk>/build.sh <source> <out>`, with this build's vagen-env.
fn build(sdk: &str, source: &Path, out: &Path) {
    let o = Command::new("bash")
        .arg(root().join("sdk").join(sdk).join("build.sh"))
        .arg(source)
        .arg(out)
        .env("VAGEN_ENV", env!("CARGO_BIN_EXE_vagen-env"))
        .output()
        .expect("bash runs");
    ok(o, &format!("building {}", source.display()));
    assert!(out.is_file());
}

/// The growth `fuzz` counts as a leak: its default (32 MiB), but for JavaScript, whose
/// engine (StarlingMonkey) lets its heap grow to about 100 MiB before its collector holds
/// it there: an env that allocates nothing grows as fast, 34 MiB in its first 12 000
/// episodes, and a 150 s campaign of the template stays under 109 MiB (41 000 episodes);
/// see docs/writing-an-environment.md, "JavaScript".
pub fn leak_mib(sdk: &str) -> &'static str {
    if sdk == "js" { "128" } else { "32" }
}

/// Copies the files and folders in `from` into `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// The payload of a component's top-level custom section `name`, if it has one.
fn custom_section<'a>(wasm: &'a [u8], name: &str) -> Option<&'a [u8]> {
    fn leb(bytes: &[u8], at: &mut usize) -> usize {
        let (mut value, mut shift) = (0, 0);
        loop {
            let byte = bytes[*at];
            *at += 1;
            value |= usize::from(byte & 0x7f) << shift;
            if byte < 0x80 {
                return value;
            }
            shift += 7;
        }
    }
    let mut at = 8; // magic and version
    while at < wasm.len() {
        let id = wasm[at];
        at += 1;
        let size = leb(wasm, &mut at);
        let body = &wasm[at..at + size];
        at += size;
        if id == 0 {
            let mut n = 0;
            let len = leb(body, &mut n);
            if &body[n..n + len] == name.as_bytes() {
                return Some(&body[n + len..]);
            }
        }
    }
    None
}

#[test]
fn python_javascript_and_c_envs_build_reproducibly_from_source_check_and_replay_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    for (sdk, example, bad_config, named) in [
        ("python", "maze-keys-py", r#"{"size": 8}"#, "size"),
        ("js", "hanoi-js", r#"{"disk": 3}"#, "disk"),
        ("c", "lights-out-c", r#"{"size": 9}"#, "size"),
    ] {
        let source = root().join("examples").join(example);
        let wasm = dir.path().join(format!("{example}.wasm"));
        build(sdk, &source, &wasm);
        // Reproducible builds: the same source, copied to another folder and built into
        // another, gives the same bytes. Python: componentize-py leaves under a hundred bytes
        // of its snapshot to the build machine (file times and inode numbers); the rest is the
        // same, and so is the digest of the build's inputs (see sdk/python/build.sh).
        let copy = dir.path().join("elsewhere").join("a longer folder").join(example);
        copy_tree(&source, &copy);
        let again = dir.path().join("again").join(format!("{example}.wasm"));
        build(sdk, &copy, &again);
        let (first, second) = (std::fs::read(&wasm).unwrap(), std::fs::read(&again).unwrap());
        if sdk == "python" {
            let inputs = custom_section(&first, "vagen-build-inputs").expect("the build records its inputs");
            assert_eq!(Some(inputs), custom_section(&second, "vagen-build-inputs"), "{example}: inputs digest");
            let differ = first.iter().zip(&second).filter(|(a, b)| a != b).count();
            assert!(
                first.len() == second.len() && differ < 4096,
                "{example}: two builds are {} and {} bytes long, {differ} bytes differ",
                first.len(),
                second.len()
            );
        } else {
            assert!(first == second, "{example}: two builds of the same source differ");
        }
        let (w, w2) = (wasm.to_str().unwrap(), again.to_str().unwrap());
        // The host reads the digest: a Python rebuild is the same build to a reproducer.
        let inputs = |w: &str| {
            let o = ok(host(&cache, &["inspect", "--plugin", w, "--json"]), "inspect");
            serde_json::from_str::<serde_json::Value>(o.lines().last().unwrap()).unwrap()["plugin"]["build_inputs"]
                .clone()
        };
        if sdk == "python" {
            assert!(inputs(w).as_str().is_some_and(|d| d.starts_with("sha256:")), "{}", inputs(w));
            assert_eq!(inputs(w), inputs(w2));
        }
        let checked = ok(host(&cache, &["check", "--plugin", w]), &format!("check {example}"));
        assert!(checked.contains("all 7 checks passed"), "{checked}");
        // One oracle episode and three random ones, played by each build: identical logs,
        // oracle wins.
        for (policy, episodes) in [("oracle", "1"), ("random", "3")] {
            let logs: Vec<String> = [("a", w), ("b", w2)]
                .iter()
                .map(|&(run, plugin)| {
                    let log = dir.path().join(format!("{example}-{policy}-{run}.jsonl"));
                    let args = ["run", "--plugin", plugin, "--policy", policy, "--episodes", episodes, "--seed", "11"];
                    let summary =
                        ok(host(&cache, &[&args[..], &["--json", "--out", log.to_str().unwrap()]].concat()), example);
                    if policy == "oracle" {
                        assert!(summary.contains(r#""success_rate":1.0"#), "{example}: {summary}");
                    }
                    std::fs::read_to_string(&log).unwrap()
                })
                .collect();
            assert!(logs[0].lines().count() >= 2, "{example}: {}", logs[0]);
            assert_eq!(logs[0], logs[1], "{example} {policy}: the two builds play seed 11 differently");
        }
        let refused = host(&cache, &["run", "--plugin", w, "--env-config", bad_config]);
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(!refused.status.success() && err.contains("bad config") && err.contains(named), "{example}: {err}");
    }
}

/// Per turn: reward, done, success, valid and effective actions, and the observation's
/// last line (the corridor).
fn outcomes(log: &str) -> Vec<String> {
    log.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let picture = v["observation"].as_str().unwrap().lines().last().unwrap_or("").to_string();
            let fields = ["reward", "done", "success", "valid_actions", "effective_actions"].map(|k| v[k].to_string());
            format!("{} {picture}", fields.join(" "))
        })
        .collect()
}

#[test]
fn the_three_templates_build_pass_check_and_fuzz_and_play_the_same_seeded_episodes() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (mut plays, mut wasms) = (Vec::new(), Vec::new());
    for sdk in ["python", "js", "c"] {
        let wasm = dir.path().join(format!("corridor-{sdk}.wasm"));
        let o = Command::new("bash")
            .arg(root().join("sdk").join(sdk).join("build.sh"))
            .arg(root().join("sdk").join(sdk).join("template"))
            .arg(&wasm)
            .env("VAGEN_ENV", env!("CARGO_BIN_EXE_vagen-env"))
            .output()
            .expect("bash runs");
        ok(o, &format!("building the {sdk} template"));
        let w = wasm.to_str().unwrap();
        assert!(ok(host(&cache, &["check", "--plugin", w]), sdk).contains("all 7 checks passed"));
        // The template's package manifest is in the component's metadata sections.
        let shown = ok(host(&cache, &["inspect", "--plugin", w]), sdk);
        let name = format!("corridor-{}", if sdk == "python" { "py" } else { sdk });
        assert!(shown.contains(&format!("metadata      name: {name}")), "{sdk}: {shown}");
        assert!(
            shown.contains("license: Apache-2.0") && shown.contains("source: https://example.org/you/corridor"),
            "{shown}"
        );
        let log = dir.path().join(format!("corridor-{sdk}.jsonl"));
        let args = ["run", "--plugin", w, "--policy", "random", "--episodes", "5", "--seed", "3", "--out"];
        ok(host(&cache, &[&args[..], &[log.to_str().unwrap()]].concat()), sdk);
        plays.push(outcomes(&std::fs::read_to_string(&log).unwrap()));
        wasms.push((sdk, wasm));
    }
    // Each passes a minute of fuzzing as shipped (a megabyte answer is refused before it is
    // split); the three at once, a minute of wall time in all.
    let fuzzing: Vec<_> = wasms
        .iter()
        .map(|(sdk, wasm)| {
            let findings = dir.path().join(format!("findings-{sdk}"));
            let child = Command::new(env!("CARGO_BIN_EXE_vagen-env"))
                .args(["fuzz", "--seconds", "60", "--plugin"])
                .arg(wasm)
                .args(["--leak-mib", leak_mib(sdk)])
                .arg("--out")
                .arg(&findings)
                .env("VAGEN_CACHE_DIR", &cache)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("vagen-env runs");
            (sdk, child)
        })
        .collect();
    for (sdk, child) in fuzzing {
        let out = ok(child.wait_with_output().unwrap(), &format!("fuzzing the {sdk} template"));
        assert!(out.contains("no findings"), "{sdk}: {out}");
    }
    // The walk-through in the docs shows these very files.
    let docs = std::fs::read_to_string(root().join("docs/writing-an-environment.md")).unwrap();
    for file in ["sdk/python/template/app.py", "sdk/js/template/app.js", "sdk/c/template/corridor.c"] {
        let text = std::fs::read_to_string(root().join(file)).unwrap();
        assert!(docs.contains(text.trim_end()), "docs/writing-an-environment.md does not show {file} as it is");
    }
    // One Rng (SplitMix64) in all three SDKs: the same seeds give the same corridors.
    assert!(plays[0].len() > 5);
    assert_eq!(plays[0], plays[1], "python vs javascript");
    assert_eq!(plays[0], plays[2], "python vs c");
}

#[test]
fn the_python_and_javascript_helpers_pass_their_own_tests() {
    let python = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(root().join("sdk/python"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 runs");
    ok(python, "python3 -m unittest (sdk/python)");
    let node =
        Command::new("node").arg("--test").arg(root().join("sdk/js/test_vagen.mjs")).output().expect("node runs");
    ok(node, "node --test sdk/js/test_vagen.mjs");
}

/// Answers YES to every judge request, counting them.
struct Yes(std::sync::atomic::AtomicUsize);

impl vagen_runtime::reward::Judge for Yes {
    fn complete(&self, requests: &[vagen_runtime::reward::JudgeRequest]) -> Vec<Result<String, String>> {
        self.0.fetch_add(requests.len(), std::sync::atomic::Ordering::SeqCst);
        requests.iter().map(|_| Ok("YES".to_string())).collect()
    }
}

#[test]
fn reward_functions_in_python_and_javascript_build_and_score() {
    use std::sync::Arc;
    use vagen_runtime::reward::Turn;
    let dir = tempfile::tempdir().unwrap();
    let rt = vagen_runtime::Runtime::with_cache_dir(vagen_runtime::Limits::default(), None).unwrap();
    let turn = |think: &str, answer: Option<&str>| Turn {
        env_name: "sokoban".into(),
        think: Some(think.into()),
        answer: answer.map(str::to_string),
        state_before: "The box is left of you.".into(),
        ..Turn::default()
    };
    let turns = [turn(&"word ".repeat(50), Some("Left")), turn("short", None)];

    let py = dir.path().join("concise-py.wasm");
    build("python", &root().join("examples/concise-py"), &py);
    let plugin = rt.load_reward(&py).unwrap();
    assert_eq!(plugin.manifest().name, "concise");
    let judge = Arc::new(Yes(0.into()));
    let mut scorer = plugin.create(r#"{"ask_judge": true}"#, Some(judge.clone())).unwrap();
    let s = scorer.score(&turns).unwrap();
    let first = s[0].as_ref().unwrap();
    // 10 words over the budget at 0.01 each, and a sensible answer (+0.5).
    assert!((first.reward - 0.4).abs() < 1e-9, "{first:?}");
    assert_eq!(s[1].as_ref().unwrap().reward, 0.0);
    assert_eq!(judge.0.load(std::sync::atomic::Ordering::SeqCst), 1, "only the turn with an answer is asked");
    let err = plugin.create(r#"{"budget_words": -1}"#, None).err().unwrap().to_string();
    assert!(err.contains("budget_words"), "{err}");
    let err = plugin.create(r#"{"budget": 3}"#, None).err().unwrap().to_string();
    assert!(err.contains("budget"), "{err}");

    let js = dir.path().join("sensible-js.wasm");
    build("js", &root().join("examples/sensible-js"), &js);
    let plugin = rt.load_reward(&js).unwrap();
    assert_eq!(plugin.manifest().name, "sensible");
    let mut scorer = plugin.create(r#"{"weight": 2.0}"#, Some(Arc::new(Yes(0.into())))).unwrap();
    let s = scorer.score(&turns).unwrap();
    assert_eq!(s[0].as_ref().unwrap().reward, 2.0);
    assert_eq!(s[1].as_ref().unwrap().reward, 0.0, "no answer, not asked");
    // Without a judge each asked turn fails, with the reason.
    let mut alone = plugin.create("{}", None).unwrap();
    assert!(alone.score(&turns).unwrap()[0].as_ref().unwrap_err().contains("no judge"));
}

#[test]
fn the_rust_build_step_writes_cargo_toml_into_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = dir.path().join("guess-number.wasm");
    build("rust", &root().join("examples/guess-number"), &wasm);
    let shown = ok(host(&dir.path().join("cache"), &["inspect", "--plugin", wasm.to_str().unwrap()]), "inspect");
    // Its own fields, and the license it inherits from the workspace.
    assert!(shown.contains("metadata      name: guess-number") && shown.contains("version: 0.1.0"), "{shown}");
    assert!(shown.contains("license: Apache-2.0"), "{shown}");
}
