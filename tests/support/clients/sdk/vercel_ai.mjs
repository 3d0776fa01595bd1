// Vercel AI SDK (`ai` + `@ai-sdk/openai`): streamText with a tool and a two-step agent loop.
// argv[2]: "responses" (the provider's default model, the Responses API) or "chat" (Chat Completions).
// Forward mode: the real api.openai.com through Node's fetch with NODE_USE_ENV_PROXY (set by
// `retimer run`); reverse mode: SDK_BASE is retimer's plain-HTTP address.
// Prints {"calls": [{"text", "tool", "wall"}], "wall": seconds in the LLM calls}.
// The packages come from scripts/install-clients (.venv/clients/npm, or RETIMER_CLIENTS_NPM).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const npm = process.env.RETIMER_CLIENTS_NPM ?? new URL("../../../.venv/clients/npm/", import.meta.url).pathname;
const resolve = createRequire(`${npm}/package.json`).resolve;
const { createOpenAI } = await import(pathToFileURL(resolve("@ai-sdk/openai")).href);
const { jsonSchema, stepCountIs, streamText, tool } = await import(pathToFileURL(resolve("ai")).href);

const mode = process.argv[2] ?? "responses";
const base = process.env.SDK_BASE;
const openai = createOpenAI({ apiKey: process.env.OPENAI_API_KEY ?? "sk-test", ...(base ? { baseURL: `${base}/v1` } : {}) });
const model = mode === "chat" ? openai.chat("gpt-4o-mini") : openai("gpt-5");
// an untimed warm-up call first (see common.py's WARMUP): the first call's setup costs Node ~0.1 s
const warm = streamText({ model, prompt: "warm up", maxRetries: 0 });
for await (const _ of warm.textStream) { /* consume */ }
const warmText = await warm.text;

let last = performance.now();
const stepWalls = [];
const result = streamText({
  onStepFinish: () => { const now = performance.now(); stepWalls.push((now - last) / 1000); last = now; },
  model,
  prompt: "What is the weather in Paris?",
  tools: {
    get_weather: tool({
      description: "Current weather for a city",
      inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
      execute: async () => "18 degrees and sunny",
    }),
  },
  stopWhen: stepCountIs(2),
  maxRetries: 0,
});
for await (const _ of result.textStream) { /* consume */ }
const steps = await result.steps;
const calls = [{ text: warmText, tool: null, wall: 0, warmup: true }, ...steps.map((s, i) => {
  const tc = s.toolCalls[0];
  return { text: s.text, tool: tc ? { name: tc.toolName, arguments: tc.input } : null, wall: stepWalls[i] };
})];
const wall = stepWalls.reduce((a, b) => a + b, 0);
process.stdout.write(JSON.stringify({ calls, wall }) + "\n");
