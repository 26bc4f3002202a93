//! Writes the frames of one oracle episode as PNGs, natively (no host needed):
//! `cargo run --release -p navigation --example frames -- SEED OUT_DIR [CONFIG_JSON]`.

use navigation::Navigation;
use vagen_sdk::{Env, Image};

fn save(img: &Image, path: &std::path::Path) {
    image::save_buffer(path, &img.rgb, img.width, img.height, image::ColorType::Rgb8).expect("PNG written");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let out = std::path::PathBuf::from(args.get(2).map(String::as_str).unwrap_or("frames"));
    let config = vagen_sdk::resolve_config::<Navigation>(args.get(3).map(String::as_str).unwrap_or("{}"))
        .expect("a valid config");
    std::fs::create_dir_all(&out).expect("output folder");
    let mut env = Navigation::new(config).expect("a valid config");
    let obs = env.reset(seed);
    println!("{}\n{}", obs.text, env.describe_state());
    save(&obs.images[0], &out.join("turn-0.png"));
    for turn in 1..=20 {
        let Some(answer) = env.oracle() else { break };
        let step = env.step(&answer);
        println!("turn {turn}: {answer}\n{}\n{}", step.observation.text, env.describe_state());
        if let Some(img) = step.observation.images.first() {
            save(img, &out.join(format!("turn-{turn}.png")));
        }
        if step.done {
            break;
        }
    }
}
