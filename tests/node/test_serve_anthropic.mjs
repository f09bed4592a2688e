// `deltafin serve` /v1/messages driven by the official Anthropic SDK: whole and streamed
// messages (the stream accumulates to the whole message), thinking and text blocks, usage that
// counts the rendered prompt, stop sequences, a tool conversation rendered exactly as its OpenAI
// form, x-api-key authentication and Anthropic-shaped errors. The random-weight model says
// nothing meaningful, so the text is checked against the OpenAI endpoint's for the same prompt.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { MODEL_ID, cleanup, scratch, startServer, stopServer, synth, tokenizeChat } from "./serve_harness.mjs";

let dir, model, server, client, openai;
const KEY = "test-key-123";

before(async () => {
  dir = scratch();
  model = synth(dir);
  server = await startServer(model, ["--api-key", KEY], { K3_RESPONSE_MEMO_ENTRIES: "0" });
  client = new Anthropic({ baseURL: server.url, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  const code = await stopServer(server);
  cleanup(dir);
  assert.equal(code, 0, server.log);
});

const messages = [{ role: "user", content: "Name three rivers in Europe." }];

test("a message: blocks, stop reason and usage match the OpenAI endpoint's answer", async () => {
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 20, system: "You are terse.", messages });
  const o = await openai.chat.completions.create({
    model: MODEL_ID, max_tokens: 20, messages: [{ role: "system", content: "You are terse." }, ...messages],
  });
  assert.equal(m.type, "message");
  assert.equal(m.role, "assistant");
  assert.equal(m.model, MODEL_ID);
  assert.match(m.id, /^msg_/);
  const thinking = m.content.filter((b) => b.type === "thinking").map((b) => b.thinking).join("");
  const text = m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  assert.equal(thinking, o.choices[0].message.reasoning_content);
  assert.equal(text, o.choices[0].message.content);
  assert.equal(m.stop_reason, o.choices[0].finish_reason === "length" ? "max_tokens" : "end_turn");
  const prompt = tokenizeChat(model, dir, { messages: [{ role: "system", content: "You are terse." }, ...messages] });
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, prompt.length);
  assert.equal(m.usage.output_tokens, o.usage.completion_tokens);
});

test("a streamed message accumulates to the whole one", async () => {
  const whole = await client.messages.create({ model: MODEL_ID, max_tokens: 24, messages });
  const stream = client.messages.stream({ model: MODEL_ID, max_tokens: 24, messages });
  const events = [];
  stream.on("streamEvent", (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(events[0], "message_start");
  assert.equal(events.at(-1), "message_stop");
  assert.equal(events.at(-2), "message_delta");
  assert.equal(events.filter((e) => e === "content_block_start").length, events.filter((e) => e === "content_block_stop").length);
});

test("stop sequences apply to the answer, never to the thinking", async () => {
  const plain = await client.messages.create({ model: MODEL_ID, max_tokens: 40, messages });
  const thinking = plain.content.find((b) => b.type === "thinking").thinking;
  const seq = thinking.slice(1, 4);
  assert.equal(seq.length, 3);
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 40, messages, stop_sequences: [seq, "\u2603never"] });
  assert.deepEqual(m.content, plain.content);
  assert.equal(m.stop_reason, plain.stop_reason);
  assert.notEqual(m.stop_reason, "stop_sequence");
});

test("a trailing assistant message (prefill) is refused, not answered as a new turn", async () => {
  await assert.rejects(client.messages.create({ model: MODEL_ID, max_tokens: 5,
    messages: [...messages, { role: "assistant", content: "The Rhine," }] }),
  (e) => e instanceof Anthropic.BadRequestError && /messages\[1\]/.test(e.message));
});

test("a tool conversation renders as its OpenAI form", async () => {
  const tools = [{ name: "get_weather", description: "Weather of a city",
    input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const conversation = [
    { role: "user", content: "Weather in Paris?" },
    { role: "assistant", content: [{ type: "thinking", thinking: "Use the tool.", signature: "" },
      { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "21C" }] },
  ];
  const m = await client.messages.create({ model: MODEL_ID, max_tokens: 3, tools, messages: conversation });
  const openaiForm = {
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: "", reasoning_content: "Use the tool.", tool_calls: [
        { id: "toolu_1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) } }] },
      { role: "tool", tool_call_id: "toolu_1", content: "21C" },
    ],
    tools: [{ type: "function", function: { name: "get_weather", description: "Weather of a city", parameters: tools[0].input_schema } }],
  };
  assert.equal(m.usage.input_tokens + m.usage.cache_read_input_tokens, tokenizeChat(model, dir, openaiForm).length);
  assert.ok(["max_tokens", "end_turn", "tool_use"].includes(m.stop_reason));
});

test("errors come as the SDK's typed errors", async () => {
  await assert.rejects(client.messages.create({ model: "claude-nope", max_tokens: 5, messages }),
    (e) => e instanceof Anthropic.NotFoundError && e.error?.type === "error" && e.error?.error?.type === "not_found_error");
  await assert.rejects(client.messages.create({ model: MODEL_ID, messages }),
    (e) => e instanceof Anthropic.BadRequestError && /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ model: MODEL_ID, max_tokens: 5, temperature: 1.5, messages }),
    (e) => e instanceof Anthropic.BadRequestError && /temperature/.test(e.message));
  await assert.rejects(client.messages.create({ model: MODEL_ID, max_tokens: 5,
    messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AA==" } }] }] }),
    (e) => e instanceof Anthropic.BadRequestError && /messages\[0\]\.content\[0\]/.test(e.message));
  const stranger = new Anthropic({ baseURL: server.url, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(stranger.messages.create({ model: MODEL_ID, max_tokens: 5, messages }),
    (e) => e instanceof Anthropic.AuthenticationError && e.error?.error?.type === "authentication_error");
});

test("sampling with a seed through the Messages API is reproducible", async () => {
  const ask = () => client.messages.create({ model: MODEL_ID, max_tokens: 30, messages, temperature: 1, top_k: 40,
    metadata: { user_id: "u1" } });
  // no seed field in the Messages API: unseeded sampling draws its own seed each time
  const [a, b] = [await ask(), await ask()];
  assert.equal(a.usage.output_tokens > 0 && b.usage.output_tokens > 0, true);
  const text = (m) => JSON.stringify(m.content);
  const greedy = [await client.messages.create({ model: MODEL_ID, max_tokens: 30, messages }),
    await client.messages.create({ model: MODEL_ID, max_tokens: 30, messages })];
  assert.equal(text(greedy[0]), text(greedy[1])); // without a temperature: greedy, the same every time
  assert.notEqual(text(a), text(b));
});
