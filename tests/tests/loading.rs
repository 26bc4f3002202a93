//! Files that are not vagen plugins, and configs that are wrong, get one-line errors
//! that name the problem.

use vagen_runtime::{ActionSpace, Error, Limits};
use vagen_tests::{load, plugin_path, runtime};

fn load_err(bytes: &[u8], file: &str) -> Error {
    let (rt, dir) = runtime(Limits::default());
    let path = dir.path().join(file);
    std::fs::write(&path, bytes).unwrap();
    match rt.load(&path) {
        Ok(_) => panic!("{file} loaded"),
        Err(e) => e,
    }
}

fn one_line(e: &Error) -> String {
    let s = e.to_string();
    assert!(!s.contains('\n'), "multi-line error: {s}");
    s
}

#[test]
fn a_non_wasm_file_is_named_as_such() {
    let e = load_err(b"#!/bin/sh\necho hello\n", "script.wasm");
    assert!(matches!(e, Error::NotWasm { .. }), "{e}");
    assert!(one_line(&e).contains("script.wasm is not a WebAssembly file (text starting with"), "{e}");
    // An ELF file goes to the native loader, which says it cannot load it.
    let e = load_err(b"\x7fELF\x02\x01\x01\0\0\0\0\0", "lib.so");
    assert!(matches!(e, Error::NotAPlugin { .. }), "{e}");
    assert!(one_line(&e).contains("lib.so is not a vagen plugin: cannot load it"), "{e}");
    let e = load_err(b"", "empty.wasm");
    assert!(one_line(&e).contains("only 0 bytes long"), "{e}");
}

#[test]
fn a_core_module_is_not_a_component() {
    let e = load_err(b"\0asm\x01\0\0\0", "core.wasm");
    assert!(matches!(e, Error::NotAPlugin { .. }), "{e}");
    assert!(one_line(&e).contains("core WebAssembly module, not a component"), "{e}");
}

#[test]
fn a_component_of_another_world_is_not_a_plugin() {
    let (rt, _dir) = runtime(Limits::default());
    let e = rt.load(plugin_path("not-an-env")).err().expect("a command component is no env");
    assert!(matches!(e, Error::NotAPlugin { .. }), "{e}");
    let s = one_line(&e);
    assert!(s.contains("wasi:cli/run@") && s.contains("not vagen:env/env@0.2.0"), "{s}");
}

#[test]
fn another_wit_version_is_named_with_both_versions() {
    let (rt, _dir) = runtime(Limits::default());
    let e = rt.load(plugin_path("future-wit")).err().expect("vagen:env@9.0.0 is not ours");
    assert!(matches!(e, Error::WrongWitVersion { .. }), "{e}");
    let s = one_line(&e);
    assert!(s.contains("speaks vagen:env@9.0.0") && s.contains("supports vagen:env@0.1.0 or 0.2.0 or 0.3.0"), "{s}");
}

#[test]
fn garbage_after_a_valid_header_is_a_compile_error() {
    let mut bytes = std::fs::read(plugin_path("frozenlake")).unwrap();
    bytes.truncate(bytes.len() / 2);
    let e = load_err(&bytes, "truncated.wasm");
    assert!(matches!(e, Error::Compile { .. }), "{e}");
    one_line(&e);
}

#[test]
fn bad_configs_are_rejected_with_the_reason() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    for (config, needle) in [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object, got an array"),
        (r#"{"sise": 5}"#, "unknown field `sise`"),
        (r#"{"size": 1}"#, "size must be in 2..=32"),
        (r#"{"preset": "nope"}"#, "unknown preset `nope`"),
    ] {
        let e = plugin.create(config).err().unwrap_or_else(|| panic!("{config} accepted"));
        assert!(matches!(e, Error::BadConfig(_)), "{config}: {e}");
        assert!(one_line(&e).contains(needle), "{config}: {e}");
    }
    plugin.create(r#"{"preset": "ragen", "size": 5}"#).expect("preset plus an override");
}

#[test]
fn the_second_load_comes_from_the_compiled_code_cache() {
    let (rt, _dir) = runtime(Limits::default());
    let first = rt.load(plugin_path("frozenlake")).unwrap();
    let second = rt.load(plugin_path("frozenlake")).unwrap();
    assert!(!first.info().from_cache);
    assert!(second.info().from_cache);
    assert_eq!(first.info().sha256, second.info().sha256);
    assert_eq!(first.manifest(), second.manifest());
}

#[test]
fn the_manifest_describes_frozenlake() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let m = plugin.manifest();
    assert_eq!(m.name, "frozenlake");
    assert_eq!(m.action_names, ["Left", "Down", "Right", "Up"]);
    assert!(m.has_oracle);
    assert!(m.default_config.contains("\"size\":4"), "{}", m.default_config);
    assert_eq!(plugin.info().wit_version, "0.2.0");
}

#[test]
fn an_instance_reports_the_action_space_its_config_set() {
    let (plugin, _cache) = load("frozenlake", Limits::default());
    let space = |config: &str| plugin.create(config).unwrap().action_space().clone();
    assert_eq!(space(""), ActionSpace::of(plugin.manifest()));
    let ragen = space(r#"{"preset": "ragen"}"#);
    assert_eq!((ragen.action_separator.as_str(), ragen.max_actions_per_turn), ("||", 5));
    assert_eq!(ragen.action_names, plugin.manifest().action_names);
    // Native builds say the same through their ABI.
    let (native, _cache) = load("frozenlake.so", Limits::default());
    assert_eq!(native.create(r#"{"preset": "ragen"}"#).unwrap().action_space(), &ragen);
}

#[test]
fn a_0_3_0_environment_loads_and_says_its_action_space() {
    let (plugin, _cache) = load("wit-0-3", Limits::default());
    assert_eq!(plugin.info().wit_version, "0.3.0");
    let mut env = plugin.create(r#"{"separator": ";"}"#).unwrap();
    assert_eq!(env.action_space().action_separator, ";");
    assert_eq!(env.reset(3).unwrap().text, "turn 0");
    let s = env.step("A; B").unwrap();
    assert_eq!((s.valid_actions, s.done), (2, false));
}

#[test]
fn a_0_1_0_component_still_loads_and_its_manifest_stands_for_every_instance() {
    let (plugin, _cache) = load("wit-0-1", Limits::default());
    assert_eq!(plugin.info().wit_version, "0.1.0");
    // Its config may change the separator, but 0.1.0 has no call to say so.
    let mut env = plugin.create(r#"{"separator": ";"}"#).unwrap();
    assert_eq!(env.action_space(), &ActionSpace::of(plugin.manifest()));
    assert_eq!(env.reset(3).unwrap().text, "turn 0");
    let s = env.step("A; B").unwrap();
    assert_eq!((s.valid_actions, s.done), (2, false));
    assert!(env.system_prompt().unwrap().contains("separated by ;"));
    assert!(matches!(plugin.create(r#"{"x": 1}"#).err(), Some(Error::BadConfig(_))));
}

/// Runs `f` on its own thread and fails the test if it has not returned within `secs`: a
/// read that waits forever on a pipe would otherwise hang the suite.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(std::time::Duration::from_secs(secs)).expect("still waiting: the call blocked")
}

fn mkfifo(path: &std::path::Path) {
    let made = std::process::Command::new("mkfifo").arg(path).status().unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
}

/// Issue 41: `--plugin fifo.wasm` hung, opened (waiting for a writer) before the check that
/// it is a regular file.
#[test]
fn a_fifo_named_as_a_plugin_is_refused_without_waiting() {
    let (rt, dir) = runtime(Limits::default());
    let fifo = dir.path().join("fifo.wasm");
    mkfifo(&fifo);
    let err = within(10, move || rt.load(&fifo).err().expect("a FIFO loaded"));
    assert!(one_line(&err).contains("not a regular file"), "{err}");
}

/// Issue 41: a compiled-code cache entry was opened before its owner and type were checked:
/// a FIFO planted in the folder hung the load. Now a FIFO or a link there is not read: the
/// plugin compiles afresh.
#[test]
fn a_fifo_or_a_link_planted_as_a_cache_entry_is_not_read() {
    let (rt, dir) = runtime(Limits::default());
    rt.load(plugin_path("frozenlake")).unwrap();
    let entry = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("the first load wrote a cache entry");
    for plant in ["fifo", "link"] {
        std::fs::remove_file(&entry).unwrap();
        match plant {
            "fifo" => mkfifo(&entry),
            _ => std::os::unix::fs::symlink("/dev/zero", &entry).unwrap(),
        }
        let cache_dir = dir.path().to_path_buf();
        let again = within(60, move || {
            let rt = vagen_runtime::Runtime::with_cache_dir(Limits::default(), Some(cache_dir)).unwrap();
            rt.load(plugin_path("frozenlake")).map(|p| p.info().from_cache)
        });
        assert_eq!(again.unwrap(), false, "{plant}: compiled afresh, not read from the planted entry");
    }
}
