//! The embedded icon set (build.rs fetched and filtered it) and its train / held-out split.

use std::sync::OnceLock;

pub struct Icon {
    pub name: &'static str,
    pub svg: &'static str,
}

/// Every icon that passed build.rs, sorted by name.
pub fn all() -> &'static [Icon] {
    static ICONS: OnceLock<Vec<Icon>> = OnceLock::new();
    ICONS.get_or_init(|| {
        include_str!(concat!(env!("OUT_DIR"), "/icons.tsv"))
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(name, svg)| Icon { name, svg })
            .collect()
    })
}

/// Whether an icon is held out: a hash of its name and the split seed, so the split of an
/// icon does not change when others are added or dropped.
pub fn held_out(name: &str, seed: u64, fraction: f64) -> bool {
    // FNV-1a, then a splitmix finaliser so that nearby names spread over the whole range.
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ seed;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64 <= fraction
}
