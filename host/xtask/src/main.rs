//! Project tasks, so that a fresh machine needs only `cargo`:
//!
//! - `cargo xtask demo`    the main job: build everything, run FrozenLake episodes
//!   (`--vision`: the visual demo, FrozenLake from the picture alone)
//! - `cargo xtask test`    all tests (builds the plugins the tests load first)
//! - `cargo xtask plugins` build every plugin into `target/plugins/NAME.wasm` and `NAME.so`
//! - `cargo xtask wheel`   build the Python package into `target/wheels/`
//! - `cargo xtask setup`   install the toolchain pieces: the wasm32-wasip2 target, and
//!   libtorch (PyPI `torch==2.11.0`, what tch 0.24 expects) with numpy and transformers (the
//!   Python references) in the project-local `.venv`; set `LIBTORCH` to use another libtorch
//! - `cargo xtask maniskill` the PrimitiveSkill plugin's worker venv (`.venv-maniskill`: ManiSkill
//!   3 and SAPIEN) and a CPU Vulkan driver for its images (`maniskill.rs`)
//! - `cargo xtask fixtures` regenerate the Python-reference fixtures (committed)
//! - `cargo xtask env`     print the environment variables that build and run the tch crates
//! - `cargo xtask gpu-bundle` write `target/gpu-bundle/`: a stripped `vagen-host`, a plugin,
//!   the reference scripts and `run.sh`, the one command a GPU machine runs (docs/gpu.md)

mod layers;
mod maniskill;
mod phases;
mod suite;

use phases::Phases;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const GUEST_TARGET: &str = "wasm32-wasip2";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup(Needs::Tests),
        Some("env") => setup(Needs::Tests).map(|_| print_env()),
        Some("fixtures") => setup(Needs::Tests).and_then(|_| fixtures()),
        Some("plugins") => setup(Needs::Tests).and_then(|_| plugins(None)),
        // The wheel holds no libtorch: Rust and maturin are all it needs.
        Some("wheel") => setup_maturin().and_then(|_| wheel()).map(|w| eprintln!("wheel: {}", w.display())),
        Some("maniskill") => setup(Needs::Torch).and_then(|_| maniskill::setup()),
        Some("layers") => layers::check(&root()),
        Some("test") => test_all(&args[1..]),
        Some("gpu-bundle") => setup(Needs::Torch)
            .and_then(|_| plugins(Some(&["frozenlake"])))
            .and_then(|_| gpu_bundle(true))
            .map(|dir| eprintln!("bundle: {} (run.sh OUT_DIR on a GPU machine)", dir.display())),
        // The demo needs libtorch and one plugin: a fresh machine builds nothing else.
        Some("demo") => demo_variant(&args[1..])
            .and_then(|v| setup(Needs::Torch).and_then(|_| plugins(Some(&["frozenlake"]))).map(|_| v))
            .and_then(demo),
        _ => {
            eprintln!(
                "usage: cargo xtask <demo [--vision] | test [cargo test args] | plugins | wheel | gpu-bundle | setup | maniskill | env | fixtures>"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("host/xtask lives two levels down").to_path_buf()
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn run(mut cmd: Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd.status().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("{cmd:?} failed with {status}")) }
}

/// What the venv must hold.
#[derive(Clone, Copy, PartialEq)]
enum Needs {
    /// libtorch only (the demo).
    Torch,
    /// Also numpy, transformers, pillow, torchvision, OpenCV and scikit-image, which the
    /// tests' Python references use.
    Tests,
}

/// The guest target, then libtorch, then gloo's headers.
fn setup(needs: Needs) -> Result<()> {
    setup_guest_target()?;
    setup_torch(needs)?;
    setup_gloo()
}

/// gloo's headers, which `vagen-dist`'s c10d bridge needs and the torch wheel leaves out:
/// Debian's libgloo-dev unpacked into `.venv/gloo` (nothing installed system-wide). Its
/// version (2022-05) predates torch 2.11's gloo, which is fine for the bridge: it only names
/// gloo's types through `ProcessGroupGloo.hpp` (never their layout) and calls libtorch's own
/// gloo (docs/distributed.md says how this was checked).
const GLOO_DEB: &str = "libgloo-dev=0.0~git20220518.5b14351-3";

fn setup_gloo() -> Result<()> {
    unpack_deb(GLOO_DEB, "gloo", "usr/include/gloo/config.h")
}

/// The CNCF Distribution registry (Debian's docker-registry) that `test_share.py` starts on
/// 127.0.0.1 for pushes and pulls: unpacked into `.venv/registry`, run by the tests only.
const REGISTRY_DEB: &str = "docker-registry=2.8.2+ds1-1";

/// The registry's binary, once `setup_registry` ran.
fn registry_binary() -> PathBuf {
    venv().join("registry/usr/bin/docker-registry")
}

fn setup_registry() -> Result<()> {
    unpack_deb(REGISTRY_DEB, "registry", "usr/bin/docker-registry")
}

/// Debian's package `deb` (`name=version`) unpacked into `.venv/DIR` (nothing installed
/// system-wide), unless `.venv/DIR/PROBE` is there already.
fn unpack_deb(deb: &str, dir: &str, probe: &str) -> Result<()> {
    let dest = venv().join(dir);
    if dest.join(probe).is_file() {
        return Ok(());
    }
    let tmp = root().join("target").join(format!("{dir}-deb"));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let download = || {
        let mut cmd = Command::new("apt-get");
        cmd.current_dir(&tmp).args(["download", deb]);
        run(cmd)
    };
    if download().is_err() {
        // A fresh machine may have no package lists yet.
        run({
            let mut c = Command::new("apt-get");
            c.args(["update", "-qq"]);
            c
        })?;
        download()?;
    }
    let deb = std::fs::read_dir(&tmp)
        .map_err(|e| e.to_string())?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| format!("apt-get download {deb} left no .deb in {}", tmp.display()))?;
    let mut x = Command::new("dpkg-deb");
    x.arg("-x").arg(&deb).arg(&dest);
    run(x)
}

/// PyPI's torch wheel is the libtorch tch 0.24 is built against (CUDA libraries included, so
/// the same build uses a GPU where one is present); numpy runs the Python references.
const TORCH: &str = "torch==2.11.0";
const NUMPY: &str = "numpy==2.2.6";
/// Writes the model fixtures and reloads our checkpoints in the model tests.
const TRANSFORMERS: &str = "transformers==5.23.0";
/// What transformers' Qwen2.5-VL image processor needs: PIL for the resize, and the
/// torchvision built for torch 2.11.
const PILLOW: &str = "pillow==12.0.0";
const TORCHVISION: &str = "torchvision==0.26.0";
/// The SVG plugin's score terms as VAGEN computes them (OpenCV's Canny) and as
/// scikit-image computes SSIM.
const OPENCV: &str = "opencv-python-headless==4.12.0.88";
const SCIKIT_IMAGE: &str = "scikit-image==0.25.2";
/// The Python package: maturin builds the wheel; its tests run Gymnasium's checker with
/// pytest and read the trainer's TensorBoard files with tensorboard's own reader.
const MATURIN: &str = "maturin==1.16.0";
const GYMNASIUM: &str = "gymnasium==1.4.0";
const TENSORBOARD: &str = "tensorboard==2.21.0";
const PYTEST: &str = "pytest==9.2.0";
/// The official client `vagen-host serve` is tested against.
const OPENAI: &str = "openai==3.57.0";
/// LoRA adapters are tested against PEFT itself (which needs accelerate).
const PEFT: &str = "peft==0.21.2";
const ACCELERATE: &str = "accelerate==1.15.0";
/// OpenEnv's client and server framework that `serve-env` and `openenv+http://` plugins are
/// tested against. Its wheel asks for gradio, openai and huggingface_hub too, which neither
/// path imports: it goes in without dependencies, after what its imports need (fastmcp:
/// `openenv.core` imports its MCP module unconditionally).
const OPENENV: &str = "openenv-core==0.3.0";
const OPENENV_NEEDS: [&str; 6] = [
    "fastapi==0.165.0",
    "uvicorn==0.54.0",
    "websockets==17.4",
    "requests==2.34.2",
    "fastmcp==4.2.3",
    "pydantic==2.14.4",
];
/// ORAS's Python SDK: what `vagen-host push` writes must be what a tool nobody here wrote
/// reads, and the other way round (`test_share.py`).
const ORAS: &str = "oras==0.2.38";
/// CUDA's headers that `ProcessGroupNCCL.hpp` pulls in beyond the runtime's (which the torch
/// wheel's dependencies carry): vagen-dist's NCCL process group compiles against them.
const CUDA_CRT: &str = "nvidia-cuda-crt==13.0.88";
const CUDA_CCCL: &str = "nvidia-cuda-cccl==13.0.85";

fn venv() -> PathBuf {
    root().join(".venv")
}

fn venv_python() -> PathBuf {
    venv().join("bin").join("python")
}

/// Creates `.venv` with torch (and for the tests numpy and transformers) unless it already
/// has the pinned versions, or the user points `LIBTORCH` at a libtorch of their own.
fn setup_torch(needs: Needs) -> Result<()> {
    if std::env::var_os("LIBTORCH").is_some() {
        return Ok(());
    }
    let (probe, want) = match needs {
        Needs::Torch => (
            "import torch, importlib.metadata as m; print(torch.__version__.split('+')[0], \
             m.version('nvidia-cuda-crt'), m.version('nvidia-cuda-cccl'))",
            "2.11.0 13.0.88 13.0.85",
        ),
        Needs::Tests => (
            "import torch, numpy, transformers, PIL, torchvision, cv2, skimage, maturin, gymnasium, \
             tensorboard, pytest, openai, peft, accelerate, importlib.metadata as m; \
             print(torch.__version__.split('+')[0], numpy.__version__, transformers.__version__, \
             PIL.__version__, torchvision.__version__.split('+')[0], cv2.__version__, skimage.__version__, \
             m.version('maturin'), gymnasium.__version__, tensorboard.__version__, pytest.__version__, \
             openai.__version__, peft.__version__, accelerate.__version__, m.version('nvidia-cuda-crt'), \
             m.version('nvidia-cuda-cccl'), m.version('openenv-core'), m.version('fastmcp'), m.version('oras'))",
            "2.11.0 2.2.6 5.23.0 12.0.0 0.26.0 4.12.0 0.25.2 1.16.0 1.4.0 2.21.0 9.2.0 3.57.0 0.21.2 1.15.0 13.0.88 13.0.85 \
             0.3.0 4.2.3 0.2.38",
        ),
    };
    if python_prints(&venv_python(), probe, want) {
        return Ok(());
    }
    make_venv()?;
    let mut pip = pip_install(&venv_python());
    pip.args([TORCH, CUDA_CRT, CUDA_CCCL]);
    if needs == Needs::Tests {
        pip.args([
            NUMPY,
            TRANSFORMERS,
            PILLOW,
            TORCHVISION,
            OPENCV,
            SCIKIT_IMAGE,
            MATURIN,
            GYMNASIUM,
            TENSORBOARD,
            PYTEST,
            OPENAI,
            PEFT,
            ACCELERATE,
            ORAS,
        ]);
        pip.args(OPENENV_NEEDS);
    }
    run(pip)?;
    if needs == Needs::Tests {
        let mut openenv = pip_install(&venv_python());
        openenv.args(["--no-deps", OPENENV]);
        run(openenv)?;
    }
    Ok(())
}

/// `python -m pip install` quietly, without pip's cache (a package is installed once per
/// venv, and a cache would double the disk a 3 GB torch takes); the caller adds the
/// packages and any further flags.
fn pip_install(python: &Path) -> Command {
    let mut pip = Command::new(python);
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-cache-dir"]);
    pip
}

/// Whether `python` runs `probe` and prints `want`.
fn python_prints(python: &Path, probe: &str, want: &str) -> bool {
    Command::new(python)
        .args(["-c", probe])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == want)
}

/// What `python` prints for `probe`: a path or a version, trimmed.
fn python_output(python: &Path, probe: &str) -> Result<String> {
    let out = Command::new(python)
        .args(["-c", probe])
        .output()
        .map_err(|e| format!("running {} -c {probe:?}: {e}", python.display()))?;
    if !out.status.success() {
        return Err(format!("{} -c {probe:?} failed: {}", python.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The project venv, created when there is none.
fn make_venv() -> Result<()> {
    if !venv_python().is_file() {
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "venv"]).arg(venv());
        run(cmd)?;
    }
    Ok(())
}

/// The project venv with maturin, and nothing else, for `cargo xtask wheel`.
fn setup_maturin() -> Result<()> {
    let probe = "import importlib.metadata as m; print(m.version('maturin'))";
    if python_prints(&venv_python(), probe, MATURIN.trim_start_matches("maturin==")) {
        return Ok(());
    }
    make_venv()?;
    let mut pip = pip_install(&venv_python());
    pip.arg(MATURIN);
    run(pip)
}

/// `torch/lib` inside the venv, or `$LIBTORCH/lib`.
fn libtorch_lib() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("LIBTORCH") {
        return Ok(PathBuf::from(dir).join("lib"));
    }
    let probe = "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))";
    python_output(&venv_python(), probe)
        .map(PathBuf::from)
        .map_err(|e| format!("torch is not importable from {}: {e}", venv_python().display()))
}

/// What torch-sys needs to find libtorch at build time, and the loader at run time.
fn torch_env() -> Result<Vec<(String, String)>> {
    let lib = libtorch_lib()?;
    let ld = match std::env::var("LD_LIBRARY_PATH") {
        Ok(old) if !old.is_empty() => format!("{}:{old}", lib.display()),
        _ => lib.display().to_string(),
    };
    let mut vars = vec![("LD_LIBRARY_PATH".to_string(), ld)];
    if std::env::var_os("LIBTORCH").is_none() {
        let path = format!("{}:{}", venv().join("bin").display(), std::env::var("PATH").unwrap_or_default());
        vars.push(("LIBTORCH_USE_PYTORCH".into(), "1".into()));
        vars.push(("VIRTUAL_ENV".into(), venv().display().to_string()));
        vars.push(("PATH".into(), path));
        vars.push(("VAGEN_PYTHON".into(), venv_python().display().to_string()));
    }
    Ok(vars)
}

fn print_env() {
    match torch_env() {
        Ok(vars) => vars.iter().for_each(|(k, v)| println!("export {k}={v:?}")),
        Err(e) => eprintln!("xtask: {e}"),
    }
}

fn fixtures() -> Result<()> {
    for script in [
        "host/algo/reference/advantages.py",
        "host/algo/reference/pass_at_k.py",
        "host/model/reference/make_fixtures.py",
        "host/model/reference/make_vl_fixtures.py",
        "host/model/reference/make_tool_fixtures.py",
    ] {
        let mut cmd = Command::new(venv_python());
        cmd.current_dir(root()).arg(script);
        run(cmd)?;
    }
    Ok(())
}

/// Adds the guest target when rustup is in charge and it is missing.
fn setup_guest_target() -> Result<()> {
    let installed = Command::new("rustup").args(["target", "list", "--installed"]).output();
    match installed {
        Ok(out) if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == GUEST_TARGET) => Ok(()),
        Ok(_) => {
            let mut cmd = Command::new("rustup");
            cmd.args(["target", "add", GUEST_TARGET]);
            run(cmd)
        }
        Err(_) => {
            eprintln!("xtask: rustup not found; assuming the {GUEST_TARGET} standard library is installed");
            Ok(())
        }
    }
}

/// What a guest crate builds into.
#[derive(Clone, Copy, PartialEq)]
enum Guest {
    /// `.wasm` and `.so`.
    Env,
    /// `.wasm` only (`[package.metadata.vagen] reward = true`).
    Reward,
    /// `.so` only (`native-only = true`: it starts processes, which a component cannot).
    NativeEnv,
}

/// Guest crates under `dir` (one level down), by package name, each with what it builds
/// into. A crate marked `host-program = true` (`examples/embed-rust`) is left out: it runs
/// plugins rather than being one.
fn crates_in(dir: &Path) -> Result<Vec<(String, Guest)>> {
    let mut names = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let manifest = entry.path().join("Cargo.toml");
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        if text.contains("host-program = true") {
            continue;
        }
        let name = text
            .lines()
            .skip_while(|l| l.trim() != "[package]")
            .find_map(|l| {
                l.trim()
                    .strip_prefix("name")
                    .map(|r| r.trim_start_matches([' ', '=']).trim().trim_matches('"').to_string())
            })
            .ok_or_else(|| format!("{}: no package name", manifest.display()))?;
        let kind = if text.contains("reward = true") {
            Guest::Reward
        } else if text.contains("native-only = true") {
            Guest::NativeEnv
        } else {
            Guest::Env
        };
        names.push((name, kind));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(names)
}

/// Where guests come from and go: `plugins/*` into `target/plugins/` (reward functions
/// into `target/rewards/`), `examples/*` into `target/examples/`, the test suite's fixtures
/// into `target/test-plugins/`; `only`: just these crates.
fn guests(only: Option<&[&str]>) -> Result<Vec<(String, PathBuf, Guest)>> {
    let root = root();
    let groups = [
        (root.join("plugins"), root.join("target/plugins")),
        (root.join("examples"), root.join("target/examples")),
        (root.join("tests/plugins"), root.join("target/test-plugins")),
    ];
    let mut all = Vec::new();
    for (src, dst) in &groups {
        for (name, kind) in crates_in(src)? {
            if only.is_some_and(|only| !only.contains(&name.as_str())) {
                continue;
            }
            let dst = if kind == Guest::Reward { root.join("target/rewards") } else { dst.clone() };
            all.push((name, dst, kind));
        }
    }
    Ok(all)
}

/// Every guest as `.wasm` and each environment also as a native `.so` (a `native-only` one
/// only so); `only`: just these crates, and only as `.wasm`.
fn plugins(only: Option<&[&str]>) -> Result<()> {
    wasm_plugins(only)?;
    if only.is_none() {
        let mut native = cargo();
        native.args(["build", "--release"]);
        // Reward functions are components only: the native ABI is an environment's.
        for (name, ..) in guests(None)?.iter().filter(|(.., kind)| *kind != Guest::Reward) {
            native.args(["-p", name]);
        }
        run(native)?;
        native_plugins()?;
    }
    Ok(())
}

/// The guests for wasm32-wasip2 in release mode, each `.wasm` copied to its folder.
fn wasm_plugins(only: Option<&[&str]>) -> Result<()> {
    let all = guests(only)?;
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--target", GUEST_TARGET]);
    // Guests ship as files: small, no debug info. Only this build sees these settings.
    for setting in [
        "profile.release.debug=false",
        "profile.release.strip=true",
        "profile.release.lto=true",
        "profile.release.codegen-units=1",
    ] {
        cmd.args(["--config", setting]);
    }
    let components: Vec<_> = all.iter().filter(|(.., kind)| *kind != Guest::NativeEnv).collect();
    if components.is_empty() {
        return Ok(());
    }
    for (name, ..) in &components {
        cmd.args(["-p", name]);
    }
    run(cmd)?;
    let root = root();
    let built = root.join("target").join(GUEST_TARGET).join("release");
    for (name, dst, _) in components {
        std::fs::create_dir_all(dst).map_err(|e| format!("creating {}: {e}", dst.display()))?;
        // A cdylib is written with underscores, a binary with the package's own name.
        let from = [format!("{}.wasm", name.replace('-', "_")), format!("{name}.wasm")]
            .into_iter()
            .map(|f| built.join(f))
            .find(|p| p.is_file())
            .ok_or_else(|| format!("{name}: no .wasm in {}", built.display()))?;
        copy(&from, &dst.join(format!("{name}.wasm")), &root)?;
    }
    Ok(())
}

/// The environments' native `.so`, already built into `target/release`, copied beside
/// their `.wasm`.
fn native_plugins() -> Result<()> {
    let root = root();
    for (name, dst, kind) in guests(None)? {
        if kind == Guest::Reward {
            continue;
        }
        let so = root.join("target/release").join(format!("lib{}.so", name.replace('-', "_")));
        // A crate without a cdylib (a host program's example) has none.
        if so.is_file() {
            std::fs::create_dir_all(&dst).map_err(|e| format!("creating {}: {e}", dst.display()))?;
            copy(&so, &dst.join(format!("{name}.so")), &root)?;
        }
    }
    Ok(())
}

/// The entries of `dir`, sorted.
pub(crate) fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    Ok(entries)
}

/// Copied beside `to`, then renamed over it: a process running the old file (a training run
/// with the native plugin mapped) keeps its copy, where copying in place changed the code
/// under it (it crashed at address 0).
fn copy(from: &Path, to: &Path, root: &Path) -> Result<()> {
    let staged = to.with_extension(format!("staged-{}", std::process::id()));
    std::fs::copy(from, &staged).map_err(|e| format!("copying {} to {}: {e}", from.display(), staged.display()))?;
    std::fs::rename(&staged, to).map_err(|e| format!("renaming {} to {}: {e}", staged.display(), to.display()))?;
    eprintln!("built {}", to.strip_prefix(root).unwrap_or(to).display());
    Ok(())
}

/// `host/python` as an abi3 wheel in `target/wheels/` (maturin links it without libpython);
/// the wheel's path.
fn wheel() -> Result<PathBuf> {
    let dir = root().join("target").join("wheels");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    let mut cmd = Command::new(venv().join("bin").join("maturin"));
    cmd.current_dir(root())
        .args(["build", "--release", "--manifest-path", "host/python/Cargo.toml", "--out"])
        .arg(&dir);
    run(cmd)?;
    let wheel = std::fs::read_dir(&dir)
        .map_err(|e| format!("reading {}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| format!("maturin wrote no wheel into {}", dir.display()))?;
    Ok(wheel)
}

/// The wheel into the project venv (its dependencies, Gymnasium and NumPy, are already
/// there from `setup`), replacing an earlier build.
fn install_wheel(wheel: &Path) -> Result<()> {
    let mut pip = Command::new(venv_python());
    pip.args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--force-reinstall", "--no-deps"])
        .arg(wheel);
    run(pip)
}

/// The Python, C and JavaScript SDKs' toolchains, into the user's cache as a first build
/// would put them: downloads, done while the wheel compiles rather than inside a test.
fn sdk_toolchains() -> Result<()> {
    for sdk in ["python", "c", "js"] {
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("sdk").join(sdk).join("build.sh")).arg("--tools-only");
        run(cmd)?;
    }
    Ok(())
}

/// `cargo xtask test`: what the tests need, the tests, then the GPU bundle's dry run; the
/// time of each phase is printed at the end, passed or not. Extra arguments (a test name
/// filter, `--package`…) run just `cargo test` with them, after the same set-up.
fn test_all(extra: &[String]) -> Result<()> {
    let phases = Phases::new();
    let result = test_phases(&phases, extra);
    phases.print();
    result
}

fn test_phases(phases: &Phases, extra: &[String]) -> Result<()> {
    // The house rules first (in-process: the build replaces this binary), reported with the
    // tests' outcome, so every test still runs when one is broken.
    let rules = phases.time("layers", || layers::check(&root()));
    setup_guest_target()?;
    // Maturin first (seconds), then what needs no libtorch builds while the venvs install.
    setup_maturin()?;
    let wheel = phases.time_alone("set-up: the rows below, side by side", || set_up_side_by_side(phases))?;
    phases.time("wheel install", || install_wheel(&wheel))?;
    if !extra.is_empty() {
        let mut cmd = cargo();
        cmd.args(["test", "--release", "--workspace", "--exclude", "vagen-python"]).args(extra).envs(torch_env()?);
        return phases.time("cargo test (filtered)", || run(cmd)).and(rules);
    }
    let binaries = phases.time_alone("build", build_tests)?;
    phases.time_alone("native plugins", native_plugins)?;
    // From what the build made (the bundle's own build would select fewer packages, unify
    // other features and rebuild).
    let bundle = phases.time("gpu bundle", || gpu_bundle(false))?;
    let jobs = test_jobs(binaries, &bundle)?;
    // One lane unless asked: on 2 cores the slow jobs are CPU-bound (libtorch already uses
    // both cores), so a second lane gained nothing there and slowed timing-bounded tests
    // past their bounds (docs/experiments.md, "The test suite's time").
    let lanes = std::env::var("VAGEN_TEST_LANES").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    // Tests write checkpoints and models under the temp folder: a full disk fails them with
    // ENOSPC far from the cause, so the free space is printed where it can be read beside them.
    println!("disk: {} free before the tests", free_disk());
    let tests = phases
        .time("tests", || suite::run_jobs(jobs, lanes, &root().join("target/test-logs"), phases))
        .map_err(|e| format!("{e} (disk: {} free after the tests)", free_disk()));
    match (rules, tests) {
        (Err(a), Err(b)) => Err(format!("{a}\n{b}")),
        (rules, tests) => rules.and(tests),
    }
}

/// Free space where the build and the tests write, e.g. `12.3 GiB in target/, 12.3 GiB in /tmp`.
fn free_disk() -> String {
    let free = |path: &Path| -> Option<f64> {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
        // SAFETY: a zeroed statvfs is a valid out-parameter; `c` is a NUL-terminated path.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0)
            .then(|| (st.f_bavail as f64) * (st.f_frsize as f64) / (1u64 << 30) as f64)
    };
    [(root().join("target"), "target/"), (std::env::temp_dir(), "the temp folder")]
        .iter()
        .map(|(p, name)| free(p).map_or(format!("? in {name}"), |g| format!("{g:.1} GiB in {name}")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The guests and the wheel compile while the venvs, gloo, ManiSkill and the SDK toolchains
/// install (downloads and unpacking, mostly); the wheel's path.
fn set_up_side_by_side(phases: &Phases) -> Result<PathBuf> {
    std::thread::scope(|s| {
        let rust = s.spawn(|| {
            phases.time("wasm plugins (beside the venvs)", || wasm_plugins(None))?;
            phases.time("wheel (beside the venvs)", wheel)
        });
        let venvs = phases
            .time("venvs", || {
                setup_torch(Needs::Tests)
                    .and_then(|_| setup_gloo())
                    .and_then(|_| setup_registry())
                    .and_then(|_| maniskill::setup())
            })
            .and_then(|_| phases.time("sdk toolchains (beside the wheel)", sdk_toolchains));
        let wheel = rust.join().map_err(|_| "the build beside the venvs panicked".to_string())?;
        venvs.and(wheel)
    })
}

/// Everything the tests run, in one build (one feature set, so nothing is built twice):
/// libraries, `vagen-host` and the other binaries, the environments' `.so`, examples and
/// every test binary (the extension module is the wheel's: it links no libpython). Returns
/// the test binaries.
fn build_tests() -> Result<Vec<suite::TestBinary>> {
    let mut cmd = cargo();
    cmd.args(["build", "--release", "--workspace", "--exclude", "vagen-python", "--all-targets"])
        .args(["--message-format", "json-render-diagnostics"])
        .envs(torch_env()?)
        .stdout(std::process::Stdio::piped())
        // Cargo's progress and rustc's messages, as a plain build shows them.
        .stderr(std::process::Stdio::inherit());
    eprintln!("+ {cmd:?}");
    let out = cmd.output().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed with {}", out.status));
    }
    suite::test_binaries(&String::from_utf8_lossy(&out.stdout))
}

/// Every test binary, the doctests, the Python package's pytest suite (with this build's
/// vagen-host) and the GPU bundle's dry run; the slow ones first, so that the lanes end
/// together.
fn test_jobs(binaries: Vec<suite::TestBinary>, bundle: &Path) -> Result<Vec<suite::Job>> {
    let torch = torch_env()?;
    let mut jobs = Vec::new();
    // A job per pytest file, so that the lanes share them out.
    for file in read_dir_sorted(&root().join("host/python/tests"))? {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if !(name.starts_with("test_") && name.ends_with(".py")) {
            continue;
        }
        let mut pytest = Command::new(venv_python());
        pytest
            .current_dir(root())
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&file)
            .env("VAGEN_HOST", root().join("target/release/vagen-host"))
            .env("VAGEN_REGISTRY", registry_binary());
        jobs.push(suite::Job::new(format!("pytest/{name}"), pytest));
    }
    for b in binaries {
        let mut cmd = Command::new(&b.executable);
        cmd.current_dir(&b.package_dir).env("CARGO_MANIFEST_DIR", &b.package_dir).envs(torch.iter().cloned());
        if std::env::var_os("OMP_NUM_THREADS").is_none() && !WHOLE_CORES.contains(&b.name.as_str()) {
            cmd.env("OMP_NUM_THREADS", "1");
        }
        jobs.push(suite::Job::new(b.name, cmd));
    }
    // The embedding API's documentation builds without a warning (its example runs as a
    // doctest). Its dependencies build in check mode, apart from the build: a job, so that
    // it fills a lane while other jobs wait.
    let mut doc = cargo();
    doc.args(["doc", "--release", "--no-deps", "-p", "vagen-runtime"]).env("RUSTDOCFLAGS", "-D warnings");
    jobs.push(suite::Job::new("cargo doc", doc));
    let mut doctests = cargo();
    doctests
        .args(["test", "--release", "--workspace", "--exclude", "vagen-python", "--doc"])
        .envs(torch.iter().cloned());
    jobs.push(suite::Job::new("doctests", doctests));
    jobs.push(gpu_dry_run(bundle));
    for (host, guest) in BESIDE {
        let Some(g) = jobs.iter().position(|j| j.name == guest) else { continue };
        let guest = jobs.remove(g);
        match jobs.iter_mut().find(|j| j.name == host) {
            Some(host) => host.beside.push(guest),
            None => jobs.push(guest),
        }
    }
    let rank = |name: &str| SLOW_FIRST.iter().position(|s| name == *s).unwrap_or(SLOW_FIRST.len());
    jobs.sort_by_key(|j| rank(&j.name));
    Ok(jobs)
}

/// The jobs that took longest in a cold run on 2 cores (2026-11-28, one lane), longest
/// first: they start first; the rest keep cargo's order.
/// One libtorch (OpenMP) thread per process in the test binaries, except these: libtest runs
/// a binary's tests two at a time and many start `vagen-host`s, so libtorch's default of a
/// thread per core put up to four spinning threads on two cores. Measured on 2 cores, per
/// binary, default → one thread: cli/tests/model 77 s → 32 s (29 s in the suite),
/// trainer/tests/determinism 18 s → 10 s, train 35 s → 30 s. These two spend their time in
/// one process at a time and are faster with both cores: vision 67 s → 95 s, first_hour
/// 89 s → 105 s with one thread.
const WHOLE_CORES: [&str; 2] = ["vagen-trainer/tests/vision", "vagen-host/tests/first_hour"];

/// Jobs that run side by side on one lane (the second starts with the first): each leaves a
/// core mostly idle. The dry run ran at 1.1 cores (2:50, one command at a time);
/// `test_primitive_skill.py` at about one (2:19: ManiSkill's CPU physics and lavapipe in one
/// worker process; its 9 s of its own CPU time are pytest's and `vagen-host`'s).
const BESIDE: [(&str, &str); 1] = [("gpu bundle dry run", "pytest/test_primitive_skill.py")];

const SLOW_FIRST: [&str; 21] = [
    "vagen-trainer/tests/vision",
    "vagen-env/tests/languages",
    "cargo doc",
    "gpu bundle dry run",
    "pytest/test_primitive_skill.py",
    "vagen-host/tests/first_hour",
    "vagen-host/tests/model",
    "vagen-tests/tests/fuzz",
    "vagen-host/tests/data_parallel",
    "pytest/test_openenv.py",
    "pytest/test_vagen.py",
    "vagen-trainer/tests/determinism",
    "vagen-trainer/tests/train",
    "vagen-trainer/tests/sandbox",
    "vagen-model/tests/lora",
    "vagen-host/tests/cli",
    "pytest/test_serve.py",
    "vagen-trainer/tests/asynchronous",
    "vagen-host/tests/parity_sweep",
    "primitive-skill/lib",
    "vagen-model/tests/vl",
];

/// Which demo: the text one (the main job), or `--vision`, the same task learnt from the
/// picture alone by the embedded VL model.
fn demo_variant(args: &[String]) -> Result<&'static str> {
    match args {
        [] => Ok("frozenlake-cpu"),
        [v] if v == "--vision" => Ok("frozenlake-vision-cpu"),
        _ => Err(format!("usage: cargo xtask demo [--vision], not {}", args.join(" "))),
    }
}

/// `vagen-host` built in the `demo` profile (Cargo.toml says why), then
/// `examples/NAME.toml` trained from scratch into `runs/NAME`.
fn demo(name: &str) -> Result<()> {
    let mut build = cargo();
    build.args(["build", "--profile", "demo", "-p", "vagen-host"]).envs(torch_env()?);
    run(build)?;
    // The main job: SFT warm start, then RL, on FrozenLake with the embedded model; prints
    // held-out success before and after RL. A previous demo run is replaced, not resumed.
    let run_dir = root().join("runs").join(name);
    if run_dir.exists() {
        std::fs::remove_dir_all(&run_dir).map_err(|e| format!("removing {}: {e}", run_dir.display()))?;
    }
    let mut train = Command::new(root().join("target/demo/vagen-host"));
    let config = format!("examples/{name}.toml");
    train.current_dir(root()).args(["train", "--config", &config, "--run-dir"]).arg(&run_dir);
    run(train)
}

/// The GPU bundle's size limit: what one device call may carry, with room to spare.
const BUNDLE_MAX_BYTES: u64 = 60 << 20;

/// `target/gpu-bundle/`: `vagen-host` (release, stripped), `frozenlake.wasm`, the
/// PrimitiveSkill plugin and its bench, the reference scripts and the embedded tokenizer
/// assets they read, the demo configs, `gpu_report.py` and `run.sh`. The binary links libtorch_cuda (checked), so the same build runs on a GPU.
/// `build`: build `vagen-host` and the PrimitiveSkill plugin first (else those in
/// target/release are taken: `cargo xtask test` has just built them).
fn gpu_bundle(build: bool) -> Result<PathBuf> {
    let root = root();
    if build {
        let mut cmd = cargo();
        cmd.args(["build", "--release", "-p", "vagen-host"]).envs(torch_env()?);
        run(cmd)?;
        let mut ps = cargo();
        ps.args(["build", "--release", "-p", "primitive-skill", "--lib", "--example", "bench-primitive-skill"]);
        run(ps)?;
    }
    let dir = root.join("target/gpu-bundle");
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(|e| format!("removing {}: {e}", dir.display()))?;
    }
    let host = dir.join("bin/vagen-host");
    let files: [(&str, &str); 13] = [
        ("target/release/vagen-host", "bin/vagen-host"),
        ("target/plugins/frozenlake.wasm", "plugins/frozenlake.wasm"),
        ("target/release/libprimitive_skill.so", "plugins/primitive-skill.so"),
        ("target/release/examples/bench-primitive-skill", "bin/bench-primitive-skill"),
        ("host/model/reference/parity_sweep.py", "reference/parity_sweep.py"),
        ("host/model/reference/bench_transformers.py", "reference/bench_transformers.py"),
        ("host/model/reference/bench_rollout_transformers.py", "reference/bench_rollout_transformers.py"),
        ("host/model/assets/tokenizer.json", "assets/tokenizer.json"),
        ("host/model/assets/tokenizer_config.json", "assets/tokenizer_config.json"),
        ("host/model/assets/chat_template.jinja", "assets/chat_template.jinja"),
        ("host/model/assets/vl_chat_template.jinja", "assets/vl_chat_template.jinja"),
        ("host/xtask/bundle/gpu_report.py", "gpu_report.py"),
        ("host/xtask/bundle/run.sh", "run.sh"),
    ];
    let configs = [
        ("examples/frozenlake-cpu.toml", "examples/frozenlake-cpu.toml"),
        ("examples/frozenlake-vision-cpu.toml", "examples/frozenlake-vision-cpu.toml"),
        ("examples/frozenlake-lora-cpu.toml", "examples/frozenlake-lora-cpu.toml"),
    ];
    for (from, to) in files.iter().chain(&configs) {
        let to = dir.join(to);
        std::fs::create_dir_all(to.parent().expect("a file in a folder"))
            .map_err(|e| format!("creating {}: {e}", to.display()))?;
        copy(&root.join(from), &to, &root)?;
    }
    let mut strip = Command::new("strip");
    strip.arg(&host).arg(dir.join("bin/bench-primitive-skill")).arg(dir.join("plugins/primitive-skill.so"));
    run(strip)?;
    check_links_cuda(&host)?;
    let size = folder_size(&dir)?;
    if size > BUNDLE_MAX_BYTES {
        return Err(format!("{} is {:.1} MiB, over the bundle's 60 MiB", dir.display(), size as f64 / 1048576.0));
    }
    eprintln!("gpu bundle: {:.1} MiB", size as f64 / 1048576.0);
    Ok(dir)
}

/// A build whose libtorch_cuda was dropped at link time (`--as-needed`) runs on the CPU
/// alone, silently: the bundle refuses it.
fn check_links_cuda(binary: &Path) -> Result<()> {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(binary)
        .output()
        .map_err(|e| format!("running readelf -d {}: {e}", binary.display()))?;
    if !String::from_utf8_lossy(&out.stdout).contains("[libtorch_cuda.so]") {
        return Err(format!("{} does not link libtorch_cuda.so: it could not use a GPU", binary.display()));
    }
    Ok(())
}

fn folder_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("reading {}: {e}", dir.display()))?.flatten() {
        let meta = entry.metadata().map_err(|e| format!("{}: {e}", entry.path().display()))?;
        total += if meta.is_dir() { folder_size(&entry.path())? } else { meta.len() };
    }
    Ok(total)
}

/// The bundle's CPU dry run (`run.sh --cpu --quick`), so it cannot rot between GPU runs;
/// its reports go to `target/gpu-bundle-dry-run/`.
fn gpu_dry_run(bundle: &Path) -> suite::Job {
    let out = root().join("target/gpu-bundle-dry-run");
    let mut cmd = Command::new(bundle.join("run.sh"));
    let python = std::env::var_os("VAGEN_PYTHON").map(PathBuf::from).unwrap_or_else(venv_python);
    cmd.args(["--cpu", "--quick"])
        .arg(&out)
        .env("VAGEN_PYTHON", python)
        .env("VAGEN_MANISKILL_PYTHON", maniskill::venv().join("bin/python"));
    let mut job = suite::Job::new("gpu bundle dry run", cmd);
    job.expect_files = ["gpu-report.json", "gpu-report.md"].iter().map(|r| out.join(r)).collect();
    job
}
