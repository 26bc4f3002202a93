//! The example as a user runs it: seeded episodes on a reference plugin, and a faulting
//! plugin whose traps end single episodes while the program goes on.

use std::path::PathBuf;
use std::process::Command;

fn plugin(dir: &str, name: &str) -> PathBuf {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(dir).join(format!("{name}.wasm"));
    assert!(p.is_file(), "{} is not built: run `cargo xtask plugins`", p.display());
    p
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_embed-rust")).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn seeded_episodes_are_the_same_every_run() {
    let p = plugin("target/plugins", "frozenlake");
    let (ok, first, err) = run(&[p.to_str().unwrap(), "12"]);
    assert!(ok, "{err}");
    // Half the turns are the oracle's: most episodes are won, not all.
    let summary = first.lines().last().unwrap();
    assert!(summary.starts_with("12 episodes: ") && summary.contains("success"), "{first}");
    assert_eq!(first.lines().filter(|l| l.starts_with("seed ")).count(), 12);
    let (_, again, _) = run(&[p.to_str().unwrap(), "12"]);
    assert_eq!(first, again);
}

#[test]
fn faults_end_their_episode_and_bad_configs_stop_the_program() {
    let p = plugin("target/test-plugins", "hostile");
    // `flaky` traps at one step in twenty, by seed: some episodes fault, the rest play out.
    let (ok, out, err) = run(&[p.to_str().unwrap(), "40", r#"{"mode": "flaky"}"#]);
    assert!(ok, "{err}");
    assert!(out.contains(": fault: step trapped"), "{out}");
    assert!(out.contains("40 episodes:") && out.contains("fault "), "{out}");
    let (ok, _, err) = run(&[p.to_str().unwrap(), "1", r#"{"mode": "no-such-mode"}"#]);
    assert!(!ok && err.contains("refused the config: unknown mode"), "{err}");
    let (ok, _, err) = run(&["Cargo.toml"]);
    assert!(!ok && err.contains("cannot load Cargo.toml"), "{err}");
}
