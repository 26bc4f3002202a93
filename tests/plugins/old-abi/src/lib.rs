//! Only the version probe: the loader must stop there and say which versions disagree.

#[cfg(not(target_family = "wasm"))]
#[unsafe(no_mangle)]
pub extern "C" fn vagen_native_abi_version() -> u32 {
    0
}
