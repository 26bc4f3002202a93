//! Compiles the c10d bridge against the libtorch tch links (`DEP_TCH_LIBTORCH_LIB`, from
//! torch-sys), with gloo's headers (which the torch wheel leaves out) from `cargo xtask
//! setup` (`VAGEN_GLOO_INCLUDE`, default `.venv/gloo/usr/include`), and, where the libtorch
//! has CUDA and NCCL's and CUDA's headers are found, the NCCL process group.

use std::path::{Path, PathBuf};

fn main() {
    for var in ["DEP_TCH_LIBTORCH_LIB", "VAGEN_GLOO_INCLUDE", "CUDA_HOME"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=src/bridge.cpp");
    println!("cargo:rerun-if-changed=src/bridge_nccl.cpp");
    let lib = PathBuf::from(std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys names its libtorch"));
    let torch = lib.parent().expect("libtorch's lib/ has a parent").to_path_buf();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).expect("host/dist").to_path_buf();
    let gloo = std::env::var_os("VAGEN_GLOO_INCLUDE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/gloo/usr/include"));
    if !gloo.join("gloo/config.h").is_file() {
        panic!(
            "gloo's headers are not in {} (the torch wheel leaves them out): run `cargo xtask setup`, which unpacks Debian's libgloo-dev there, or set VAGEN_GLOO_INCLUDE",
            gloo.display()
        );
    }
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("src/bridge.cpp")
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_C10D_GLOO", None)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .opt_level(1)
        .debug(false)
        .warnings(false)
        .flag_if_supported("-Wno-deprecated-declarations")
        .flag_if_supported("-Wno-unused-parameter");
    if lib.join("libtorch_cuda.so").exists() {
        match nccl_includes(&torch) {
            Ok(dirs) => {
                build.file("src/bridge_nccl.cpp").define("USE_C10D_NCCL", None).define("VD_HAVE_NCCL", None);
                for d in dirs {
                    build.include(d);
                }
                println!("cargo:rustc-link-lib=dylib=torch_cuda");
            }
            Err(missing) => println!("cargo:warning=vagen-dist built without NCCL: {missing} not found"),
        }
    }
    build.compile("vagen_dist_bridge");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}

/// Where NCCL's and CUDA's headers are: the pip packages beside torch (`nvidia/…`), then
/// `CUDA_HOME`. Each header the NCCL process group's header pulls in must be found.
fn nccl_includes(torch: &Path) -> Result<Vec<PathBuf>, String> {
    let site = torch.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut candidates: Vec<PathBuf> = ["nvidia/nccl/include", "nvidia/cu13/include", "nvidia/cu13/include/cccl"]
        .iter()
        .map(|d| site.join(d))
        .collect();
    if let Some(home) = std::env::var_os("CUDA_HOME") {
        candidates.push(PathBuf::from(home).join("include"));
    }
    let mut dirs = vec![];
    for header in ["nccl.h", "cuda_runtime_api.h", "crt/host_config.h", "nv/target"] {
        let dir = candidates.iter().find(|d| d.join(header).exists()).ok_or_else(|| header.to_string())?;
        if !dirs.contains(dir) {
            dirs.push(dir.clone());
        }
    }
    Ok(dirs)
}
