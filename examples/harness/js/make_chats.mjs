// Writes chats.jsonl, the conversations the agent's SFT starts from (as the Python example's
// make_chats.py): every task once with each operation, a calculator call, its answer, then
// that expression as the answer, right or not; which operation makes the target is left to RL.
//   node make_chats.mjs > chats.jsonl
import { OPS, TOOLS, calculate, firstMessages, task } from "./countdown.mjs";

const seen = new Map();
for (let seed = 1 << 30; seed < (1 << 30) + 2000; seed++) {
  const t = task(seed);
  seen.set(`${t.a} ${t.b} ${t.target}`, t);
}
const tasks = [...seen.values()].sort((x, y) => x.a - y.a || x.b - y.b || x.target - y.target);
for (const t of tasks) {
  for (const op of OPS) {
    const expression = `${t.a}${op}${t.b}`;
    const call = { id: "call_0", type: "function", function: { name: "calculate", arguments: JSON.stringify({ expression }) } };
    const messages = [
      ...firstMessages(t),
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: "call_0", content: calculate(expression) },
      { role: "assistant", content: expression },
    ];
    console.log(JSON.stringify({ messages, tools: TOOLS }));
  }
}
