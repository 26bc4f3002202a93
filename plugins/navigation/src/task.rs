//! One episode's world from its seed: the house, the furniture, the target and how the
//! instruction names it, and a start pose from which the target is reachable within the
//! action budget.

use crate::config::{Config, Instruction};
use crate::mesh::Tri;
use crate::objects::{Colour, Kind, Placement};
use crate::scene::{Layout, Near, Object, WALL_HALF, place_object};
use crate::walk::{Action, Pose, Walk};
use vagen_sdk::Rng;

pub struct Task {
    pub layout: Layout,
    pub objects: Vec<Object>,
    pub target: usize,
    pub instruction: String,
    pub start: Pose,
    pub walk: Walk,
    /// The whole scene; object `i`'s triangles carry id `i + 1`.
    pub tris: Vec<Tri>,
}

/// Attempts before giving up with a panic (a config no seed can satisfy).
const ATTEMPTS: usize = 400;
/// After this many, the start may be nearer than asked and in any room.
const STRICT_ATTEMPTS: usize = 300;

/// Why no episode could be made.
pub const UNSATISFIABLE: &str =
    "no episode satisfies this config: use bigger rooms, fewer objects or a larger action budget";

impl Task {
    /// The episode of `seed`, or `None` when the config allows none within the attempts.
    pub fn try_generate(config: &Config, seed: u64) -> Option<Task> {
        let mut rng = Rng::new(seed);
        (0..ATTEMPTS).find_map(|attempt| attempt_task(&mut rng, config, attempt >= STRICT_ATTEMPTS))
    }

    /// `try_generate` for a config that has already produced an episode (checked when the
    /// env is created), so running out of attempts here is a bug worth a trap.
    pub fn generate(config: &Config, seed: u64) -> Task {
        Self::try_generate(config, seed).unwrap_or_else(|| panic!("{UNSATISFIABLE} (seed {seed})"))
    }

    pub fn target(&self) -> &Object {
        &self.objects[self.target]
    }

    /// Within the success distance of the target's centre.
    pub fn reached(&self, config: &Config, x: f32, z: f32) -> bool {
        self.target().distance(x, z) <= config.success_distance as f32
    }
}

fn attempt_task(rng: &mut Rng, config: &Config, relaxed: bool) -> Option<Task> {
    let layout = Layout::generate(rng, config.rooms, config.room_size)?;
    let target_room = rng.below(layout.rooms.len());
    let mut kinds = Kind::ALL.to_vec();
    rng.shuffle(&mut kinds);
    // Distractors of the target's kind must stand on their own, not need a table each.
    let needs_distractors = matches!(config.instruction, Instruction::Colour | Instruction::Relation);
    let kind = *kinds.iter().find(|k| !needs_distractors || k.placement() != Placement::OnTable)?;
    let mut objects: Vec<Object> = Vec::new();
    let put = |rng: &mut Rng, objects: &mut Vec<Object>, kind: Kind, colour: Colour, room: usize, near: Near| {
        let o = place_object(rng, &layout, objects, kind, colour, room, near)?;
        objects.push(o);
        Some(objects.len() - 1)
    };
    if kind.placement() == Placement::OnTable {
        let colour = *rng.choose(Kind::Table.colours())?;
        put(rng, &mut objects, Kind::Table, colour, target_room, Near::default())?;
    }
    let mut colours = kind.colours().to_vec();
    rng.shuffle(&mut colours);
    // Kinds the filler furniture must not repeat, so the instruction stays unambiguous.
    let mut unique = vec![kind];
    let target;
    let mut anchor = None;
    match config.instruction {
        Instruction::Name | Instruction::CommonSense | Instruction::Complex => {
            target = put(rng, &mut objects, kind, colours[0], target_room, Near::default())?;
        }
        Instruction::Colour => {
            target = put(rng, &mut objects, kind, colours[0], target_room, Near::default())?;
            let others = 1 + rng.below(2);
            for &c in colours.iter().skip(1).take(others) {
                let room = rng.below(layout.rooms.len());
                put(rng, &mut objects, kind, c, room, Near::default())?;
            }
        }
        Instruction::Relation => {
            let a_kind =
                *kinds.iter().find(|&&k| k != kind && k.placement() != Placement::OnTable && k != Kind::Table)?;
            let colour = *rng.choose(a_kind.colours())?;
            let a = put(rng, &mut objects, a_kind, colour, target_room, Near::default())?;
            let (ax, az) = (objects[a].x, objects[a].z);
            let close = Near { within: Some((ax, az, 2.2)), beyond: None };
            target = put(rng, &mut objects, kind, colours[0], target_room, close)?;
            let d = objects[target].distance(ax, az);
            let far = Near { within: None, beyond: Some((ax, az, d + 1.5)) };
            let room = rng.below(layout.rooms.len());
            put(rng, &mut objects, kind, colours[1 % colours.len()], room, far)?;
            unique.push(a_kind);
            anchor = Some(a);
        }
    }
    furnish(rng, &layout, &mut objects, &kinds, &unique, config.objects_per_room);

    let mut obstacles: Vec<_> = layout.walls.iter().map(|w| w.rect(WALL_HALF)).collect();
    obstacles.extend(objects.iter().filter(|o| o.obstacle()).map(Object::footprint));
    let walk = Walk::new(layout.width, layout.depth, config.step_size as f32, &obstacles);
    let t = &objects[target];
    let reach = config.success_distance as f32;
    let min_distance = if relaxed { 0.0 } else { config.min_start_distance as f32 };
    let mut cells: Vec<(i32, i32)> = walk
        .free_cells()
        .filter(|&(_, (x, z))| {
            let d = t.distance(x, z);
            let room = layout.room_at(x, z);
            let room_ok = !config.target_in_other_room || relaxed || room.is_some_and(|r| r != target_room);
            d > reach + 0.5 * config.step_size as f32 && d >= min_distance && room_ok
        })
        .map(|(cell, _)| cell)
        .collect();
    rng.shuffle(&mut cells);
    let mut start = None;
    for &(i, j) in cells.iter().take(8) {
        // Facing open floor: a first view of a wall or a fridge door from 20 cm shows nothing.
        let open: Vec<u8> = (0..4u8)
            .filter(|&h| {
                let p = Pose { i, j, heading: h, pitch: 0 };
                walk.apply(p, Action::MoveAhead).and_then(|q| walk.apply(q, Action::MoveAhead)).is_some()
            })
            .collect();
        let heading = rng.choose(&open).copied().unwrap_or_else(|| rng.below(4) as u8);
        let pose = Pose { i, j, heading, pitch: 0 };
        let reached = |x: f32, z: f32| t.distance(x, z) <= reach;
        if walk.plan(pose, reached).is_some_and(|p| p.len() <= config.max_actions_per_episode as usize) {
            start = Some(pose);
            break;
        }
    }
    let start = start?;
    let instruction = instruction(rng, config.instruction, &objects, target, anchor);
    let mut tris = layout.mesh();
    for (i, o) in objects.iter().enumerate() {
        tris.extend(o.mesh(u8::try_from(i + 1).expect("at most 255 objects")));
    }
    Some(Task { layout, objects, target, instruction, start, walk, tris })
}

/// Adds filler furniture to every room up to its drawn count, never repeating `unique`
/// kinds; a kind that does not fit is skipped.
fn furnish(
    rng: &mut Rng,
    layout: &Layout,
    objects: &mut Vec<Object>,
    kinds: &[Kind],
    unique: &[Kind],
    per_room: [u32; 2],
) {
    let mut bag: Vec<Kind> = Vec::new();
    for room in 0..layout.rooms.len() {
        let want = per_room[0] as usize + rng.below((per_room[1] - per_room[0] + 1) as usize);
        let mut tries = 0;
        while objects.iter().filter(|o| o.room == room).count() < want && tries < 3 * want {
            tries += 1;
            if bag.is_empty() {
                // Tables first, so laptops and mugs later in the bag have somewhere to stand.
                bag = kinds.iter().copied().filter(|k| !unique.contains(k)).collect();
                rng.shuffle(&mut bag);
                bag.sort_by_key(|k| *k != Kind::Table);
                bag.reverse();
            }
            let kind = bag.pop().expect("the bag was just filled");
            let colour = *rng.choose(kind.colours()).expect("every kind has colours");
            if let Some(o) = place_object(rng, layout, objects, kind, colour, room, Default::default()) {
                objects.push(o);
            }
        }
    }
}

/// The nearest other object of a kind that occurs once, for "next to the X".
fn neighbour(objects: &[Object], target: usize) -> Option<&Object> {
    let t = &objects[target];
    objects
        .iter()
        .enumerate()
        .filter(|(i, o)| *i != target && o.kind != t.kind && objects.iter().filter(|p| p.kind == o.kind).count() == 1)
        .map(|(_, o)| o)
        .min_by(|a, b| a.distance(t.x, t.z).total_cmp(&b.distance(t.x, t.z)))
}

fn instruction(rng: &mut Rng, how: Instruction, objects: &[Object], target: usize, anchor: Option<usize>) -> String {
    let t = &objects[target];
    let (kind, colour) = (t.kind.name(), t.colour.name());
    match how {
        Instruction::Name => format!("Navigate to the {kind}."),
        Instruction::Colour => format!("Navigate to the {colour} {kind}."),
        Instruction::Relation => {
            let a = anchor.map(|a| objects[a].kind.name()).unwrap_or("wall");
            format!("Navigate to the {kind} next to the {a}.")
        }
        Instruction::CommonSense => format!("{} Navigate to the object that helps with this.", t.kind.purpose()),
        Instruction::Complex => {
            let near = neighbour(objects, target).map(|o| format!(" near the {}", o.kind.name())).unwrap_or_default();
            let templates = [
                "I just got home after a long day and the house is quiet. Before anything else, please go over to the {colour} {kind}{near} and stop right next to it.",
                "My friend is visiting this afternoon and I am still tidying up, so the other rooms can wait. Could you walk to the {colour} {kind}{near}? Stop once you are close to it.",
                "There is no rush, and you can ignore everything else in the house: your only job is to reach the {colour} {kind}{near}.",
            ];
            templates[rng.below(templates.len())]
                .replace("{colour}", colour)
                .replace("{kind}", kind)
                .replace("{near}", &near)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_name_the_target_unambiguously() {
        for (how, n) in [
            (Instruction::Name, 1),
            (Instruction::Colour, 0),
            (Instruction::Relation, 0),
            (Instruction::CommonSense, 1),
            (Instruction::Complex, 1),
        ] {
            let config = Config { instruction: how, ..Config::default() };
            for seed in 0..100 {
                let task = Task::generate(&config, seed);
                let t = task.target();
                let same: Vec<&Object> = task.objects.iter().filter(|o| o.kind == t.kind).collect();
                if n == 1 {
                    assert_eq!(same.len(), 1, "{how:?} seed {seed}");
                } else {
                    assert!(same.len() >= 2, "{how:?} seed {seed}: a distractor of the same kind");
                }
                if how == Instruction::Colour {
                    assert_eq!(same.iter().filter(|o| o.colour == t.colour).count(), 1);
                    assert!(task.instruction.contains(t.colour.name()));
                }
                if how == Instruction::Relation {
                    let a = task
                        .objects
                        .iter()
                        .find(|o| task.instruction.ends_with(&format!("next to the {}.", o.kind.name())))
                        .unwrap();
                    for other in same.iter().filter(|o| **o != t) {
                        assert!(other.distance(a.x, a.z) >= t.distance(a.x, a.z) + 1.5, "seed {seed}");
                    }
                }
                if how != Instruction::CommonSense {
                    assert!(task.instruction.contains(t.kind.name()), "{}", task.instruction);
                }
            }
        }
    }

    #[test]
    fn the_start_is_away_from_the_target_and_in_another_room_when_asked() {
        let config = Config { rooms: 3, target_in_other_room: true, min_start_distance: 4.0, ..Config::default() };
        for seed in 0..100 {
            let task = Task::generate(&config, seed);
            let (x, z) = task.walk.centre(&task.start);
            assert!(task.target().distance(x, z) >= 4.0, "seed {seed}");
            assert_ne!(task.layout.room_at(x, z), Some(task.target().room), "seed {seed}");
        }
    }
}
