//! What the CLI's test files share.

/// `model` with a LoRA adapter as `lora` says whose B matrices are random (non-zero, from
/// `seed`), saved in PEFT's layout.
pub fn random_adapter(mut model: vagen_model::Model, lora: &vagen_model::LoraConfig, seed: u64) -> tempfile::TempDir {
    model.attach_lora(lora, seed).unwrap();
    tch::manual_seed(seed as i64);
    let _g = tch::no_grad_guard();
    for (name, mut t) in model.vs.variables() {
        if name.contains(".lora_B.") {
            t.copy_(&(tch::Tensor::randn_like(&t) * 0.5));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    model.save(dir.path()).unwrap();
    dir
}
