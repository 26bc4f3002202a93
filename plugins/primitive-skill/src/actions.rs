//! VAGEN's action language: `pick(x,y,z)`, `place(x,y,z)`, `push(x1,y1,z1,x2,y2,z2)` in
//! millimetres, each coordinate clipped to the workspace, actions separated by `|`.

use crate::task::Workspace;

/// The three primitives, in VAGEN's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    Pick,
    Place,
    Push,
}

impl Primitive {
    pub const NAMES: [&'static str; 3] = ["pick", "place", "push"];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn arity(self) -> usize {
        if self == Primitive::Push { 6 } else { 3 }
    }
}

/// One parsed action, its coordinates clipped, in millimetres.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    pub primitive: Primitive,
    pub coords: Vec<f64>,
}

impl Skill {
    /// How the action is echoed back: integers where they are integers, as the agent writes.
    pub fn text(&self) -> String {
        let c: Vec<String> = self.coords.iter().map(|v| format_mm(*v)).collect();
        format!("{}({})", self.primitive.name(), c.join(","))
    }

    /// The first point and (push only) the second, in metres, for the worker.
    pub fn points_m(&self) -> ([f64; 3], [f64; 3]) {
        let m = |i: usize| self.coords[i] / 1000.0;
        let a = [m(0), m(1), m(2)];
        let b = if self.coords.len() == 6 { [m(3), m(4), m(5)] } else { a };
        (a, b)
    }
}

fn format_mm(v: f64) -> String {
    if v.fract() == 0.0 { format!("{v:.0}") } else { format!("{v}") }
}

/// What one answer holds: the actions read before the first malformed one, that one (if
/// any), and how many pieces past the per-turn limit were dropped.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub skills: Vec<Skill>,
    pub invalid: Option<String>,
    pub ignored: usize,
}

/// Splits on `separator`, keeps at most `max_per_turn` pieces (VAGEN drops the rest
/// silently) and reads them in order, stopping at the first that is not an action.
pub fn parse(answer: &str, separator: &str, max_per_turn: usize, ws: &Workspace) -> Parsed {
    let mut out = Parsed::default();
    if answer.len() > vagen_sdk::MAX_ANSWER_LEN {
        out.invalid = Some(vagen_sdk::too_long(answer.len(), vagen_sdk::MAX_ANSWER_LEN));
        return out;
    }
    let pieces: Vec<&str> = answer.split(separator).map(str::trim).filter(|p| !p.is_empty()).collect();
    out.ignored = pieces.len().saturating_sub(max_per_turn);
    for piece in pieces.into_iter().take(max_per_turn) {
        match parse_one(piece, ws) {
            Some(skill) => out.skills.push(skill),
            None => {
                out.invalid = Some(piece.to_string());
                break;
            }
        }
    }
    out
}

/// `name(a, b, c)`: the name before the first `(` (any case), numbers up to the first `)`.
/// Unlike VAGEN, which reads a number with Python's `float` (so `nan` and `inf` pass and
/// the simulator gets them), a coordinate must be finite.
fn parse_one(piece: &str, ws: &Workspace) -> Option<Skill> {
    let (name, rest) = piece.split_once('(')?;
    let (params, _) = rest.split_once(')')?;
    let primitive = match name.trim().to_ascii_lowercase().as_str() {
        "pick" => Primitive::Pick,
        "place" => Primitive::Place,
        "push" => Primitive::Push,
        _ => return None,
    };
    let coords: Vec<f64> =
        params.split(',').map(|p| p.trim().parse::<f64>().ok().filter(|v| v.is_finite())).collect::<Option<_>>()?;
    if coords.len() != primitive.arity() {
        return None;
    }
    let coords = coords.iter().enumerate().map(|(i, &v)| ws.clip(i % 3, v)).collect();
    Some(Skill { primitive, coords })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Task;

    fn ws() -> Workspace {
        Task::StackThreeCube.workspace()
    }

    #[test]
    fn reads_vagen_actions_and_clips_them() {
        let p = parse("pick(62,-55,20)|place(75, 33, 50)", "|", 2, &ws());
        assert_eq!(p.invalid, None);
        assert_eq!(p.skills[0].text(), "pick(62,-55,20)");
        assert_eq!(p.skills[1].text(), "place(75,33,50)");
        let far = parse("PUSH(500,-900,0, 0.5,0,300)", "|", 2, &ws());
        assert_eq!(far.skills[0].text(), "push(150,-200,10,0.5,0,200)");
        assert_eq!(far.skills[0].points_m().1, [0.0005, 0.0, 0.2]);
    }

    #[test]
    fn stops_at_the_first_malformed_action_and_drops_extras() {
        let p = parse("pick(1,2,3)|jump(1)|place(1,2,3)", "|", 3, &ws());
        assert_eq!((p.skills.len(), p.invalid.as_deref()), (1, Some("jump(1)")));
        for bad in
            ["pick(1,2)", "place(1,2,3,4)", "pick(a,b,c)", "pick(nan,1,1)", "pick(inf,1,1)", "pick 1,2,3", "pick(1,2,3"]
        {
            let p = parse(bad, "|", 2, &ws());
            assert!(p.skills.is_empty() && p.invalid.as_deref() == Some(bad), "{bad}: {p:?}");
        }
        let p = parse("pick(1,2,3)|place(1,2,30)|pick(1,2,3)", "|", 2, &ws());
        assert_eq!((p.skills.len(), p.ignored), (2, 1));
        let long = "pick(1,2,3)|".repeat(200);
        assert!(parse(&long, "|", 2, &ws()).invalid.unwrap().contains("bytes"));
    }
}
