// A Countdown agent on the `openai` npm package with one tool, a calculator. It knows nothing
// of vagen: the client reads OPENAI_BASE_URL and OPENAI_API_KEY (the trainer sets them to the
// episode's own endpoint), the task comes in VAGEN_TASK, and it reports its reward by POST to
// its base URL's /reward. Against another server: VAGEN_TASK='{"seed": 7}' node agent.mjs.
import OpenAI from "openai";
import { TOOLS, check, firstMessages, reward, task } from "./countdown.mjs";

const MAX_CALLS = 4; // up to three guesses, then the answer
const problem = task(JSON.parse(process.env.VAGEN_TASK).seed);
const client = new OpenAI();
const messages = firstMessages(problem);
let answer = null;
for (let i = 0; i < MAX_CALLS; i++) {
  const reply = await client.chat.completions.create({ model: "policy", messages, tools: TOOLS, max_tokens: 48 });
  const message = reply.choices[0].message;
  messages.push(message);
  if (!message.tool_calls?.length) {
    answer = message.content;
    break;
  }
  for (const call of message.tool_calls) {
    let expression = "";
    try {
      expression = JSON.parse(call.function.arguments).expression ?? "";
    } catch {}
    messages.push({ role: "tool", tool_call_id: call.id, content: check(String(expression), problem.target) });
  }
}
const r = reward(answer, problem);
const tried = messages.filter((m) => m.role === "tool").length;
const response = await fetch(`${client.baseURL}/reward`, {
  method: "POST",
  headers: { Authorization: `Bearer ${client.apiKey}`, "Content-Type": "application/json" },
  body: JSON.stringify({ reward: r, success: r === 1, metrics: { tried } }),
});
if (!response.ok) throw new Error(`reporting the reward: ${response.status} ${await response.text()}`);
