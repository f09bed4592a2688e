// `deltafin serve` driven by the official OpenAI SDK: the models list, chat (whole and streamed
// with include_usage), raw completions, and errors that surface as the SDK's typed errors. The
// random-weight model says nothing meaningful, so answers are checked against `deltafin run` on
// the same rendered prompt (same greedy tokens) and token counts against `deltafin tokenize`.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import {
  DF, MODEL_ID, cleanup, detokenize, runIds, scratch, startServer, stopServer, synth, tokenizeChat, tokenizeText,
} from "./serve_harness.mjs";

let dir, model, server, client, eom;

before(async () => {
  dir = scratch();
  model = synth(dir);
  eom = Number(execFileSync(DF, ["tokenize", "--model", model, "--special"], { input: "<|end_of_msg|>", encoding: "utf8" }).trim());
  // no memo: every answer here is generated, so streamed and whole answers are compared for real;
  // one slot and no queue: the 429 below is checked
  server = await startServer(model, ["--parallel", "1", "--queue", "0"], { K3_RESPONSE_MEMO_ENTRIES: "0" });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  const code = await stopServer(server);
  cleanup(dir);
  assert.equal(code, 0, server.log);
  assert.match(server.log, /serve: stopped after \d+ requests/);
});

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name three rivers in Europe, please." },
];

// What `run` generates for the rendered chat prompt, cut at <|end_of_msg|> as chat replies are.
function expectedChat(maxTokens) {
  const prompt = tokenizeChat(model, dir, { messages });
  const ids = runIds(model, prompt, maxTokens);
  const stop = ids.indexOf(eom);
  return { prompt, completion: stop >= 0 ? stop : ids.length, finish: stop >= 0 ? "stop" : "length" };
}

test("models list and retrieve name the one model", async () => {
  const page = await client.models.list();
  assert.deepEqual(page.data.map((m) => m.id), [MODEL_ID]);
  const m = await client.models.retrieve(MODEL_ID);
  assert.equal(m.id, MODEL_ID);
  assert.equal(m.object, "model");
});

test("chat completion: shape, usage and the same greedy tokens as run", async () => {
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 12, temperature: 0 });
  const want = expectedChat(12);
  assert.equal(r.object, "chat.completion");
  assert.equal(r.model, MODEL_ID);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, "assistant");
  assert.equal(typeof c.message.content, "string");
  assert.equal(typeof c.message.reasoning_content, "string");
  assert.equal(c.finish_reason, want.finish);
  assert.equal(r.usage.prompt_tokens, want.prompt.length);
  assert.equal(r.usage.completion_tokens, want.completion);
  assert.equal(r.usage.total_tokens, want.prompt.length + want.completion);
});

test("streamed chat with include_usage equals the whole answer", async () => {
  const whole = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 20 });
  const stream = await client.chat.completions.create({
    model: MODEL_ID, messages, max_tokens: 20, stream: true, stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  assert.ok(chunks.length >= 3);
  assert.equal(chunks[0].choices[0].delta.role, "assistant");
  assert.equal(new Set(chunks.map((c) => c.id)).size, 1);
  assert.ok(chunks.every((c) => c.object === "chat.completion.chunk"));
  let reasoning = "", content = "";
  for (const ch of chunks.slice(0, -1)) {
    reasoning += ch.choices[0].delta.reasoning_content ?? "";
    content += ch.choices[0].delta.content ?? "";
  }
  const msg = whole.choices[0].message;
  assert.equal(reasoning, msg.reasoning_content);
  assert.equal(content, msg.content);
  const last = chunks.at(-1), fin = chunks.at(-2);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, whole.usage);
  assert.equal(fin.choices[0].finish_reason, whole.choices[0].finish_reason);
  assert.ok(chunks.slice(0, -2).every((c) => c.choices[0].finish_reason === null && c.usage === null));
});

test("raw completion equals run's tokens, from text or token ids, whole or streamed", async () => {
  const prompt = "The capital of France is";
  const ids = tokenizeText(model, prompt);
  const text = detokenize(model, runIds(model, ids, 10));
  const r = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 10 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices[0].text, text);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.deepEqual([r.usage.prompt_tokens, r.usage.completion_tokens], [ids.length, 10]);
  const byIds = await client.completions.create({ model: MODEL_ID, prompt: ids, max_tokens: 10 });
  assert.equal(byIds.choices[0].text, text);
  const stream = await client.completions.create({ model: MODEL_ID, prompt, max_tokens: 10, stream: true });
  let streamed = "";
  for await (const ch of stream) streamed += ch.choices[0]?.text ?? "";
  assert.equal(streamed, text);
});

test("tools are declared to the model; forcing a call makes one", async () => {
  const tools = [{ type: "function", function: { name: "lookup", description: "Look a word up",
    parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] } } }];
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, tools, max_tokens: 3 });
  assert.equal(r.usage.prompt_tokens, tokenizeChat(model, dir, { messages, tools }).length);
  assert.ok(["stop", "length", "tool_calls"].includes(r.choices[0].finish_reason));
  const forced = await client.chat.completions.create({ model: MODEL_ID, messages, tools, tool_choice: "required", max_tokens: 200 });
  assert.equal(forced.choices[0].finish_reason, "tool_calls");
  assert.equal(forced.choices[0].message.tool_calls[0].function.name, "lookup");
});

test("raw completion without max_tokens generates 256 tokens", async () => {
  const r = await client.completions.create({ model: MODEL_ID, prompt: "Once upon a time" });
  assert.equal(r.usage.completion_tokens, 256);
  assert.equal(r.choices[0].finish_reason, "length");
});

test("errors arrive as the SDK's typed errors", async () => {
  await assert.rejects(client.chat.completions.create({ model: "gpt-4o", messages }), (e) =>
    e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages, temperature: 3 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === "temperature");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages, n: 2 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === "n");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages: "hello" }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === "messages" && /expected an array/.test(e.message));
  await assert.rejects(client.completions.create({ model: MODEL_ID, prompt: "x", max_tokens: -1 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === "max_tokens");
  const bad = new OpenAI({ baseURL: `${server.url}/v2`, apiKey: "none", maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.NotFoundError);
});

test("a second request while one generates is refused with 429 and Retry-After", async () => {
  const long = await client.completions.create({ model: MODEL_ID, prompt: "Tell a long story", max_tokens: 8000, stream: true });
  const it = long[Symbol.asyncIterator]();
  await it.next(); // the first token is out: the model is busy
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 2 }), (e) =>
    e instanceof OpenAI.RateLimitError && e.status === 429 && Number(e.headers.get("retry-after")) >= 1);
  long.controller.abort();
  // the abandoned generation stops and the model is free again
  for (let i = 0; ; i++) {
    try {
      const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 2 });
      assert.equal(r.choices.length, 1);
      break;
    } catch (e) {
      if (!(e instanceof OpenAI.RateLimitError) || i >= 100) throw e;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
});
