//! The env tool is for machines without libtorch: it must not link it, and playing an
//! episode must stay small (issue 42: `vagen-host run` of one FrozenLake episode peaked at
//! 469 MiB, RAGEN's Python env takes 91 MiB).

use std::path::Path;
use std::process::Command;

#[test]
fn the_env_tool_links_no_libtorch_and_plays_an_episode_in_under_100_mib() {
    let bin = env!("CARGO_BIN_EXE_vagen-env");
    let elf = Command::new("readelf").args(["-d", bin]).output().expect("readelf runs");
    let needed = String::from_utf8_lossy(&elf.stdout);
    assert!(needed.contains("NEEDED") && !needed.contains("torch"), "{needed}");

    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plugins/frozenlake.wasm");
    let cache = tempfile::tempdir().unwrap();
    // A cold compile cache: the component is compiled in this process too.
    let out = Command::new(bin)
        .args(["run", "--plugin", plugin.to_str().unwrap(), "--episodes", "1", "--json"])
        .env("VAGEN_CACHE_DIR", cache.path())
        .output()
        .expect("vagen-env runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    assert!(peak_mib <= 100.0, "peak RSS {peak_mib:.1} MiB");
}
