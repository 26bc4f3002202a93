//! The same crate as `.wasm` and as `.so` behaves identically, and native faults are contained.

use vagen_runtime::{Environment, Error, Limits};
use vagen_tests::{load, plugin_path, runtime};

/// Every observation (images included), reward and flag of `episodes` episodes driven by the
/// same pseudo-random answers.
fn trajectories(env: &mut dyn Environment, episodes: u64) -> Vec<String> {
    let names = env.manifest().action_names.clone();
    let max_turns = env.manifest().default_max_turns;
    let mut k = 7u64;
    let mut out = Vec::new();
    for seed in 0..episodes {
        out.push(format!("{:?}", env.reset(seed).unwrap()));
        for _ in 0..max_turns {
            let mut pick = || {
                k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                names[(k >> 33) as usize % names.len()].clone()
            };
            let answer = format!("{}, {}", pick(), pick());
            let s = env.step(&answer).unwrap();
            let done = s.done;
            out.push(format!("{answer} -> {s:?}"));
            if done {
                break;
            }
        }
    }
    out
}

#[test]
fn frozenlake_and_sokoban_trajectories_are_identical_as_wasm_and_so() {
    for (name, config) in [
        ("frozenlake", r#"{"observation": "text-and-image", "image_size": 32, "slippery": true}"#),
        ("sokoban", r#"{"observation": "text-and-image", "tile_pixels": 6}"#),
        ("sokoban", r#"{"preset": "larger"}"#),
    ] {
        let (wasm, _a) = load(name, Limits::default());
        let (native, _b) = load(&format!("{name}.so"), Limits::default());
        assert_eq!(wasm.info().kind, "wasm");
        assert_eq!(native.info().kind, "native");
        assert_eq!(wasm.manifest(), native.manifest());
        let tw = trajectories(wasm.create(config).unwrap().as_mut(), 40);
        let tn = trajectories(native.create(config).unwrap().as_mut(), 40);
        assert_eq!(tw.len(), tn.len(), "{name} {config}");
        for (i, (w, n)) in tw.iter().zip(&tn).enumerate() {
            assert_eq!(w, n, "{name} {config}: entry {i}");
        }
    }
}

#[test]
fn sokoban_levels_match_across_kinds_for_500_seeds() {
    let (wasm, _a) = load("sokoban", Limits::default());
    let (native, _b) = load("sokoban.so", Limits::default());
    let (mut w, mut n) = (wasm.create("").unwrap(), native.create("").unwrap());
    for seed in 0..500 {
        assert_eq!(w.reset(seed).unwrap(), n.reset(seed).unwrap(), "seed {seed}");
    }
}

#[test]
fn a_native_panic_is_a_trap_and_the_instance_comes_back() {
    let (plugin, _dir) = load("hostile.so", Limits::default());
    let mut env = plugin.create(r#"{"mode": "panic"}"#).unwrap();
    env.reset(0).unwrap();
    let err = env.step("go").unwrap_err();
    assert!(
        matches!(&err, Error::Trap { call: "step", message, .. } if message.contains("panics on purpose")),
        "{err}"
    );
    assert!(matches!(env.step("go"), Err(Error::InvalidState(_))), "a fresh instance needs a reset");
    env.reset(1).expect("re-created after the panic");
}

#[test]
fn native_load_errors_name_the_problem() {
    let (rt, _dir) = runtime(Limits::default());
    let e = rt.load(plugin_path("future-wit.so")).err().expect("no native symbols in it");
    let s = e.to_string();
    assert!(matches!(e, Error::NotAPlugin { .. }), "{s}");
    assert!(s.contains("vagen_native_abi_version") && s.contains("export_env!"), "{s}");
    assert!(!s.contains('\n'));

    let e = rt.load(plugin_path("old-abi.so")).err().expect("ABI version 0 is not ours");
    let s = e.to_string();
    assert!(matches!(e, Error::WrongAbiVersion { found: 0, ref supported, .. } if supported == "1 to 2"), "{s}");
    assert!(s.contains("ABI version 0") && s.contains("supports ABI versions 1 to 2"), "{s}");
}
