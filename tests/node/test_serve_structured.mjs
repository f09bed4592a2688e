// Structured output and tool calls through the official SDKs, checked by a real JSON Schema
// validator (ajv): response_format json_schema (strict) and json_object answers parse and
// validate, whole and streamed; tool_choice "required" and a named function give valid calls
// (streamed as OpenAI's tool_calls deltas, which the SDK's stream helper assembles); "none" and
// parallel_tool_calls false are kept; too small a max_tokens and a bad schema are refused naming
// the field; the Anthropic Messages API's tool_choice any gives valid tool_use blocks. The model
// has random weights: only the constraint makes its answers valid.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { MODEL_ID, cleanup, scratch, startServer, stopServer, synth } from "./serve_harness.mjs";

let dir, model, server, client, anthropic;
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
const MAX = 160;

before(async () => {
  dir = scratch();
  model = synth(dir);
  server = await startServer(model, [], { K3_RESPONSE_MEMO_ENTRIES: "0" });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  const code = await stopServer(server);
  cleanup(dir);
  assert.equal(code, 0, server.log);
});

function valid(schema, value, what) {
  const check = ajv.compile(schema);
  assert.ok(check(value), `${what}: ${JSON.stringify(value)}: ${ajv.errorsText(check.errors)}`);
}

const person = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 12 },
    age: { type: "integer" },
    tags: { type: "array", items: { enum: ["a", "b", "c"] }, maxItems: 2 },
  },
  required: ["name", "age", "tags"],
  additionalProperties: false,
};
const messages = [{ role: "user", content: "Describe a person as JSON." }];

async function streamed(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let content = "", finish = null;
  const calls = [];
  for await (const ch of stream) {
    const d = ch.choices[0]?.delta ?? {};
    content += d.content ?? "";
    for (const tc of d.tool_calls ?? []) {
      calls[tc.index] ??= { name: "", arguments: "" };
      if (tc.function?.name) calls[tc.index].name += tc.function.name;
      calls[tc.index].arguments += tc.function?.arguments ?? "";
      if (tc.id) calls[tc.index].id = tc.id;
    }
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  return { content, calls, finish };
}

test("response_format json_schema: the answer validates, whole and streamed alike", async () => {
  const params = { model: MODEL_ID, messages, max_tokens: MAX,
    response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } } };
  const r = await client.chat.completions.create(params);
  assert.equal(r.choices[0].finish_reason, "stop");
  const value = JSON.parse(r.choices[0].message.content);
  valid(person, value, "whole");
  const s = await streamed(params);
  assert.equal(s.content, r.choices[0].message.content);
  assert.equal(s.finish, "stop");
  // with sampling too, every seed's answer validates
  for (const seed of [1, 2, 3]) {
    const t = await client.chat.completions.create({ ...params, temperature: 1, seed });
    valid(person, JSON.parse(t.choices[0].message.content), `seed ${seed}`);
  }
});

// What pydantic and zod write for ranges, lengths, item counts, patterns and formats.
const booking = {
  type: "object",
  properties: {
    age: { type: "integer", minimum: 0, maximum: 150 },
    score: { type: "number", exclusiveMinimum: 0, maximum: 1 },
    step: { type: "integer", multipleOf: 5, minimum: 0, maximum: 50 },
    code: { type: "string", pattern: "^[A-Z]{2}-\\d{3}$" },
    email: { type: "string", format: "email", maxLength: 40 },
    id: { type: "string", format: "uuid" },
    day: { type: "string", format: "date" },
    seats: { type: "array", items: { type: "integer", minimum: 1, maximum: 9 }, minItems: 1, maxItems: 3 },
  },
  required: ["age", "score", "step", "code", "email", "id", "day", "seats"],
  additionalProperties: false,
};

test("json_schema with ranges, patterns and formats: every seed's answer validates", async () => {
  const params = { model: MODEL_ID, messages, max_tokens: 600,
    response_format: { type: "json_schema", json_schema: { name: "booking", strict: true, schema: booking } } };
  for (const seed of [undefined, 1, 2, 3]) {
    const r = await client.chat.completions.create(seed === undefined ? params : { ...params, temperature: 1, seed });
    assert.equal(r.choices[0].finish_reason, "stop");
    valid(booking, JSON.parse(r.choices[0].message.content), `seed ${seed}`);
  }
});

test("response_format json_object: the answer is a JSON object", async () => {
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: MAX, response_format: { type: "json_object" } });
  const v = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof v, "object");
  assert.ok(v !== null && !Array.isArray(v));
});

const weather = { type: "object", properties: { city: { type: "string", minLength: 1, maxLength: 16 },
  unit: { enum: ["C", "F"] } }, required: ["city", "unit"], additionalProperties: false };
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: weather } },
  { type: "function", function: { name: "get_time", description: "Time in a zone",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 8 } }, required: ["zone"] } } },
];
const ask = [{ role: "user", content: "What is the weather in Paris?" }];
const schemaOf = (name) => tools.find((t) => t.function.name === name).function.parameters;

test("tool_choice required: valid calls, whole and streamed as OpenAI's deltas", async () => {
  const params = { model: MODEL_ID, messages: ask, tools, tool_choice: "required", max_tokens: MAX };
  const r = await client.chat.completions.create(params);
  const calls = r.choices[0].message.tool_calls;
  assert.equal(r.choices[0].finish_reason, "tool_calls");
  assert.ok(calls.length >= 1);
  for (const c of calls) {
    assert.equal(c.type, "function");
    valid(schemaOf(c.function.name), JSON.parse(c.function.arguments), c.function.name);
  }
  const s = await streamed(params);
  assert.equal(s.finish, "tool_calls");
  assert.deepEqual(s.calls.map((c) => [c.name, c.arguments]), calls.map((c) => [c.function.name, c.function.arguments]));
  assert.ok(s.calls.every((c) => /^call_/.test(c.id)));
  // the SDK's own stream helper assembles the same calls
  const runner = client.chat.completions.stream(params);
  const final = await runner.finalChatCompletion();
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function.arguments), calls.map((c) => c.function.arguments));
});

test("a named function is the one called; parallel_tool_calls false makes one call", async () => {
  const r = await client.chat.completions.create({ model: MODEL_ID, messages: ask, tools, max_tokens: MAX,
    tool_choice: { type: "function", function: { name: "get_time" } } });
  const calls = r.choices[0].message.tool_calls;
  assert.ok(calls.length >= 1 && calls.every((c) => c.function.name === "get_time"));
  calls.forEach((c) => valid(schemaOf("get_time"), JSON.parse(c.function.arguments), "get_time"));
  const one = await client.chat.completions.create({ model: MODEL_ID, messages: ask, tools, max_tokens: MAX,
    tool_choice: "required", parallel_tool_calls: false });
  assert.equal(one.choices[0].message.tool_calls.length, 1);
});

test("tool_choice none and auto: no forced call", async () => {
  const none = await client.chat.completions.create({ model: MODEL_ID, messages: ask, tools, tool_choice: "none", max_tokens: 40 });
  assert.equal(none.choices[0].message.tool_calls, undefined);
  assert.notEqual(none.choices[0].finish_reason, "tool_calls");
  const auto = await client.chat.completions.create({ model: MODEL_ID, messages: ask, tools, tool_choice: "auto", max_tokens: 8 });
  assert.ok(["stop", "length", "tool_calls"].includes(auto.choices[0].finish_reason));
});

test("refusals name the field", async () => {
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 3,
    response_format: { type: "json_schema", json_schema: { name: "p", strict: true, schema: person } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "max_tokens");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: MAX,
    response_format: { type: "json_schema", json_schema: { name: "p", schema: { type: "object", properties: { a: { type: "string", format: "uri" } } } } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "response_format");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages: ask, tools, max_tokens: MAX,
    tool_choice: { type: "function", function: { name: "nope" } } }),
  (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
  await assert.rejects(client.chat.completions.create({ model: MODEL_ID, messages: ask, max_tokens: MAX, tool_choice: "required" }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === "tool_choice");
});

test("Anthropic tool_choice any: tool_use blocks with valid input, whole and streamed", async () => {
  const atools = tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
  const params = { model: MODEL_ID, max_tokens: MAX, messages: ask, tools: atools, tool_choice: { type: "any" } };
  const m = await anthropic.messages.create(params);
  assert.equal(m.stop_reason, "tool_use");
  const uses = m.content.filter((b) => b.type === "tool_use");
  assert.ok(uses.length >= 1);
  uses.forEach((u) => { assert.match(u.id, /^toolu_/); valid(schemaOf(u.name), u.input, u.name); });
  const final = await anthropic.messages.stream(params).finalMessage();
  assert.deepEqual(final.content.filter((b) => b.type === "tool_use").map((b) => [b.name, b.input]), uses.map((b) => [b.name, b.input]));
  const named = await anthropic.messages.create({ ...params, tool_choice: { type: "tool", name: "get_time", disable_parallel_tool_use: true } });
  const calls = named.content.filter((b) => b.type === "tool_use");
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, "get_time");
  const json = await anthropic.messages.create({ model: MODEL_ID, max_tokens: MAX, messages,
    output_config: { format: { type: "json_schema", schema: person } } });
  valid(person, JSON.parse(json.content.filter((b) => b.type === "text").map((b) => b.text).join("")), "output_config");
});
