//! Shared by the episode targets: input = 8-byte seed, a config selector byte, then answers
//! separated by newlines. Checks the invariants the host would check at the boundary.

use vagen_sdk::{Env, Observation};

pub fn episode<E: Env>(data: &[u8], configs: &[E::Config]) {
    if data.len() < 9 {
        return;
    }
    let seed = u64::from_le_bytes(data[..8].try_into().unwrap());
    let config = &configs[data[8] as usize % configs.len()];
    let Ok(mut env) = E::new(serde_clone::<E>(config)) else { return };
    check(&env.reset(seed));
    for answer in String::from_utf8_lossy(&data[9..]).split('\n') {
        let step = env.step(answer);
        assert!(step.reward.is_finite(), "reward {}", step.reward);
        assert!(step.effective_actions <= step.valid_actions);
        check(&step.observation);
        let _ = env.describe_state();
        let _ = env.oracle();
        if step.done {
            break;
        }
    }
}

fn check(o: &Observation) {
    assert_eq!(o.text.matches("<image>").count(), o.images.len());
    for i in &o.images {
        assert_eq!(i.rgb.len(), i.width as usize * i.height as usize * 3);
    }
}

/// Configs are plain data: a round trip through JSON copies one without requiring Clone.
fn serde_clone<E: Env>(c: &E::Config) -> E::Config {
    serde_json::from_value(serde_json::to_value(c).unwrap()).unwrap()
}
