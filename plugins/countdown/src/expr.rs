//! Arithmetic expressions over whole numbers, evaluated exactly. Built for hostile input:
//! bounded length and nesting, checked arithmetic, no recursion beyond the nesting bound,
//! every failure an `Err` naming the problem.

use std::fmt;

/// Longest expression read, in bytes.
pub const MAX_LEN: usize = 4096;
/// Deepest parenthesis nesting read.
pub const MAX_DEPTH: usize = 64;
/// Longest number literal, in digits.
const MAX_DIGITS: usize = 9;

/// An exact fraction, kept reduced with a positive denominator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ratio {
    num: i128,
    den: i128,
}

impl Ratio {
    pub fn int(n: i128) -> Self {
        Self { num: n, den: 1 }
    }

    pub fn as_int(self) -> Option<i128> {
        (self.den == 1).then_some(self.num)
    }

    fn new(num: i128, den: i128) -> Result<Self, ExprError> {
        if den == 0 {
            return Err(ExprError::DivisionByZero);
        }
        let g = gcd(num.unsigned_abs(), den.unsigned_abs()).max(1) as i128;
        let sign = if den < 0 { -1 } else { 1 };
        Ok(Self { num: sign * num / g, den: sign * den / g })
    }

    fn apply(self, op: Op, r: Ratio) -> Result<Ratio, ExprError> {
        let o = ExprError::Overflow;
        let (a, b, c, d) = (self.num, self.den, r.num, r.den);
        match op {
            Op::Add => Ratio::new(
                a.checked_mul(d).ok_or(o)?.checked_add(c.checked_mul(b).ok_or(o)?).ok_or(o)?,
                b.checked_mul(d).ok_or(o)?,
            ),
            Op::Sub => Ratio::new(
                a.checked_mul(d).ok_or(o)?.checked_sub(c.checked_mul(b).ok_or(o)?).ok_or(o)?,
                b.checked_mul(d).ok_or(o)?,
            ),
            Op::Mul => Ratio::new(a.checked_mul(c).ok_or(o)?, b.checked_mul(d).ok_or(o)?),
            Op::Div => Ratio::new(a.checked_mul(d).ok_or(o)?, b.checked_mul(c).ok_or(o)?),
        }
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

impl Op {
    pub fn symbol(self) -> char {
        match self {
            Op::Add => '+',
            Op::Sub => '-',
            Op::Mul => '*',
            Op::Div => '/',
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExprError {
    Empty,
    TooLong,
    TooDeep,
    NumberTooLong,
    Unexpected(char),
    UnexpectedEnd,
    Unclosed,
    DivisionByZero,
    Overflow,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExprError::Empty => write!(f, "the expression is empty"),
            ExprError::TooLong => write!(f, "the expression is longer than {MAX_LEN} bytes"),
            ExprError::TooDeep => write!(f, "parentheses nest deeper than {MAX_DEPTH}"),
            ExprError::NumberTooLong => write!(f, "a number has more than {MAX_DIGITS} digits"),
            ExprError::Unexpected(c) => write!(f, "unexpected {c:?}"),
            ExprError::UnexpectedEnd => write!(f, "the expression ends too early"),
            ExprError::Unclosed => write!(f, "a parenthesis is not closed"),
            ExprError::DivisionByZero => write!(f, "division by zero"),
            ExprError::Overflow => write!(f, "a value is too large"),
        }
    }
}

/// What an expression came to, and the numbers it used, in order of appearance.
#[derive(Debug, PartialEq, Eq)]
pub struct Evaluated {
    pub value: Ratio,
    pub numbers: Vec<u64>,
}

pub fn evaluate(text: &str) -> Result<Evaluated, ExprError> {
    if text.len() > MAX_LEN {
        return Err(ExprError::TooLong);
    }
    let mut p = Parser { chars: text.chars().filter(|c| !c.is_whitespace()).collect(), pos: 0, numbers: Vec::new() };
    if p.chars.is_empty() {
        return Err(ExprError::Empty);
    }
    let value = p.expr(0)?;
    match p.peek() {
        None => Ok(Evaluated { value, numbers: p.numbers }),
        Some(')') => Err(ExprError::Unexpected(')')),
        Some(c) => Err(ExprError::Unexpected(c)),
    }
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    numbers: Vec<u64>,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn expr(&mut self, depth: usize) -> Result<Ratio, ExprError> {
        let mut acc = self.term(depth)?;
        while let Some(op) = self.peek().and_then(|c| match c {
            '+' => Some(Op::Add),
            '-' | '−' => Some(Op::Sub),
            _ => None,
        }) {
            self.pos += 1;
            acc = acc.apply(op, self.term(depth)?)?;
        }
        Ok(acc)
    }

    fn term(&mut self, depth: usize) -> Result<Ratio, ExprError> {
        let mut acc = self.factor(depth)?;
        while let Some(op) = self.peek().and_then(|c| match c {
            '*' | '×' => Some(Op::Mul),
            '/' | '÷' => Some(Op::Div),
            _ => None,
        }) {
            self.pos += 1;
            acc = acc.apply(op, self.factor(depth)?)?;
        }
        Ok(acc)
    }

    fn factor(&mut self, depth: usize) -> Result<Ratio, ExprError> {
        match self.peek() {
            None => Err(ExprError::UnexpectedEnd),
            Some('(') => {
                if depth >= MAX_DEPTH {
                    return Err(ExprError::TooDeep);
                }
                self.pos += 1;
                let v = self.expr(depth + 1)?;
                if self.peek() != Some(')') {
                    return Err(if self.peek().is_none() {
                        ExprError::Unclosed
                    } else {
                        ExprError::Unexpected(self.chars[self.pos])
                    });
                }
                self.pos += 1;
                Ok(v)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    self.pos += 1;
                }
                if self.pos - start > MAX_DIGITS {
                    return Err(ExprError::NumberTooLong);
                }
                let n: u64 =
                    self.chars[start..self.pos].iter().collect::<String>().parse().map_err(|_| ExprError::Overflow)?;
                self.numbers.push(n);
                Ok(Ratio::int(n as i128))
            }
            Some(c) => Err(ExprError::Unexpected(c)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(s: &str) -> Result<Ratio, ExprError> {
        evaluate(s).map(|e| e.value)
    }

    #[test]
    fn arithmetic_with_precedence_and_exact_fractions() {
        assert_eq!(value("1 + 2 * 3"), Ok(Ratio::int(7)));
        assert_eq!(value("(1 + 2) * 3"), Ok(Ratio::int(9)));
        assert_eq!(value("8 / 3 * 3"), Ok(Ratio::int(8)), "no rounding in between");
        assert_eq!(value("10 - 2 - 3"), Ok(Ratio::int(5)), "left associative");
        assert_eq!(value("6 × 7 ÷ 2"), Ok(Ratio::int(21)));
        assert_eq!(evaluate("(25 - 5) * 3 + 4").unwrap().numbers, vec![25, 5, 3, 4]);
    }

    #[test]
    fn hostile_input_is_an_error_not_a_panic_or_a_hang() {
        assert_eq!(value("5 / (3 - 3)"), Err(ExprError::DivisionByZero));
        assert_eq!(value(&format!("{}1{}", "(".repeat(100), ")".repeat(100))), Err(ExprError::TooDeep));
        assert_eq!(value(&"(".repeat(100_000)), Err(ExprError::TooLong));
        assert_eq!(value("1234567890"), Err(ExprError::NumberTooLong));
        assert_eq!(value(&["999999999"; 4].join("*")), Ok(Ratio::int(999_999_999i128.pow(4))), "fits in i128");
        assert_eq!(value(&["999999999"; 5].join("*")), Err(ExprError::Overflow));
        assert_eq!(value(""), Err(ExprError::Empty));
        assert_eq!(value("1 +"), Err(ExprError::UnexpectedEnd));
        assert_eq!(value("(1 + 2"), Err(ExprError::Unclosed));
        assert_eq!(value("1 + 2)"), Err(ExprError::Unexpected(')')));
        assert_eq!(value("2 ^ 3"), Err(ExprError::Unexpected('^')));
        assert_eq!(value("-3 + 5"), Err(ExprError::Unexpected('-')), "no unary minus");
        for junk in ["\u{0}", "((((", "))", "1..2", "½", "9".repeat(5000).as_str()] {
            let _ = evaluate(junk);
        }
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a model writes, evaluation returns (no panic), and quickly.
        #[test]
        fn any_text_evaluates_or_errs(text in "[0-9()+\\-*/×÷ ]{0,300}|\\PC{0,100}") {
            let started = std::time::Instant::now();
            let _ = evaluate(&text);
            // Generous: the property is "no hang", not speed.
            prop_assert!(started.elapsed() < std::time::Duration::from_secs(1));
        }

        /// Well-formed sums of small numbers evaluate to their plain sum.
        #[test]
        fn sums_are_exact(ns in proptest::collection::vec(1u32..1000, 1..20)) {
            let text = ns.iter().map(u32::to_string).collect::<Vec<_>>().join(" + ");
            let sum: i128 = ns.iter().map(|&n| n as i128).sum();
            prop_assert_eq!(evaluate(&text).unwrap().value, Ratio::int(sum));
        }
    }
}
