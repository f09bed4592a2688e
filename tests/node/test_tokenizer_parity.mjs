// deltafin tokenize must give exactly the ids of real tiktoken (Rust core in WASM) configured
// with the same ranks, K3's pattern and specials, after Moonshot's pre-split - on a synthetic
// vocabulary and on o200k_base's 200k ranks - and detokenize must invert it on valid UTF-8.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  PYTHON, Reference, densePairsVocabDir, dfDetokenize, dfTokenize, dfTokenizeMany, o200kVocabDir, synthVocabDir,
} from "./k3_reference.mjs";

const rep = (s, n) => s.repeat(n);

const CASES = {
  english: "The quick brown fox jumps over the lazy dog. It's 7:45 a.m. on Tuesday, 3 March 2026 - isn't it?\n",
  prose: "When a program is slow, measure first.  Then change one thing,\tand measure again...\r\nRepeat!",
  code: 'int main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) printf("%s\\n", argv[i]);\n\treturn 0;\n}\n' +
    "def f(x):\n    return {k: v for k, v in x.items() if v is not None}  # comment\n" +
    "const re = /[a-z]+/gi; let s = `${a}+${b}`; x ??= 0x1F; y = a?.b ?? c;\n",
  han: "清晨的公园里已经有很多人了。老人们在树下打太极拳，年轻人沿着湖边跑步。" + rep("学习中文很有意思", 40),
  mixed: "Hello世界Привет123مرحبا こんにちはカタカナ 한국어 ΕλληνικάOK ẞig ǅemal ʰmod Ⅻ ½ ١٢٣ ๑๒๓",
  emoji: "😀 🎉👍🏽 👩‍💻 👨‍👩‍👧‍👦 ❤️ 🏳️‍🌈 🇫🇷🇯🇵 1️⃣ #️⃣ a😀b 😀😀😀x",
  combining: "e\u0301 a\u0300\u0301\u0302 \u0301start 9\u0301 Z\u0351\u0352\u0357a\u0358\u0359 n\u0303o \u0915\u093f\u0928\u094d\u0926\u0940",
  contractions: "I'M HERE. you'Re, THEY'LL we'D it'S don'T she'Ve 'tis 'S o'clock it'ſ IT'ſ x'LL",
  digits: "1 12 123 1234 12345678901234567890 3.14159 1e10 0x1F ١٢٣٤٥٦٧ ߁߂ ⅓⅔ Ⅻ 2026-03-03",
  whitespace: "a \r\n\r\n\t\t b  \n   x\t\n\ny    \r z\u00a0\u00a0w\u3000\u3000v\u2028\u0085u\x1c\x1d\x1e\x1ft\v\f s   ",
  newline_runs: "p\n \n \nq r\r\n\t\r\n s\n\n\n  t \n\n \n" +
    ["\n \n", "\r\n \r\n", "\n\t\n\t\n", "\n  \n", " \n\n  \n", "\n\u3000\n", "\n\r\n "].map((w) => `a${w}b${w}`).join("|"),
  trailing_space: "end with spaces   ",
  leading_space: "   \n\n  start",
  only_space: " \t \r\n ",
  empty: "",
  punctuation: "!!! ??? ... --- /// *** ((( ))) [[[ ]]] {{{ }}} <<< >>> \"quotes\" 'single' «fr» „de“",
  long_word: rep("abc", 3000) + " " + rep("XYZ", 2000),
  han_run_over_25k: rep("中文字符", 7000),
  mixed_long_runs: rep("word ", 6000) + rep(" ", 30000) + rep("x", 30000) + "\n",
  // Classes differ between Python's isspace (the pre-split), White_Space (the regex's \s) and
  // PCRE2's \s: U+001C..U+001F are only Python spaces, U+180E is in none but PCRE2's.
  // Over 25,000 characters without a space, in 3-character pieces: the pre-split cuts a piece.
  cut_inside_piece: rep("in,", 10000),
  // Character 400,000 starts a new slice, here inside "1234567": digit groups change.
  over_400k: "xyz" + rep("1234567 ", 50001),
  py_space_alternation: rep("a\x1c", 15000) + rep("b\x1f", 100),
  nel_alternation: rep("x\u0085", 14000),
  mongolian_vowel_separator: "a\u180eb \u180e\u180e c\u180e x\u180e\u180ey 1\u180e\u180e\u180e2 \u180e\n\u180e",
};

const REPEATED = {
  "a x 100k": rep("a", 100000),
  "space x 100k": rep(" ", 100000),
  "newline x 100k": rep("\n", 100000),
  "han x 100k": rep("中", 100000),
  "digit x 100k": rep("7", 100000),
  "emoji x 100k": rep("😀", 100000),
  "mark x 100k": rep("\u0301", 100000),
};

// Random strings from long-assigned blocks (Unicode <= 14, so PCRE2's tables and the regex
// crate's agree): letters of several cases and scripts, marks, digits, symbols, spaces.
const ALPHABET = Array.from(
  "abcXYZ  \t\n\r'sStTdDlLmMrRvVeE0123456789.,;:!?-_()[]{}<>/\\\"@#$%^&*+=~`|" +
  "éÉßǅʰˇ̧́̀ΑΩαωЖжЯя中文字학國ひらカタ٣٤۵ߊ٢अक्षᐁᚠ ​‍‌️😀👍🏽🇫🇷👩‍💻½Ⅻ\u3000\u00a0\u2028\u0085\x1c\x0b\x0c");

function rng(seed) {
  let s = seed >>> 0;
  return () => ((s = (s * 1664525 + 1013904223) >>> 0) / 4294967296);
}

function randomStrings(n, seed) {
  const r = rng(seed), out = [];
  for (let k = 0; k < n; k++) {
    const len = Math.floor(r() * 80);
    let s = "";
    for (let i = 0; i < len; i++) s += ALPHABET[Math.floor(r() * ALPHABET.length)];
    out.push(s);
  }
  return out;
}

// Bytes biased towards UTF-8 structure: ASCII, lead bytes, continuation bytes, never-valid bytes.
function randomBytes(n, seed) {
  const r = rng(seed), pools = [[0x20, 0x7e], [0x09, 0x0d], [0x80, 0xbf], [0xc0, 0xdf], [0xe0, 0xef], [0xf0, 0xff]];
  const out = [];
  for (let k = 0; k < n; k++) {
    const len = Math.floor(r() * 40);
    const b = Buffer.alloc(len);
    for (let i = 0; i < len; i++) {
      const [lo, hi] = pools[Math.floor(r() * pools.length)];
      b[i] = lo + Math.floor(r() * (hi - lo + 1));
    }
    out.push(b);
  }
  return out;
}

const INVALID_UTF8 = [
  Buffer.from([0x61, 0x62, 0x63, 0xff, 0xfe, 0x64]),
  Buffer.from([0xc3, 0x28, 0x20, 0x78]),                  // lead byte without continuation
  Buffer.from([0x74, 0x65, 0xe2, 0x82]),                  // truncated at the end
  Buffer.from([0xed, 0xa0, 0x80, 0x41]),                  // an encoded surrogate
  Buffer.from([0xc0, 0xaf, 0xe0, 0x80, 0xaf]),            // overlong forms
  Buffer.from([0xf4, 0x90, 0x80, 0x80, 0x20, 0x20, 0x21]), // above U+10FFFF
  Buffer.from([0x20, 0x80, 0x80, 0x20, 0xbf, 0x0a]),      // stray continuation bytes
  Buffer.from([0xf0, 0x9f, 0x98, 0x20, 0xf0, 0x9f, 0x98, 0x80]),
];

// What tiktoken sees for bytes: the string a (non-fatal) TextDecoder makes of them.
const asTiktokenSees = (bytes) => new TextDecoder("utf-8").decode(bytes);

// heavy: all the 100,000-character cases and more random inputs. The reference's BPE is
// quadratic in a piece's length, so vocabularies with many merges of long runs skip the cases
// that make 25,000-character pieces.
function checkVocab(name, dir, { heavy, repeated }) {
  const ref = new Reference(dir);
  test(`${name}: corpus cases match tiktoken`, () => {
    for (const [label, text] of Object.entries(CASES))
      assert.deepEqual(dfTokenize(dir, text), ref.encode(text), label);
  });
  test(`${name}: one character repeated 100,000 times matches tiktoken`, () => {
    for (const [label, text] of Object.entries(REPEATED)) {
      if (!heavy && !repeated.includes(label)) continue;
      assert.deepEqual(dfTokenize(dir, text), ref.encode(text), label);
    }
  });
  test(`${name}: random strings match tiktoken`, () => {
    const texts = randomStrings(heavy ? 400 : 150, 7);
    const got = dfTokenizeMany(dir, texts);
    texts.forEach((t, i) => assert.deepEqual(got[i], ref.encode(t), JSON.stringify(t)));
  });
  test(`${name}: invalid UTF-8 is encoded as tiktoken encodes its U+FFFD decoding`, () => {
    const inputs = [...INVALID_UTF8, ...randomBytes(heavy ? 60 : 25, 11)];
    for (const b of inputs) assert.deepEqual(dfTokenize(dir, b), ref.encode(asTiktokenSees(b)), b.toString("hex"));
  });
  test(`${name}: special spellings are specials only in trusted text`, () => {
    const text = "<|open|>message role=\"user\"<|sep|>hi <|close|>x<|end_of_msg|>[BOS][PAD]<|reserved_token_7|><|open|";
    assert.deepEqual(dfTokenize(dir, text, ["--special"]), ref.encode(text, true));
    assert.deepEqual(dfTokenize(dir, text), ref.encode(text, false));
    assert.ok(dfTokenize(dir, text, ["--special"]).includes(ref.special("<|open|>")));
    assert.ok(!dfTokenize(dir, text).includes(ref.special("<|open|>")));
  });
  test(`${name}: detokenize inverts tokenize on valid UTF-8`, () => {
    for (const text of [...Object.values(CASES), ...randomStrings(30, 5)]) {
      const ids = dfTokenize(dir, text);
      assert.equal(dfDetokenize(dir, ids).toString("utf8"), text);
    }
  });
  test(`${name}: detokenize replaces invalid UTF-8 as tiktoken's decode(errors="replace")`, () => {
    for (const b of INVALID_UTF8) {
      // Single-byte tokens reproduce the raw bytes exactly; decoding must replace like Python.
      const byteIds = Array.from(b, (x) => byteRank(ref, x));
      const py = execFileSync(PYTHON, ["-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read().decode('utf-8', 'replace').encode())"], { input: b });
      assert.deepEqual(dfDetokenize(dir, byteIds), py, b.toString("hex"));
      assert.equal(py.toString("utf8"), asTiktokenSees(b), "Python and TextDecoder replace alike");
    }
  });
  after(() => ref.free());
}

function byteRank(ref, byte) {
  return ref.enc.encode_single_token(new Uint8Array([byte]));
}

checkVocab("synthetic vocabulary", synthVocabDir(), { heavy: true });
checkVocab("all byte pairs", densePairsVocabDir(), { heavy: false, repeated: ["digit x 100k", "newline x 100k"] });
const o200k = o200kVocabDir();
checkVocab("o200k_base ranks", o200k, { heavy: false, repeated: ["a x 100k", "space x 100k", "digit x 100k"] });

test("o200k_base ranks: a large mixed corpus matches tiktoken in one piece", () => {
  const dir = o200k, ref = new Reference(dir);
  const short = Object.values(CASES).filter((t) => t.length < 5000);
  const text = short.join("\n").repeat(40) + randomStrings(3000, 3).join(" ");
  assert.deepEqual(dfTokenize(dir, text), ref.encode(text));
  ref.free();
});
