// Constrained decoding checked by a real JSON Schema validator: ajv (2020-12 dialect). The C
// helper tests/helpers/constrain_emit decodes walks that pick, at each step, the best allowed
// token under random logits (a model with random weights) on a synthetic K3-style vocabulary;
// every output must be finished, parse with JSON.parse and validate with ajv, and every tool
// call of a K3 reply (parsed back by Deltafin's chat-format parser) must name a declared function
// and carry arguments that validate against that function's parameters.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const EMIT = path.join(ROOT, "build/tests/helpers/constrain_emit");
const ajv = new Ajv2020({ strict: false, allErrors: true });

function emit(request) {
  const r = spawnSync(EMIT, { input: JSON.stringify({ vocab: 2000, seed: 1, ...request }) });
  const lines = r.stdout.toString().trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
  return { status: r.status, lines, stderr: r.stderr.toString() };
}

function validate(schema, value, what) {
  const check = ajv.compile(schema);
  assert.ok(check(value), `${what}: ${JSON.stringify(value)} does not validate: ${ajv.errorsText(check.errors)}`);
}

const schemas = {
  strictObject: {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 8 },
      age: { type: "integer" },
      score: { type: ["number", "null"] },
      tags: { type: "array", items: { type: "string" }, minItems: 1, maxItems: 3 },
      kind: { enum: ["a", "b", "c\"d"] },
      inner: { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false },
    },
    required: ["name", "age", "score", "tags", "kind", "inner"],
    additionalProperties: false,
  },
  tree: {
    $defs: {
      node: {
        type: "object",
        properties: { v: { type: "integer" }, kids: { type: "array", items: { $ref: "#/$defs/node" }, maxItems: 2 } },
        required: ["v"],
      },
    },
    $ref: "#/$defs/node",
  },
  overlappingObjects: {
    anyOf: [
      { type: "object", properties: { kind: { const: "circle" }, r: { type: "number" } }, required: ["kind", "r"] },
      { type: "object", properties: { kind: { const: "rect" }, w: { type: "number" }, h: { type: "number" } }, required: ["kind", "w", "h"] },
    ],
  },
  unicodeLengths: { type: "array", items: { type: "string", minLength: 2, maxLength: 3 }, minItems: 2, maxItems: 2 },
  map: { type: "object", additionalProperties: { type: "integer" } },
  anything: {},
  mixedItems: { type: "array", items: { anyOf: [{ type: "integer" }, { type: "null" }, { type: "string", maxLength: 2 }] } },
  enums: { enum: [1, 2.5, "x", null, true, [1, "a"], { k: { n: null } }] },
  escapedKeys: {
    type: "object",
    properties: { 'q"k': { type: "string" }, "back\\slash": { type: "number" }, "é\u0001": { type: "boolean" } },
    required: ['q"k', "é\u0001"],
  },
  rootRecursion: { type: ["array", "integer"], items: { $ref: "#" }, maxItems: 3 },
};

for (const [name, schema] of Object.entries(schemas)) {
  test(`${name}: every walk ends in JSON that ajv validates`, () => {
    const { status, lines, stderr } = emit({ schema, walks: 12, budget: 160 });
    assert.equal(status, 0, stderr);
    assert.equal(lines.length, 12);
    for (const [i, out] of lines.entries()) {
      assert.ok(out.done && out.tokens <= 160, `walk ${i}: not finished within the budget`);
      let value;
      assert.doesNotThrow(() => { value = JSON.parse(out.text); }, `walk ${i}: ${out.text}`);
      validate(schema, value, `walk ${i}`);
    }
  });
}

const tools = [
  {
    type: "function",
    function: {
      name: "get_weather",
      strict: true,
      parameters: {
        type: "object",
        properties: { city: { type: "string", minLength: 1 }, unit: { enum: ["c", "f"] }, days: { type: ["integer", "null"] } },
        required: ["city", "unit", "days"],
        additionalProperties: false,
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      parameters: {
        type: "object",
        properties: {
          query: { type: "string" },
          filters: { type: "object", properties: { lang: { type: "string", maxLength: 5 }, year: { type: "integer" } } },
          any: {},
        },
        required: ["query"],
      },
    },
  },
  { type: "function", function: { name: "ping" } },
];

function checkCalls(out, allowed, what) {
  for (const call of out.tool_calls) {
    const tool = tools.find((t) => t.function.name === call.function.name);
    assert.ok(tool && allowed.includes(call.function.name), `${what}: call of ${call.function.name}`);
    let args;
    assert.doesNotThrow(() => { args = JSON.parse(call.function.arguments); }, `${what}: ${call.function.arguments}`);
    validate(tool.function.parameters ?? { type: "object", additionalProperties: false }, args, `${what} ${call.function.name}`);
  }
}

test("tool_choice required: at least one call, each with valid arguments", () => {
  const { status, lines, stderr } = emit({ reply: { tools, tool_choice: "required" }, thinking: true, walks: 10, budget: 400 });
  assert.equal(status, 0, stderr);
  for (const [i, out] of lines.entries()) {
    assert.ok(out.done, `walk ${i}: not finished`);
    assert.ok(out.tool_calls.length >= 1, `walk ${i}: no tool call`);
    checkCalls(out, ["get_weather", "search", "ping"], `walk ${i}`);
  }
});

test("a named function without parallel calls: exactly one call of it", () => {
  const { status, lines, stderr } = emit({
    reply: { tools, tool_choice: { type: "function", function: { name: "search" } }, parallel_tool_calls: false },
    walks: 10, budget: 400,
  });
  assert.equal(status, 0, stderr);
  for (const [i, out] of lines.entries()) {
    assert.ok(out.done && out.tool_calls.length === 1, `walk ${i}: ${out.tool_calls.length} calls`);
    checkCalls(out, ["search"], `walk ${i}`);
  }
});

test("response_format json_schema with tool_choice none: a valid answer and no calls", () => {
  const schema = schemas.strictObject;
  const { status, lines, stderr } = emit({
    reply: { tools, tool_choice: "none", response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema } } },
    thinking: true, walks: 10, budget: 400,
  });
  assert.equal(status, 0, stderr);
  for (const [i, out] of lines.entries()) {
    assert.ok(out.done && out.tool_calls.length === 0, `walk ${i}`);
    validate(schema, JSON.parse(out.content), `walk ${i}`);
  }
});

test("a schema outside the subset is refused with its path", () => {
  const { status, lines } = emit({
    reply: { response_format: { type: "json_schema", json_schema: { name: "d", schema: { type: "object", properties: { when: { type: "string", format: "date-time" } } } } } },
    walks: 1, budget: 10,
  });
  assert.equal(status, 1);
  assert.match(lines[0].error, /^response_format\.json_schema\.schema\.properties\.when: 'format' is not supported/);
});
