// The independent reference for Deltafin's tokenizer: tiktoken's Rust core (the @dqbd/tiktoken
// WASM build, which compiles pat_str with fancy-regex) configured with a model directory's ranks,
// K3's pattern exactly as published, and its special tokens; plus Moonshot's pre-split
// (400,000-character slices, runs of same-class characters capped at 25,000), written here from
// the description in docs/MODEL.md 6.2 with Python's str.isspace() taken from Python itself.
import { Tiktoken } from "@dqbd/tiktoken/lite";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(here, "../..");
export const DF = process.env.DF || path.join(ROOT, "build/deltafin");
export const PYTHON = process.env.PYTHON || "/usr/bin/python3";

// K3's pat_str verbatim (docs/MODEL.md 6.2); fancy-regex accepts the && class intersections.
export const K3_PATTERN = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
].join("|");

// K3's spellings at their offsets from the first special id (docs/MODEL.md 6.1).
export const K3_SPECIALS = {
  0: "[BOS]", 1: "[EOS]", 2: "<|end_of_msg|>", 3: "<|open|>", 4: "<|close|>", 5: "<|sep|>",
  6: "[start_header_id]", 7: "[end_header_id]", 9: "[EOT]", 18: "<|media_begin|>",
  19: "<|media_content|>", 20: "<|media_end|>", 21: "<|media_pad|>", 65: "<osagent_mode>",
  254: "[UNK]", 255: "[PAD]",
};

let pySpace = null;
function isPySpace(cp) {
  if (!pySpace) {
    const out = execFileSync(PYTHON, ["-c",
      "print(' '.join(str(c) for c in range(0x110000) if chr(c).isspace()))"], { encoding: "utf8" });
    pySpace = new Set(out.trim().split(/\s+/).map(Number));
  }
  return pySpace.has(cp);
}

// Moonshot's _split_whitespaces_or_nonwhitespaces over 400,000-character slices.
export function k3Chunks(text) {
  const cps = Array.from(text);
  const chunks = [];
  for (let s = 0; s < cps.length; s += 400000) {
    const slice = cps.slice(s, s + 400000);
    let runLen = 0, runSpace = slice.length ? isPySpace(slice[0].codePointAt(0)) : false, start = 0;
    for (let i = 0; i < slice.length; i++) {
      const sp = isPySpace(slice[i].codePointAt(0));
      if (sp !== runSpace) { runLen = 1; runSpace = sp; continue; }
      if (++runLen > 25000) { chunks.push(slice.slice(start, i).join("")); start = i; runLen = 1; }
    }
    chunks.push(slice.slice(start).join(""));
  }
  return chunks;
}

export function readVocab(dir) {
  const ranks = fs.readFileSync(path.join(dir, "tiktoken.model"), "utf8");
  const nMergeable = ranks.split("\n").filter((l) => l.length).length;
  const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
  const specials = {};
  for (let i = 0; i < 256; i++) {
    const entry = config.added_tokens_decoder?.[String(nMergeable + i)];
    specials[entry ? entry.content : `<|reserved_token_${nMergeable + i}|>`] = nMergeable + i;
  }
  return { ranks, nMergeable, specials };
}

export class Reference {
  constructor(dir) {
    this.vocab = readVocab(dir);
    this.enc = new Tiktoken(this.vocab.ranks, this.vocab.specials, K3_PATTERN);
  }
  encode(text, trusted = false) {
    const out = [];
    for (const chunk of k3Chunks(text))
      for (const id of trusted ? this.enc.encode(chunk, "all") : this.enc.encode_ordinary(chunk)) out.push(id);
    return out;
  }
  special(spelling) { return this.vocab.specials[spelling]; }
  free() { this.enc.free(); }
}

const made = [];
process.on("exit", () => made.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

export function tmpDir(tag) {
  const dir = fs.mkdtempSync(path.join(process.env.DF_TEST_TMP || os.tmpdir(), `deltafin-${tag}-`));
  made.push(dir);
  return dir;
}

// A model directory with only the tokenizer files of `deltafin synth --preset tiny`.
export function synthVocabDir() {
  const dir = tmpDir("synth");
  execFileSync(DF, ["synth", "--preset", "tiny", "--out", dir, "--quiet"], { stdio: ["ignore", "ignore", "inherit"] });
  return dir;
}

// o200k_base's ranks (shipped with the package, in its compressed "prefix offset tokens..."
// form) as a K3 model directory: tiktoken.model plus K3's specials after them.
export function o200kVocabDir() {
  const dir = tmpDir("o200k");
  const require = (p) => JSON.parse(fs.readFileSync(path.join(here, "node_modules", p), "utf8"));
  const packed = require("@dqbd/tiktoken/encoders/o200k_base.json").bpe_ranks;
  const lines = [];
  for (const line of packed.split("\n").filter(Boolean)) {
    const [, offset, ...tokens] = line.split(" ");
    tokens.forEach((t, i) => { lines[Number(offset) + i] = `${t} ${Number(offset) + i}`; });
  }
  fs.writeFileSync(path.join(dir, "tiktoken.model"), lines.join("\n") + "\n");
  const decoder = {};
  for (const [off, content] of Object.entries(K3_SPECIALS))
    decoder[String(lines.length + Number(off))] = { content, special: true };
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ added_tokens_decoder: decoder }));
  return dir;
}

// An adversarial vocabulary: every single byte and every byte pair, ranked in a seeded random
// order. Any two adjacent bytes of a piece can merge, so a piece boundary in a different place,
// or a different choice among competing merges, changes the ids.
export function densePairsVocabDir(seed = 1) {
  const dir = tmpDir("pairs");
  const tokens = [];
  for (let a = 0; a < 256; a++) tokens.push(Buffer.from([a]));
  for (let a = 0; a < 256; a++) for (let b = 0; b < 256; b++) tokens.push(Buffer.from([a, b]));
  let x = seed >>> 0;
  for (let i = tokens.length - 1; i > 0; i--) {
    x = (x * 1664525 + 1013904223) >>> 0;
    const j = x % (i + 1);
    [tokens[i], tokens[j]] = [tokens[j], tokens[i]];
  }
  fs.writeFileSync(path.join(dir, "tiktoken.model"), tokens.map((t, r) => `${t.toString("base64")} ${r}`).join("\n") + "\n");
  const decoder = {};
  for (const [off, content] of Object.entries(K3_SPECIALS)) decoder[String(tokens.length + Number(off))] = { content };
  fs.writeFileSync(path.join(dir, "tokenizer_config.json"), JSON.stringify({ added_tokens_decoder: decoder }));
  return dir;
}

const parseIds = (line) => (line.trim() === "" ? [] : line.trim().split(" ").map(Number));

// deltafin tokenize on raw bytes (a Buffer or string).
export function dfTokenize(dir, input, extra = []) {
  const out = execFileSync(DF, ["tokenize", "--model", dir, ...extra], { input, maxBuffer: 1 << 30 });
  return parseIds(out.toString("utf8"));
}

// deltafin tokenize --jsonl: many strings in one process.
export function dfTokenizeMany(dir, texts, extra = []) {
  const input = texts.map((t) => JSON.stringify(t)).join("\n") + "\n";
  const out = execFileSync(DF, ["tokenize", "--model", dir, "--jsonl", ...extra], { input, maxBuffer: 1 << 30 });
  const lines = out.toString("utf8").split("\n");
  return texts.map((_, i) => parseIds(lines[i]));
}

export function dfDetokenize(dir, ids) {
  return execFileSync(DF, ["detokenize", "--model", dir], { input: ids.join(" "), maxBuffer: 1 << 30 });
}
