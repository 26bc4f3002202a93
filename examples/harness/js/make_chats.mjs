// Writes chats.jsonl, the conversations the agent's SFT starts from (as the Python example's
// make_chats.py): a careless agent. For every task and first guess: a guess the calculator
// says is the target is answered; a wrong one is answered anyway two times in three, and one
// time in three the other operations are tried until one is the target, then answered. RL
// learns to try again whenever the calculator says "not the target".
//   node make_chats.mjs > chats.jsonl
import { OPS, TOOLS, calculate, check, firstMessages, task } from "./countdown.mjs";

const call = (i, expression) => ({
  role: "assistant",
  content: null,
  tool_calls: [{ id: `call_${i}`, type: "function", function: { name: "calculate", arguments: JSON.stringify({ expression }) } }],
});
const result = (i, expression, target) => ({ role: "tool", tool_call_id: `call_${i}`, content: check(expression, target) });

function conversation(t, guesses, answer) {
  const messages = firstMessages(t);
  guesses.forEach((g, i) => messages.push(call(i, g), result(i, g, t.target)));
  messages.push({ role: "assistant", content: answer });
  return { messages, tools: TOOLS };
}

function* conversations(t) {
  const { a, b, target } = t;
  const right = (e) => calculate(e) === String(target);
  for (const first of OPS) {
    const guess = `${a}${first}${b}`;
    yield conversation(t, [guess], guess);
    if (right(guess)) continue;
    yield conversation(t, [guess], guess);
    // The retries take the other operations in either order alike often, so the second guess
    // is the target about half the time.
    const others = OPS.filter((op) => op !== first).map((op) => `${a}${op}${b}`);
    if ((a + b + OPS.indexOf(first)) % 2) others.reverse();
    const guesses = [guess];
    for (const e of others) {
      guesses.push(e);
      if (right(e)) break;
    }
    yield conversation(t, guesses, guesses.at(-1));
  }
}

const seen = new Map();
for (let seed = 1 << 30; seed < (1 << 30) + 2000; seed++) {
  const t = task(seed);
  seen.set(`${t.a} ${t.b} ${t.target}`, t);
}
const tasks = [...seen.values()].sort((x, y) => x.a - y.a || x.b - y.b || x.target - y.target);
for (const t of tasks) for (const c of conversations(t)) console.log(JSON.stringify(c));
