//! Links the binary so the same build uses CUDA where present and finds libtorch at run time.
//!
//! With `-Wl,--as-needed` (the default of many toolchains) the linker drops
//! `libtorch_cuda.so`, since no symbol of it is referenced directly: CUDA then silently
//! disappears. It is linked with `--no-as-needed` when the libtorch has it. The libtorch
//! folder is also written as the binary's RUNPATH, so it starts without `LD_LIBRARY_PATH`
//! (which still overrides it, e.g. to point at another machine's torch).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    let Ok(lib) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        return;
    };
    let lib = std::path::Path::new(&lib);
    if lib.join("libtorch_cuda.so").exists() {
        println!("cargo:rustc-link-arg-bins=-Wl,--push-state,--no-as-needed,-ltorch_cuda,--pop-state");
    }
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", lib.display());
}
