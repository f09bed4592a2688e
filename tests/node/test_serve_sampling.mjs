// Sampling and several clients at once, driven by the official OpenAI SDK: a seed reproduces
// its text and another seed changes it; the server's sampled tokens equal `deltafin run` with
// the same sampling flags (the sampler is keyed by seed and position only); log-probabilities
// are a consistent distribution; three and eight concurrent streamed chats all complete at the
// default settings, with the SDK's retries off so that a 429 would fail the test.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import {
  MODEL_ID, cleanup, detokenize, runIds, scratch, startServer, stopServer, synth, tokenizeChat, tokenizeText,
} from "./serve_harness.mjs";

let dir, model, server, client;

before(async () => {
  dir = scratch();
  model = synth(dir);
  server = await startServer(model);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
});

after(async () => {
  const code = await stopServer(server);
  cleanup(dir);
  assert.equal(code, 0, server.log);
});

const messages = [{ role: "user", content: "Write a short poem about rivers." }];

test("a seed reproduces its sampled text; another seed changes it", async () => {
  const ask = (seed) => client.chat.completions.create({
    model: MODEL_ID, messages, max_tokens: 40, temperature: 1.0, top_p: 0.95, seed,
  });
  const [a, b, c] = [await ask(11), await ask(11), await ask(12)];
  const text = (r) => r.choices[0].message.reasoning_content + "|" + r.choices[0].message.content;
  assert.equal(text(a), text(b));
  assert.notEqual(text(a), text(c));
  const greedy = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 40 });
  assert.notEqual(text(a), text(greedy));
});

test("sampled tokens equal `deltafin run` with the same flags", async () => {
  const prompt = "Once upon a time";
  const ids = tokenizeText(model, prompt);
  for (const [params, flags] of [
    [{ temperature: 0.8, seed: 7 }, ["--temperature", "0.8", "--seed", "7"]],
    [{ temperature: 1.3, top_k: 5, min_p: 0.05, seed: -3 }, ["--temperature", "1.3", "--top-k", "5", "--min-p", "0.05", "--seed", "-3"]],
    [{ top_p: 0.7, presence_penalty: 0.8, frequency_penalty: 0.4, seed: 99 },
      ["--top-p", "0.7", "--presence-penalty", "0.8", "--frequency-penalty", "0.4", "--seed", "99"]],
    [{ frequency_penalty: 1.5 }, ["--frequency-penalty", "1.5"]], // greedy with a penalty
  ]) {
    const r = await client.completions.create({ model: MODEL_ID, prompt: ids, max_tokens: 24, ...params });
    const want = detokenize(model, runIds(model, ids, 24, flags));
    assert.equal(r.choices[0].text, want, JSON.stringify(params));
    const streamed = await client.completions.create({ model: MODEL_ID, prompt: ids, max_tokens: 24, stream: true, ...params });
    let text = "";
    for await (const ch of streamed) text += ch.choices[0]?.text ?? "";
    assert.equal(text, want, "streamed " + JSON.stringify(params));
  }
});

test("log-probabilities: one entry per token, the chosen one among the top ones, greedy picks the best", async () => {
  const r = await client.chat.completions.create({ model: MODEL_ID, messages, max_tokens: 12, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs;
  const entries = [...lp.content, ...(lp.reasoning_content ?? [])];
  assert.equal(entries.length, r.usage.completion_tokens);
  for (const e of entries) {
    assert.equal(e.top_logprobs.length, 3);
    assert.ok(e.logprob <= 0);
    const best = e.top_logprobs[0];
    assert.equal(e.logprob, best.logprob); // greedy: the chosen token is the most probable
    for (let i = 1; i < 3; i++) assert.ok(e.top_logprobs[i].logprob <= e.top_logprobs[i - 1].logprob);
    assert.ok(Array.isArray(e.bytes));
  }
  const p = r.choices[0].logprobs.content.concat(lp.reasoning_content ?? []).map((e) => Math.exp(e.top_logprobs[0].logprob));
  assert.ok(p.every((x) => x > 0 && x <= 1));
  const c = await client.completions.create({ model: MODEL_ID, prompt: "The sea", max_tokens: 6, logprobs: 2 });
  const clp = c.choices[0].logprobs;
  assert.equal(clp.tokens.length, 6);
  assert.equal(clp.tokens.join(""), c.choices[0].text);
  assert.deepEqual(clp.text_offset, clp.tokens.map((_, i) => [...clp.tokens.slice(0, i).join("")].length)); // characters
  assert.ok(clp.top_logprobs.every((o) => Object.keys(o).length >= 1 && Object.keys(o).length <= 2));
});

// n streamed chats at once; each must finish with a finish_reason and the greedy text it gets alone
async function concurrentChats(n) {
  const asks = Array.from({ length: n }, (_, i) => [{ role: "user", content: `Question number ${i}: what is ${i} + ${i}?` }]);
  const alone = [];
  for (const m of asks) alone.push((await client.chat.completions.create({ model: MODEL_ID, messages: m, max_tokens: 16 })).choices[0].message);
  const t0 = Date.now();
  const results = await Promise.all(asks.map(async (m) => {
    const stream = await client.chat.completions.create({ model: MODEL_ID, messages: m, max_tokens: 16, stream: true });
    let reasoning = "", content = "", finish = null;
    for await (const ch of stream) {
      reasoning += ch.choices[0]?.delta?.reasoning_content ?? "";
      content += ch.choices[0]?.delta?.content ?? "";
      finish = ch.choices[0]?.finish_reason ?? finish;
    }
    return { reasoning, content, finish };
  }));
  results.forEach((r, i) => {
    assert.ok(r.finish === "stop" || r.finish === "length", JSON.stringify(r));
    assert.equal(r.reasoning, alone[i].reasoning_content);
    assert.equal(r.content, alone[i].content);
  });
  return Date.now() - t0;
}

test("three concurrent streamed chats all complete at the default settings", async () => {
  await concurrentChats(3);
});

test("eight concurrent streamed chats all complete at the default settings", async () => {
  await concurrentChats(8);
  assert.doesNotMatch(server.log, / 429 /);
});
