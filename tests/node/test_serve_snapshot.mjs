// Prompt-boundary snapshots (K3_PROMPT_SNAPSHOT): an OpenAI client resends the conversation with
// its earlier replies as plain `content` (no reasoning_content), so the rendered history leaves the
// tokens the server holds right after the previous prompt. With the snapshot the server continues
// from the end of that prompt: cached_tokens equals the previous prompt's size, and the replies are
// the same as from a server that feeds every prompt again (K3_PROMPT_SNAPSHOT=0) and as `run` on the
// rendered prompt.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import {
  DF, MODEL_ID, cleanup, runIds, scratch, startServer, stopServer, synth, tokenizeChat,
} from "./serve_harness.mjs";

const MAX = 10;
let dir, model, eom, on, off;

const connect = (server) => ({
  server, client: new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 60_000 }),
});

before(async () => {
  dir = scratch();
  model = synth(dir);
  eom = Number(execFileSync(DF, ["tokenize", "--model", model, "--special"], { input: "<|end_of_msg|>", encoding: "utf8" }).trim());
  // no memo: every answer is generated
  const env = { K3_RESPONSE_MEMO_ENTRIES: "0" };
  [on, off] = (await Promise.all([
    startServer(model, [], env), startServer(model, [], { ...env, K3_PROMPT_SNAPSHOT: "0" }),
  ])).map(connect);
});

after(async () => {
  const codes = await Promise.all([stopServer(on.server), stopServer(off.server)]);
  cleanup(dir);
  assert.deepEqual(codes, [0, 0], on.server.log + off.server.log);
});

// One answer: the text, finish reason and usage, whole or streamed (with include_usage).
async function ask({ client }, messages, stream = false) {
  const req = { model: MODEL_ID, messages, max_tokens: MAX };
  if (!stream) {
    const r = await client.chat.completions.create(req);
    const m = r.choices[0].message;
    return { reasoning: m.reasoning_content, content: m.content, finish: r.choices[0].finish_reason, usage: r.usage };
  }
  const s = await client.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const a = { reasoning: "", content: "", finish: null, usage: null };
  for await (const ch of s) {
    const c = ch.choices[0];
    a.reasoning += c?.delta.reasoning_content ?? "";
    a.content += c?.delta.content ?? "";
    a.finish = c?.finish_reason ?? a.finish;
    a.usage = ch.usage ?? a.usage;
  }
  return a;
}

// Asks both servers; checks they agree with each other and with `run` on the rendered prompt.
async function both(messages, stream = false) {
  const [a, b] = await Promise.all([ask(on, messages, stream), ask(off, messages)]);
  const prompt = tokenizeChat(model, dir, { messages });
  const ids = runIds(model, prompt, MAX), stop = ids.indexOf(eom);
  assert.deepEqual([a.reasoning, a.content, a.finish], [b.reasoning, b.content, b.finish]);
  assert.equal(a.finish, stop >= 0 ? "stop" : "length");
  for (const u of [a.usage, b.usage]) {
    assert.equal(u.prompt_tokens, prompt.length);
    assert.equal(u.completion_tokens, stop >= 0 ? stop : ids.length);
  }
  return { a, b, cached: a.usage.prompt_tokens_details.cached_tokens, offCached: b.usage.prompt_tokens_details.cached_tokens };
}

// The reply as a client sends it back: content only. The random-weight model seldom leaves its
// think element, so its reasoning text stands in for an empty answer.
const sentBack = (a) => ({ role: "assistant", content: a.content || a.reasoning });

const system = { role: "system", content: "You are terse." };
const questions = ["Name three rivers in Europe.", "Which is longest?", "And the shortest?", "Thanks. One more?"];
const history = [system, { role: "user", content: questions[0] }];

test("the start-up line names the setting; a bad value is refused", async () => {
  assert.match(on.server.log, /prompt snapshot on/);
  assert.match(off.server.log, /prompt snapshot off/);
  await assert.rejects(startServer(model, [], { K3_PROMPT_SNAPSHOT: "yes" }), /K3_PROMPT_SNAPSHOT: 'yes'/);
});

let lastPrompt = 0; // prompt tokens of the last turn asked

test("each resent turn reuses the whole previous prompt; replies equal a full prefill", async () => {
  let prev = 0;
  for (let turn = 1; turn <= 3; turn++) {
    const r = await both(history, turn === 3);
    if (turn > 1) {
      assert.equal(r.cached, prev, `turn ${turn}`);
      assert.ok(r.offCached < prev, `turn ${turn}: without the snapshot ${r.offCached} of ${prev} reused`);
    }
    prev = r.a.usage.prompt_tokens;
    history.push(sentBack(r.a), { role: "user", content: questions[turn] });
  }
  lastPrompt = prev;
});

test("another conversation takes another slot: the first one's slot and snapshot stay in place", async () => {
  const other = [{ role: "system", content: "You are verbose." }, ...history.slice(1)];
  const d = await both(other);
  assert.equal(d.cached, 0);
  // back to the first conversation: its slot still holds its last prompt
  const back = await both(history);
  assert.equal(back.cached, lastPrompt);
  history.push(sentBack(back.a), { role: "user", content: "Bye." });
  const next = await both(history);
  assert.equal(next.cached, back.a.usage.prompt_tokens);
});

test("with one slot, a conversation that diverges earlier is fed again, then snapshots anew", async () => {
  const one = connect(await startServer(model, ["--parallel", "1"], { K3_RESPONSE_MEMO_ENTRIES: "0" }));
  try {
    const cached = async (messages) => (await ask(one, messages)).usage.prompt_tokens_details.cached_tokens;
    const other = [{ role: "system", content: "You are verbose." }, ...history.slice(1)];
    assert.equal(await cached(history), 0);
    assert.equal(await cached(other), 0);
    assert.equal(await cached(history), 0); // the one slot now holds the other conversation
  } finally {
    assert.equal(await stopServer(one.server), 0);
  }
});
