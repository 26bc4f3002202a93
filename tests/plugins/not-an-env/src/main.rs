//! Built for wasm32-wasip2 this is a `wasi:cli/command` component: valid WebAssembly,
//! but not a vagen environment. The loader must say so in one line.
fn main() {
    println!("I am a command, not an environment.");
}
