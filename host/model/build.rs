//! Compiles the operator counter (`cpp/op_count.cpp`) and the tensor-state helpers
//! (`cpp/tensor_state.cpp`) against the libtorch tch links (`DEP_TCH_LIBTORCH_LIB`, from
//! torch-sys).

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-changed=cpp/op_count.cpp");
    println!("cargo:rerun-if-changed=cpp/tensor_state.cpp");
    let lib = PathBuf::from(std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys names its libtorch"));
    let torch = lib.parent().expect("libtorch's lib/ has a parent").to_path_buf();
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("cpp/op_count.cpp")
        .file("cpp/tensor_state.cpp")
        .include(torch.join("include"))
        .include(torch.join("include/torch/csrc/api/include"))
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .opt_level(1)
        .debug(false)
        .warnings(false)
        .compile("vagen_model_cpp");
    println!("cargo:rustc-link-search=native={}", lib.display());
    for l in ["torch_cpu", "c10"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
}
