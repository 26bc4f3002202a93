//! Compiles the operator counter (`cpp/op_count.cpp`), the tensor-state helpers
//! (`cpp/tensor_state.cpp`) and varlen flash attention (`cpp/flash.cpp`, declared in every
//! libtorch, a kernel only in CUDA's) against the libtorch tch links
//! (`DEP_TCH_LIBTORCH_LIB`, from torch-sys), and, where that libtorch has CUDA and CUDA's
//! runtime headers are found (the pip package beside torch, or `CUDA_HOME`), the CUDA graphs
//! (`cpp/cuda_graph.cpp`, cfg `vagen_cuda_graphs`).

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=cpp/op_count.cpp");
    println!("cargo:rerun-if-changed=cpp/tensor_state.cpp");
    println!("cargo:rerun-if-changed=cpp/cuda_graph.cpp");
    println!("cargo:rerun-if-changed=cpp/flash.cpp");
    println!("cargo:rerun-if-changed=cpp/guarded.h");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    println!("cargo::rustc-check-cfg=cfg(vagen_cuda_graphs)");
    let lib = PathBuf::from(std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys names its libtorch"));
    let torch = lib.parent().expect("libtorch's lib/ has a parent").to_path_buf();
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("cpp/op_count.cpp")
        .file("cpp/tensor_state.cpp")
        .file("cpp/flash.cpp")
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .opt_level(1)
        .debug(false)
        .warnings(false);
    let mut libs = vec!["torch_cpu", "c10"];
    if lib.join("libtorch_cuda.so").exists() {
        match cuda_runtime_include(&torch) {
            Some(dir) => {
                build.file("cpp/cuda_graph.cpp").include(dir);
                println!("cargo:rustc-cfg=vagen_cuda_graphs");
                libs.extend(["torch_cuda", "c10_cuda"]);
            }
            None => println!("cargo:warning=vagen-model built without CUDA graphs: cuda_runtime_api.h not found"),
        }
    }
    build.compile("vagen_model_cpp");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in libs {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}

/// Where `cuda_runtime_api.h` is: the pip package beside torch, then `CUDA_HOME`.
fn cuda_runtime_include(torch: &Path) -> Option<PathBuf> {
    let site = torch.parent().map(Path::to_path_buf).unwrap_or_default();
    let home = std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include"));
    [site.join("nvidia/cu13/include"), site.join("nvidia/cuda_runtime/include")]
        .into_iter()
        .chain(home)
        .find(|d| d.join("cuda_runtime_api.h").exists())
}
