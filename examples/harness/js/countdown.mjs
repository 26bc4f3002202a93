// The task and prompts of the Countdown agent (the Python example's, in JavaScript), shared
// by agent.mjs and make_chats.mjs so both speak to the model alike. A task: two numbers
// and a target made from them with +, - or *; the answer is one expression, and the
// calculator's answer says whether a guess makes the target ("4+2 = 6: not the target").

export const TOOLS = [
  {
    type: "function",
    function: {
      name: "calculate",
      description: "Evaluates an arithmetic expression of integers with + - * and says whether it is the target.",
      parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"] },
    },
  },
];
export const SYSTEM =
  "Make the target from the two numbers with one of + - *. Check with the calculator, then answer with the expression.";
export const OPS = ["+", "-", "*"];

// SplitMix64: the task of a seed, the same in every run.
function rng(seed) {
  let s = BigInt.asUintN(64, BigInt(seed));
  return () => {
    s = BigInt.asUintN(64, s + 0x9e3779b97f4a7c15n);
    let z = s;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
  };
}

export function task(seed) {
  const next = rng(seed);
  const draw = (n) => Number(next() % BigInt(n));
  let [a, b] = [2 + draw(6), 2 + draw(6)];
  [a, b] = [Math.max(a, b), Math.min(a, b)];
  let op = OPS[draw(3)];
  if (op === "-" && a === b) op = "+";
  return { a, b, target: Number(calculate(`${a}${op}${b}`)) };
}

export function firstMessages({ a, b, target }) {
  return [
    { role: "system", content: SYSTEM },
    { role: "user", content: `Numbers ${a} ${b}. Target ${target}.` },
  ];
}

// The value of an expression of integers and + - * (no brackets), as text; "error" otherwise.
export function calculate(expression) {
  if (!/^\s*\d+(\s*[-+*]\s*\d+)*\s*$/.test(expression ?? "")) return "error";
  const terms = expression.replace(/\s+/g, "").split(/(?=[-+])/);
  const value = terms.reduce((sum, t) => sum + t.split("*").reduce((p, f) => p * Number(f.replace("+", "")), 1), 0);
  return String(value);
}

// The calculator's answer to the agent: the value of the expression and whether it is the target.
export function check(expression, target) {
  const value = calculate(expression);
  if (value === "error") return value;
  return `${expression} = ${value}: ${value === String(target) ? "the target" : "not the target"}`;
}

// 1 when the answer is an expression of a and b (each once) with one of + - * equal to the target.
export function reward(answer, { a, b, target }) {
  const m = /^\s*(\d+)\s*([-+*])\s*(\d+)\s*$/.exec(answer ?? "");
  if (!m) return 0;
  const used = [Number(m[1]), Number(m[3])].sort((x, y) => x - y);
  if (used[0] !== Math.min(a, b) || used[1] !== Math.max(a, b)) return 0;
  return calculate(answer) === String(target) ? 1 : 0;
}
