// Writes chats.jsonl, the conversations the agent's SFT starts from (as the Python example's
// make_chats.py): a careless agent. For every task and first guess: a guess the calculator
// confirms is answered; a wrong one is answered anyway two times in three, and one time in
// three another operation is tried (then answered if right, else the one left). RL learns
// to try again whenever the calculator disagrees with the target.
//   node make_chats.mjs > chats.jsonl
import { OPS, TOOLS, calculate, firstMessages, task } from "./countdown.mjs";

const call = (i, expression) => ({
  role: "assistant",
  content: null,
  tool_calls: [{ id: `call_${i}`, type: "function", function: { name: "calculate", arguments: JSON.stringify({ expression }) } }],
});
const result = (i, expression) => ({ role: "tool", tool_call_id: `call_${i}`, content: calculate(expression) });

function conversation(t, guesses, answer) {
  const messages = firstMessages(t);
  guesses.forEach((g, i) => messages.push(call(i, g), result(i, g)));
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
    let [second, third] = OPS.filter((op) => op !== first).map((op) => `${a}${op}${b}`);
    if (right(third)) [second, third] = [third, second];
    const again = (a + b + OPS.indexOf(first)) % 2 ? second : third;
    yield conversation(t, [guess, again], right(again) ? again : [second, third].find((e) => e !== again));
  }
}

const seen = new Map();
for (let seed = 1 << 30; seed < (1 << 30) + 2000; seed++) {
  const t = task(seed);
  seen.set(`${t.a} ${t.b} ${t.target}`, t);
}
const tasks = [...seen.values()].sort((x, y) => x.a - y.a || x.b - y.b || x.target - y.target);
for (const t of tasks) for (const c of conversations(t)) console.log(JSON.stringify(c));
