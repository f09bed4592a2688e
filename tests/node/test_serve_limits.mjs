// Chat answers end: a model caught in a loop (a synth model whose greedy output repeats itself)
// is stopped by the repetition stop (finish_reason length, finish_detail repetition) long before
// the answer limit; without the stop, the answer limit (DELTAFIN_ANSWER_TOKENS) ends it. And
// --served-model-name names the model in answers and the models list. Checked with the official
// `openai` and `@anthropic-ai/sdk` clients.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { cleanup, scratch, startServer, stopServer, synth } from "./serve_harness.mjs";

let dir, model;
const messages = [{ role: "user", content: "Say something." }];

before(() => {
  dir = scratch();
  model = synth(dir, "tiny", ["--embed-scale", "1024"]); // its greedy output loops
});

after(() => cleanup(dir));

async function withServer(args, env, fn) {
  const server = await startServer(model, args, { K3_RESPONSE_MEMO_ENTRIES: "0", ...env }, null);
  try {
    await fn(server);
  } finally {
    assert.equal(await stopServer(server), 0, server.log);
  }
}

test("a loop is stopped by the repetition stop; --served-model-name names the model", async () => {
  await withServer(["--served-model-name", "my-model"], {}, async (server) => {
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
    assert.deepEqual((await openai.models.list()).data.map((m) => m.id), ["my-model"]);
    const r = await openai.chat.completions.create({ model: "my-model", messages });
    assert.equal(r.model, "my-model");
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.choices[0].finish_detail, "repetition");
    assert.ok(r.usage.completion_tokens >= 128 && r.usage.completion_tokens < 1000, JSON.stringify(r.usage));
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0, timeout: 120_000 });
    const m = await anthropic.messages.create({ model: "my-model", max_tokens: 4000, messages });
    assert.equal(m.model, "my-model");
    assert.equal(m.stop_reason, "max_tokens");
    assert.equal(m.finish_detail, "repetition");
    assert.match(server.log, /finish=length\/repetition/);
  });
});

test("without the repetition stop the answer limit ends a chat that sets no max_tokens", async () => {
  await withServer([], { DELTAFIN_REPEAT_STOP: "0", DELTAFIN_ANSWER_TOKENS: "300" }, async (server) => {
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
    const name = (await openai.models.list()).data[0].id;
    assert.match(name, /^tiny/); // the model's own name: its directory's
    const r = await openai.chat.completions.create({ model: name, messages });
    assert.equal(r.choices[0].finish_reason, "length");
    assert.equal(r.choices[0].finish_detail, "thinking"); // it never got out of its thinking
    assert.equal(r.usage.completion_tokens, 300);
    const longer = await openai.chat.completions.create({ model: name, messages, max_tokens: 400 }); // a request may ask for more
    assert.equal(longer.usage.completion_tokens, 400);
  });
});
