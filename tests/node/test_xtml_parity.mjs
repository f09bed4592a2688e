// deltafin tokenize --chat must give the ids of an independent rendering of K3's chat format:
// the segments of docs/MODEL.md 6.3 written out here in JavaScript, each segment encoded on its own
// by real tiktoken (markers as allowed specials, everything else as ordinary text).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { DF, Reference, densePairsVocabDir, synthVocabDir, tmpDir } from "./k3_reference.mjs";

const M = (s) => ({ marker: s });
const open = (tag, attrs = []) => [M("<|open|>"), tag,
  ...attrs.flatMap(([k, v]) => [` ${k}`, '="', v.replace(/&/g, "&amp;").replace(/"/g, "&quot;"), '"']), M("<|sep|>")];
const close = (tag) => [M("<|close|>"), tag, M("<|sep|>")];
const EOM = M("<|end_of_msg|>");

const sortDeep = (v) => Array.isArray(v) ? v.map(sortDeep)
  : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sortDeep(v[k])])) : v;
// Python json.dumps(v) with ", " / ": " separators, for the values used below (no floats that
// JavaScript prints differently from Python's repr).
const pySpaced = (v) => Array.isArray(v) ? `[${v.map(pySpaced).join(", ")}]`
  : v && typeof v === "object" ? `{${Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${pySpaced(x)}`).join(", ")}}`
  : JSON.stringify(v);
const typeName = (v) => v === null ? "null" : Array.isArray(v) ? "array" : typeof v;

function contentSegs(c) {
  if (c == null) return [];
  if (typeof c === "string") return [c];
  const out = [];
  let text = "";
  for (const p of c) {
    if (p.type === "text") text += p.text;
    else { out.push(text, M("<|kimi_image_placeholder|>")); text = ""; }
  }
  return [...out, text];
}

function systemMsg(type, body) {
  return [...open("message", [["role", "system"], ["type", type]]), body.trim(), ...close("message"), EOM];
}

function argSegs(args) {
  let obj;
  try { obj = JSON.parse(args); } catch { obj = undefined; }
  if (!obj || typeof obj !== "object" || Array.isArray(obj))
    return [...open("json", [["type", "object"]]), args, ...close("json")];
  return Object.entries(obj).flatMap(([k, v]) => [...open("argument", [["key", k], ["type", typeName(v)]]),
    typeof v === "string" ? v : pySpaced(v), ...close("argument")]);
}

function render(messages, { tools, effort = "max", thinking = true } = {}) {
  const segs = [];
  if (tools?.length) segs.push(...systemMsg("tool-declare",
    "# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n" + JSON.stringify(sortDeep(tools)) + "\n```"));
  if (thinking) segs.push(...systemMsg("thinking-effort",
    "`thinking_effort` guides on how much to think in your thinking channel (not including the response channel), " +
    "supported values include `low`, `medium`, `high`, and `max`.\nNow the system is invoked with `thinking_effort=" + effort + "`."));
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (m.role === "tool") {
      let j = i;
      while (j < messages.length && messages[j].role === "tool") j++;
      const calls = messages[i - 1]?.tool_calls ?? [];
      calls.forEach((call, k) => {
        for (const t of messages.slice(i, j).filter((t) => t.tool_call_id === call.id))
          segs.push(...open("message", [["role", "tool"], ["tool", call.function.name], ["index", String(k + 1)]]),
            ...contentSegs(t.content), ...close("message"), EOM);
      });
      i = j - 1;
    } else if (m.role === "assistant") {
      segs.push(...open("message", [["role", "assistant"]]));
      if (thinking) {
        const r = m.reasoning_content ?? "";
        segs.push(...open("think"), r.trim() === "" ? "" : r, ...close("think"));
      }
      segs.push(...open("response"), ...contentSegs(m.content), ...close("response"));
      if (m.tool_calls?.length) {
        segs.push(...open("tools"));
        m.tool_calls.forEach((c, k) => segs.push(...open("call", [["tool", c.function.name], ["index", String(k + 1)]]),
          ...argSegs(c.function.arguments), ...close("call")));
        segs.push(...close("tools"));
      }
      segs.push(...close("message"), EOM);
    } else {
      const attrs = [["role", m.role], ...(m.name != null ? [["name", m.name]] : [])];
      segs.push(...open("message", attrs), ...contentSegs(m.content), ...close("message"), EOM);
    }
  }
  segs.push(...open("message", [["role", "assistant"]]), ...open(thinking ? "think" : "response"));
  return segs;
}

const refIds = (ref, segs) => segs.flatMap((s) => typeof s === "string" ? ref.encode(s) : ref.encode(s.marker, true));
const refText = (segs) => segs.map((s) => typeof s === "string" ? s : s.marker).join("");

const TOOLS = [{
  type: "function",
  function: {
    name: "get_weather", description: "Current weather for a city.",
    parameters: { type: "object", required: ["city"], properties: { unit: { enum: ["c", "f"], type: "string" }, city: { type: "string" } } },
  },
}, { type: "function", function: { name: "search", parameters: { type: "object", properties: { q: { type: "string" } } } } }];

const CONVERSATIONS = {
  "spec example": { messages: [{ role: "user", content: "Hello <|open|> & goodbye" }] },
  "system and named user with escaping": {
    messages: [
      { role: "system", content: "You are terse.\n<|close|>message<|sep|> stays text." },
      // escaped values that start and end with punctuation: a segment boundary changes the pieces
      { role: "user", name: '"Bob" (the builder) & co!', content: "Hi! It's me: [BOS] <|end_of_msg|>" },
      { role: "user", name: " spaced ", content: "?" },
    ],
  },
  "assistant history with reasoning": {
    messages: [
      { role: "user", content: "2+2?" },
      { role: "assistant", reasoning_content: "Simple arithmetic.\n", content: "4" },
      { role: "user", content: "And 3+3?" },
      { role: "assistant", reasoning_content: " \n\t ", content: "6" },
      { role: "user", content: "Thanks" },
    ],
    options: { effort: "low" },
  },
  "tool calls and reordered results": {
    messages: [
      { role: "user", content: "Weather in Paris and news?" },
      {
        role: "assistant", reasoning_content: "Two calls.", content: "",
        tool_calls: [
          { id: "c1", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris \\"centre\\"", "\\"q\\" (x)": "?!", "days": 3, "detail": true, "extra": null, "opts": {"z": 1, "a": [1, "x", false]}, "temp": 2.5}' } },
          { id: "c2", type: "function", function: { name: "search", arguments: "not json {" } },
          { id: "c3", type: "function", function: { name: "search", arguments: "[1, 2]" } },
        ],
      },
      { role: "tool", tool_call_id: "c3", content: "third" },
      { role: "tool", tool_call_id: "c1", content: "sunny, 21C" },
      { role: "tool", tool_call_id: "c2", content: "no news" },
      { role: "user", content: "Summarise." },
    ],
    options: { tools: TOOLS, effort: "high" },
  },
  "thinking off with content parts": {
    messages: [
      { role: "user", content: [{ type: "text", text: "Look: " }, { type: "image_url", image_url: { url: "x" } }, { type: "text", text: "what is it?" }, { type: "text", text: " Really?" }] },
      { role: "assistant", content: "A cat." },
      { role: "user", content: null },
    ],
    options: { thinking: false },
  },
};

function dfChat(dir, conv, extra = []) {
  const file = path.join(tmpDir("chat"), "chat.json");
  const o = conv.options ?? {};
  fs.writeFileSync(file, JSON.stringify({ messages: conv.messages, ...(o.tools ? { tools: o.tools } : {}) }));
  const args = ["tokenize", "--model", dir, "--chat", file, ...(o.effort ? ["--effort", o.effort] : []),
    ...(o.thinking === false ? ["--no-thinking"] : []), ...extra];
  const env = { ...process.env };
  delete env.K3_REASONING_EFFORT;
  return execFileSync(DF, args, { encoding: "utf8", env });
}

for (const [vocabName, dir] of [["synthetic vocabulary", synthVocabDir()], ["all byte pairs", densePairsVocabDir(3)]]) {
  const ref = new Reference(dir);
  after(() => ref.free());
  for (const [name, conv] of Object.entries(CONVERSATIONS)) {
    test(`${vocabName}: ${name} renders to the reference's text and ids`, () => {
      const segs = render(conv.messages, conv.options);
      assert.equal(dfChat(dir, conv, ["--text"]), refText(segs));
      const ids = dfChat(dir, conv).trim().split(" ").map(Number);
      assert.deepEqual(ids, refIds(ref, segs));
    });
  }
  test(`${vocabName}: the spec's example has exactly 4 <|open|> ids`, () => {
    const ids = dfChat(dir, CONVERSATIONS["spec example"]).trim().split(" ").map(Number);
    assert.equal(ids.filter((id) => id === ref.special("<|open|>")).length, 4);
  });
}

test("effort medium is refused with a clear message", () => {
  const dir = densePairsVocabDir();
  const file = path.join(tmpDir("chat"), "c.json");
  fs.writeFileSync(file, JSON.stringify([{ role: "user", content: "hi" }]));
  try {
    execFileSync(DF, ["tokenize", "--model", dir, "--chat", file, "--effort", "medium"], { stdio: "pipe" });
    assert.fail("medium was accepted");
  } catch (e) {
    assert.match(String(e.stderr), /--effort: 'medium' is not low, high or max/);
  }
});
