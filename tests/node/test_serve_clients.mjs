// What stock clients meet (issue: real clients, no surprises), checked with the official
// `openai` and `@anthropic-ai/sdk` packages and ajv, on the bundled trained model (models/k3-mini),
// which thinks, answers and calls tools it learned (a "calculate" tool among them):
// - no call of a tool the request did not declare (no tools, other tools, auto, none), on
//   /v1/chat/completions, /v1/responses and /v1/messages; tool_choice none answers something;
// - 30 simultaneous requests from one host each get an HTTP status (200 or 429 with
//   Retry-After), and the refusals are counted in /metrics;
// - the model's own name (k3-mini) or --served-model-name, in answers and both models lists;
// - logprobs over the text the client reads only, reasoning_tokens, a budget spent thinking;
// - the Responses API: plain, streamed, a tool call and its result, a JSON schema;
// - count_tokens equals the prompt tokens a message reports; Anthropic-shaped errors;
// - fields the server does not implement refused by name; min_p 1 accepted; an Anthropic
//   tool_result without its tool_use blamed on its tool_use_id; a bad tool schema refused under
//   auto as under required.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import Ajv from "ajv";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { BUNDLED, startServer, stopServer } from "./serve_harness.mjs";

// the bundled model's own name: its directory's (DF_TEST_MODEL_NAME: the name an older build
// gives it, to see which of these checks it fails besides the name)
const NAME = process.env.DF_TEST_MODEL_NAME ?? "k3-mini";
let server, openai, anthropic;

before(async () => {
  // two slots and a queue of four: 30 requests at once overflow both (the per-client default
  // connection limit is then 2 + 4 + 8 = 14)
  server = await startServer(BUNDLED, ["--parallel", "2", "--queue", "4"], { K3_RESPONSE_MEMO_ENTRIES: "0" }, null);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  const code = await stopServer(server);
  assert.equal(code, 0, server.log);
});

const arithmetic = [{ role: "user", content: "What is 2+2?" }];
const lookupWord = {
  type: "function",
  function: { name: "lookup_word", description: "Look a word up in the dictionary",
    parameters: { type: "object", properties: { word: { type: "string" } }, required: ["word"] } },
};

function callNames(message) { return (message.tool_calls ?? []).map((c) => c.function.name); }

test("the model is called by its own name", async () => {
  const models = await openai.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [NAME]);
  const a = await anthropic.models.list();
  assert.deepEqual(a.data.map((m) => m.id), [NAME]);
  assert.equal(a.data[0].type, "model");
  const r = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 4 });
  assert.equal(r.model, NAME);
  await assert.rejects(openai.chat.completions.create({ model: "deltafin-kimi-k3", messages: arithmetic }), (e) =>
    e instanceof OpenAI.NotFoundError && e.code === "model_not_found");
});

test("no tool the request did not declare is ever called", async () => {
  // with no tools the model still wants its "calculate": it answers in words instead
  const bare = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 120 });
  assert.deepEqual(callNames(bare.choices[0].message), []);
  assert.notEqual(bare.choices[0].finish_reason, "tool_calls");
  assert.ok(bare.choices[0].message.content.length > 0, JSON.stringify(bare));
  // with another tool, under auto: only that one
  const other = await openai.chat.completions.create({ model: NAME, messages: arithmetic, tools: [lookupWord] });
  const names = callNames(other.choices[0].message);
  assert.ok(names.every((n) => n === "lookup_word"), JSON.stringify(names));
  assert.ok(names.length > 0 || other.choices[0].message.content.length > 0);
  // none: a real answer, not an empty one
  const none = await openai.chat.completions.create({ model: NAME, messages: arithmetic, tools: [lookupWord], tool_choice: "none",
    max_tokens: 120 });
  assert.deepEqual(callNames(none.choices[0].message), []);
  assert.ok(none.choices[0].message.content.length > 0, JSON.stringify(none));
  // streamed: no call deltas either
  const stream = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 120, stream: true });
  for await (const ch of stream) assert.equal(ch.choices[0]?.delta?.tool_calls, undefined);
  // Anthropic's endpoint: no tool_use without tools; only the declared one with it
  const m = await anthropic.messages.create({ model: NAME, max_tokens: 120, messages: arithmetic });
  assert.deepEqual(m.content.filter((b) => b.type === "tool_use"), []);
  assert.ok(m.content.some((b) => b.type === "text" && b.text.length > 0), JSON.stringify(m.content));
  const withTool = await anthropic.messages.create({ model: NAME, max_tokens: 200, messages: arithmetic,
    tools: [{ name: "lookup_word", input_schema: lookupWord.function.parameters }] });
  for (const b of withTool.content.filter((b) => b.type === "tool_use")) assert.equal(b.name, "lookup_word");
});

test("a tool schema is judged alike under every tool_choice; strict arguments validate whenever a call is made", async () => {
  const bad = [{ type: "function", function: { name: "f", parameters: "x" } }];
  for (const tool_choice of [undefined, "auto", "none", "required"])
    await assert.rejects(openai.chat.completions.create({ model: NAME, messages: arithmetic, tools: bad, tool_choice, max_tokens: 50 }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === "tools", String(tool_choice));
  const parameters = { type: "object", properties: { expression: { type: "string", maxLength: 20 } }, required: ["expression"],
    additionalProperties: false };
  const validate = new Ajv().compile(parameters);
  const tools = [{ type: "function", function: { name: "calculate", strict: true, parameters } }];
  for (const tool_choice of ["auto", "required"]) {
    const r = await openai.chat.completions.create({ model: NAME, messages: arithmetic, tools, tool_choice, max_tokens: 200 });
    for (const c of r.choices[0].message.tool_calls ?? [])
      assert.ok(validate(JSON.parse(c.function.arguments)), `${tool_choice}: ${c.function.arguments}`);
    if (tool_choice === "required") assert.equal(r.choices[0].message.tool_calls.length >= 1, true);
  }
});

test("30 simultaneous requests from one host each get an HTTP status", async () => {
  const one = () => new Promise((resolve) => {
    const body = JSON.stringify({ model: NAME, messages: arithmetic, max_tokens: 30 });
    const req = http.request(`${server.url}/v1/chat/completions`, { method: "POST", agent: false,
      headers: { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => resolve({ status: res.statusCode, retry: res.headers["retry-after"] }));
    });
    req.on("error", (e) => resolve({ status: 0, error: e.message }));
    req.setTimeout(120_000, () => req.destroy(new Error("no answer")));
    req.end(body);
  });
  const results = await Promise.all(Array.from({ length: 30 }, one));
  for (const r of results) {
    assert.ok(r.status === 200 || r.status === 429, JSON.stringify(r));
    if (r.status === 429) assert.match(r.retry, /^[1-9][0-9]*$/);
  }
  assert.ok(results.some((r) => r.status === 200) && results.some((r) => r.status === 429));
  // the same through the SDK: typed answers, never a connection error
  const sdk = await Promise.allSettled(Array.from({ length: 30 }, () =>
    openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 30 })));
  for (const s of sdk)
    assert.ok(s.status === "fulfilled" || (s.reason instanceof OpenAI.RateLimitError && Number(s.reason.headers.get("retry-after")) >= 1),
      String(s.reason));
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  assert.match(metrics, /deltafin_connections_refused_total\{reason="per_client"\} [1-9]/);
  assert.match(metrics, /deltafin_requests_total\{code="429"\} [1-9]/);
});

test("logprobs cover the text the client reads; reasoning_tokens; a budget spent thinking says so", async () => {
  const r = await openai.chat.completions.create({ model: NAME, messages: [{ role: "user", content: "What does teacher mean?" }],
    logprobs: true, top_logprobs: 2 });
  const c = r.choices[0], lp = c.logprobs;
  const joined = (entries) => Buffer.concat(entries.map((e) => Buffer.from(e.bytes))).toString("utf8");
  assert.equal(joined(lp.content), c.message.content);
  assert.equal(joined(lp.reasoning_content), c.message.reasoning_content);
  assert.ok(!lp.content.concat(lp.reasoning_content).some((e) => /<\|/.test(e.token)));
  const details = r.usage.completion_tokens_details;
  assert.ok(details.reasoning_tokens > 0 && details.reasoning_tokens < r.usage.completion_tokens, JSON.stringify(r.usage));
  // the reasoning and the answer's tokens plus the chat format's markers make up the completion
  assert.ok(lp.content.length + lp.reasoning_content.length < r.usage.completion_tokens);
  const short = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 8 });
  assert.equal(short.choices[0].finish_reason, "length");
  assert.equal(short.choices[0].finish_detail, "thinking");
  assert.equal(short.choices[0].message.content, "");
  assert.equal(short.usage.completion_tokens_details.reasoning_tokens, 8);
});

test("the Responses API: plain, streamed, a tool call and its result, a JSON schema", async () => {
  const plain = await openai.responses.create({ model: NAME, input: "What does teacher mean?", instructions: "Be brief." });
  assert.equal(plain.object, "response");
  assert.equal(plain.status, "completed");
  assert.equal(plain.model, NAME);
  assert.match(plain.id, /^resp_/);
  assert.ok(plain.output_text.length > 0);
  assert.equal(plain.output[0].type, "reasoning");
  const chat = await openai.chat.completions.create({ model: NAME,
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "What does teacher mean?" }] });
  assert.equal(plain.output_text, chat.choices[0].message.content); // the same prompt, greedy
  assert.equal(plain.usage.input_tokens, chat.usage.prompt_tokens);
  assert.equal(plain.usage.output_tokens_details.reasoning_tokens, chat.usage.completion_tokens_details.reasoning_tokens);

  const stream = await openai.responses.create({ model: NAME, input: "What does teacher mean?", instructions: "Be brief.",
    stream: true });
  const events = [];
  let text = "";
  for await (const e of stream) {
    events.push(e);
    if (e.type === "response.output_text.delta") text += e.delta;
  }
  assert.equal(events[0].type, "response.created");
  assert.equal(events.at(-1).type, "response.completed");
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.equal(text, plain.output_text);
  assert.deepEqual(events.at(-1).response.output, plain.output.map((item) => ({ ...item }))
    .map((item) => JSON.parse(JSON.stringify(item).replaceAll(plain.id.slice(5), events.at(-1).response.id.slice(5)))));

  const calc = { type: "function", name: "calculate", description: "Evaluate an arithmetic expression",
    parameters: { type: "object", properties: { expression: { type: "string" } }, required: ["expression"], additionalProperties: false },
    strict: true };
  const called = await openai.responses.create({ model: NAME, input: "What is 2+2?", tools: [calc], tool_choice: "required" });
  const call = called.output.find((o) => o.type === "function_call");
  assert.equal(call.name, "calculate");
  assert.equal(typeof JSON.parse(call.arguments).expression, "string");
  const next = await openai.responses.create({ model: NAME, tools: [calc], input: [
    { role: "user", content: "What is 2+2?" }, call, { type: "function_call_output", call_id: call.call_id, output: "4" }] });
  assert.equal(next.status, "completed");
  assert.ok(next.output_text.length > 0 || next.output.some((o) => o.type === "function_call"));

  const schema = { type: "object", properties: { word: { type: "string" }, letters: { type: "integer" } },
    required: ["word", "letters"], additionalProperties: false };
  const structured = await openai.responses.create({ model: NAME, input: "Spell teacher.",
    text: { format: { type: "json_schema", name: "spelling", schema, strict: true } } });
  assert.ok(new Ajv().compile(schema)(JSON.parse(structured.output_text)), structured.output_text);
  await assert.rejects(openai.responses.create({ model: NAME, input: "x", previous_response_id: plain.id }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === "previous_response_id");
});

test("count_tokens counts what a message reports as its prompt", async () => {
  const params = { model: NAME, system: "Be brief.", messages: [{ role: "user", content: "Name a river." }],
    tools: [{ name: "lookup_word", input_schema: lookupWord.function.parameters }] };
  const counted = await anthropic.messages.countTokens(params);
  const m = await anthropic.messages.create({ ...params, max_tokens: 4 });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  assert.ok(counted.input_tokens > 10);
});

test("Anthropic's endpoints answer in Anthropic's shapes", async () => {
  await assert.rejects(anthropic.messages.create({ model: "nope", max_tokens: 4, messages: arithmetic }), (e) =>
    e instanceof Anthropic.NotFoundError && e.error?.error?.type === "not_found_error");
  await assert.rejects(anthropic.models.retrieve("nope"), (e) =>
    e instanceof Anthropic.NotFoundError && e.error?.error?.type === "not_found_error");
  const one = await anthropic.models.retrieve(NAME);
  assert.equal(one.id, NAME);
  // a tool_result without its tool_use is blamed on what the client sent
  await assert.rejects(anthropic.messages.create({ model: NAME, max_tokens: 4,
    messages: [{ role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "4" }] }] }), (e) =>
    e instanceof Anthropic.BadRequestError && /messages\[0\]\.content\[0\]\.tool_use_id/.test(e.message) && !/\.name/.test(e.message));
});

test("fields the server does not implement are refused by name; min_p 1 is a valid value", async () => {
  const fields = { repetition_penalty: 1.1, top_a: 0.2, web_search_options: {}, prediction: { type: "content", content: "x" },
    best_of: 2, suffix: "x", echo: true };
  for (const [field, value] of Object.entries(fields))
    await assert.rejects(openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 2, [field]: value }), (e) =>
      e instanceof OpenAI.BadRequestError && e.param === field, field);
  const neutral = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 2, repetition_penalty: 1,
    echo: false });
  assert.equal(neutral.choices.length, 1);
  const r = await openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 4, min_p: 1, seed: 1 });
  assert.equal(r.usage.completion_tokens, 4);
  await assert.rejects(openai.chat.completions.create({ model: NAME, messages: arithmetic, max_tokens: 4, min_p: 1.5 }), (e) =>
    e instanceof OpenAI.BadRequestError && e.param === "min_p");
});
