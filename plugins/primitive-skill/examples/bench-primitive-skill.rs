//! What a PrimitiveSkill call costs: reset, one primitive per step (the oracle's next skill),
//! in text and image mode, and an empty round trip through the worker's pipe.
//!
//!     cargo run --release -p primitive-skill --example bench-primitive-skill -- [TASK] [EPISODES]
//!
//! Needs `cargo xtask maniskill` (image mode also its CPU renderer, or a GPU's Vulkan).

use std::time::{Duration, Instant};

use primitive_skill::PrimitiveSkill;
use vagen_sdk::{Env, resolve_config};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().map_or("StackThreeCube", String::as_str);
    let episodes: u64 = args.get(1).map_or(Ok(5), |s| s.parse())?;
    println!("task {task}, {episodes} episodes per mode, one primitive per step");
    for observation in ["text", "image"] {
        let config = format!(r#"{{"task": "{task}", "observation": "{observation}", "max_actions_per_turn": 1}}"#);
        let mut env = PrimitiveSkill::new(resolve_config::<PrimitiveSkill>(&config)?)?;
        let started = Instant::now();
        env.try_reset(1000)?;
        let first = started.elapsed();
        let (mut resets, mut steps, mut pings) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..200 {
            pings.push(env.ping()?);
        }
        for seed in 0..episodes {
            let t = Instant::now();
            env.try_reset(seed)?;
            resets.push(t.elapsed());
            while let Some(answer) = env.oracle() {
                let t = Instant::now();
                let s = env.try_step(&answer)?;
                steps.push(t.elapsed());
                if s.done {
                    break;
                }
            }
        }
        println!(
            "{observation:>5}: worker start + first reset {:.2} s; reset {}; step {} ({} steps); pipe round trip {}",
            first.as_secs_f64(),
            summary(&mut resets),
            summary(&mut steps),
            steps.len(),
            summary(&mut pings),
        );
    }
    Ok(())
}

fn summary(d: &mut [Duration]) -> String {
    d.sort();
    let ms = |x: Duration| x.as_secs_f64() * 1e3;
    let mean = d.iter().map(|&x| ms(x)).sum::<f64>() / d.len().max(1) as f64;
    let p = |q: f64| d.get(((d.len() as f64 - 1.0) * q).round() as usize).map_or(0.0, |&x| ms(x));
    format!("mean {mean:.3} ms, median {:.3}, p90 {:.3}", p(0.5), p(0.9))
}
