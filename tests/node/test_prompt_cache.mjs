// The prompt cache (DELTAFIN_PROMPT_CACHE): a conversation resumed after the server restarts reads
// its earlier prompt's State from disk and prefills only its new turn. Checked with the official
// `openai` and `@anthropic-ai/sdk` clients on the bundled k3-mini: cached_tokens (and Anthropic's
// cache_read_input_tokens) is the earlier prompt's size, the reply equals a server that prefills
// everything (DELTAFIN_PROMPT_CACHE=off), and it comes in less than half that server's time. A
// damaged entry and an entry of another model are refused with a log line and the prompt is
// prefilled; the folder's bound removes the least recently used entries first.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { BUNDLED, cleanup, scratch, startServer, stopServer, synth } from "./serve_harness.mjs";

const NAME = "k3-mini";
let dir, cache;

// A system prompt long enough that prefilling it takes far longer than reading its State.
const rules = Array.from({ length: 60 }, (_, i) =>
  `Rule ${i + 1}: when the user asks about animal number ${i + 1}, answer in one short sentence and name its habitat.`);
const system = { role: "system", content: `You are a careful assistant.\n${rules.join("\n")}` };
const turn1 = [system, { role: "user", content: "What do cats eat?" }];
let reply1; // the first answer, as a client sends it back

before(() => {
  dir = scratch();
  cache = join(dir, "cache");
});
after(() => cleanup(dir));

async function withServer(cacheArg, env, fn) {
  const server = await startServer(BUNDLED, ["--prompt-cache", cacheArg, "-t", "2"], { K3_RESPONSE_MEMO_ENTRIES: "0", ...env }, NAME);
  try {
    return await fn(server, new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 300_000 }));
  } finally {
    assert.equal(await stopServer(server), 0, server.log);
  }
}

async function ask(client, messages) {
  const t0 = performance.now();
  const r = await client.chat.completions.create({ model: NAME, messages, max_tokens: 12 });
  const m = r.choices[0].message;
  return { text: (m.reasoning_content ?? "") + "|" + (m.content ?? ""), usage: r.usage, seconds: (performance.now() - t0) / 1000, m };
}

const entries = () => readdirSync(cache).filter((f) => f.endsWith(".dfstate"));
const turn2 = () => [...turn1, { role: "assistant", content: reply1.content || reply1.reasoning_content }, { role: "user", content: "And dogs?" }];

// The reference for the second turn: a server that prefills every prompt in full.
let reference;

test("a conversation resumed after a restart prefills only its new turn", async () => {
  const first = await withServer(cache, {}, async (server, client) => {
    const r = await ask(client, turn1);
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    assert.ok(r.usage.prompt_tokens > 1000, `the system prompt is ${r.usage.prompt_tokens} tokens`);
    return r;
  });
  reply1 = first.m;
  // the folder is private, its one entry too
  assert.equal(statSync(cache).mode & 0o777, 0o700);
  assert.equal(entries().length, 1);
  assert.equal(statSync(join(cache, entries()[0])).mode & 0o777, 0o600);

  reference = await withServer("off", {}, async (server, client) => ask(client, turn2()));
  assert.equal(reference.usage.prompt_tokens_details.cached_tokens, 0);

  await withServer(cache, {}, async (server, client) => {
    const r = await ask(client, turn2());
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, first.usage.prompt_tokens);
    assert.equal(r.usage.prompt_tokens, reference.usage.prompt_tokens);
    assert.equal(r.text, reference.text); // exact: the State read back is the State that was written
    assert.ok(r.seconds < reference.seconds / 2, `resumed in ${r.seconds.toFixed(2)} s, prefilled in ${reference.seconds.toFixed(2)} s`);
    assert.match(server.log, /prompt cache: restored \d+ of the prompt's \d+ tokens/);
    // Anthropic's client: the same prompt again, now read whole from this server's new entry... of
    // the second turn's prompt, which the first request just wrote when its reply ended
    const anthropic = new Anthropic({ baseURL: server.url, apiKey: "none", maxRetries: 0, timeout: 300_000 });
    const next = [...turn2().slice(1), { role: "assistant", content: "Dogs eat meat." }, { role: "user", content: "Birds?" }];
    const m = await anthropic.messages.create({ model: NAME, max_tokens: 4, system: system.content, messages: next });
    assert.ok(m.usage.cache_read_input_tokens > 0, JSON.stringify(m.usage));
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    assert.match(metrics, /^deltafin_prompt_cache_hits_total [1-9]/m);
    assert.match(metrics, /^deltafin_prompt_tokens_cached_total [1-9]/m);
  });
});

// Keeps only the first turn's entry (the smallest: the prompt of turn 1).
function onlyFirstEntry() {
  const sizes = entries().map((f) => [f, statSync(join(cache, f)).size]).sort((a, b) => a[1] - b[1]);
  for (const [f] of sizes.slice(1)) rmSync(join(cache, f));
  return join(cache, sizes[0][0]);
}

test("a damaged entry is refused with a log line, removed, and the prompt prefilled", async () => {
  const file = onlyFirstEntry();
  const bytes = readFileSync(file);
  bytes[4 * Math.floor(bytes.length * 0.15)] ^= 0x01; // the lowest bit of a float inside the State: still finite
  writeFileSync(file, bytes);
  await withServer(cache, {}, async (server, client) => {
    const r = await ask(client, turn2());
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(r.text, reference.text);
    assert.match(server.log, /prompt cache: refused: .*is damaged \(its SHA-256 does not match/);
  });
  assert.equal(existsSync(file), false, "the damaged entry is removed");
});

test("an entry of another model is never used", async () => {
  const file = onlyFirstEntry();
  // a tiny synth model's server writes an entry of its own; it takes the k3-mini entry's name
  const tiny = synth(dir, "tiny");
  const other = join(dir, "other-cache");
  await startServer(tiny, ["--prompt-cache", other], { K3_RESPONSE_MEMO_ENTRIES: "0" }).then(async (server) => {
    const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 120_000 });
    await client.chat.completions.create({ model: "deltafin-kimi-k3", messages: turn1, max_tokens: 2 });
    assert.equal(await stopServer(server), 0, server.log);
  });
  const foreign = readdirSync(other).filter((f) => f.endsWith(".dfstate"));
  assert.equal(foreign.length, 1);
  renameSync(join(other, foreign[0]), file);
  await withServer(cache, {}, async (server, client) => {
    assert.match(server.log, /prompt cache: 1 entries of another model, settings or format .* are not used/);
    const r = await ask(client, turn2());
    assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
    assert.equal(r.text, reference.text);
  });
});

test("the bound removes the least recently used entries first; other files are left alone", async () => {
  rmSync(cache, { recursive: true });
  const small = join(dir, "small-cache");
  let log;
  await withServer(small, { DELTAFIN_PROMPT_CACHE_GB: "0.01" }, async (server, client) => {
    log = server;
    writeFileSync(join(small, "notes.txt"), "mine");
    for (let i = 0; i < 14; i++) {
      const q = [{ role: "system", content: `Conversation ${i}. ${rules.slice(0, 3).join(" ")}` }, { role: "user", content: "Hello?" }];
      await client.chat.completions.create({ model: NAME, messages: q, max_tokens: 1 });
    }
    const metrics = await (await fetch(`${server.url}/metrics`)).text();
    const bytes = Number(metrics.match(/^deltafin_prompt_cache_bytes (\d+)/m)[1]);
    assert.ok(bytes <= 10_000_000, `the entries take ${bytes} bytes`);
  });
  // (each entry is written once its reply has gone: the last one by the time the server stopped)
  assert.equal(log.log.match(/prompt cache: kept a prompt of/g).length, 14, log.log);
  const left = readdirSync(small).filter((f) => f.endsWith(".dfstate"));
  assert.ok(left.length >= 2 && left.length < 14, `${left.length} entries left`);
  assert.equal(readFileSync(join(small, "notes.txt"), "utf8"), "mine");
  // the newest conversation is still there, the oldest is not: resumed, they reuse all or nothing
  await withServer(small, { DELTAFIN_PROMPT_CACHE_GB: "0.01" }, async (server, client) => {
    const cont = (i) => [{ role: "system", content: `Conversation ${i}. ${rules.slice(0, 3).join(" ")}` },
      { role: "user", content: "Hello?" }, { role: "assistant", content: "Hi." }, { role: "user", content: "Bye." }];
    assert.ok((await ask(client, cont(13))).usage.prompt_tokens_details.cached_tokens > 0);
    assert.equal((await ask(client, cont(0))).usage.prompt_tokens_details.cached_tokens, 0);
  });
});
