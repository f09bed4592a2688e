// Constrained decoding checked by a real JSON Schema validator: ajv (2020-12 dialect, with
// ajv-formats for "format"). The C
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
import addFormats from "ajv-formats";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const EMIT = path.join(ROOT, "build/tests/helpers/constrain_emit");
const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);

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
  // What pydantic's model_json_schema() writes for Field(ge=, le=, gt=, lt=, min_length=,
  // max_length=, pattern=), conint/confloat, EmailStr, UUID, datetime, date, time, list lengths.
  pydanticModel: {
    title: "Booking",
    type: "object",
    properties: {
      name: { title: "Name", type: "string", minLength: 1, maxLength: 12 },
      age: { title: "Age", type: "integer", minimum: 0, maximum: 150 },
      rating: { title: "Rating", type: "number", exclusiveMinimum: 0, maximum: 5 },
      ratio: { title: "Ratio", type: "number", minimum: 0, exclusiveMaximum: 1 },
      email: { title: "Email", type: "string", format: "email" },
      id: { title: "Id", type: "string", format: "uuid" },
      created: { title: "Created", type: "string", format: "date-time" },
      day: { title: "Day", type: "string", format: "date" },
      at: { title: "At", type: "string", format: "time" },
      code: { title: "Code", type: "string", pattern: "^[A-Z]{3}-\\d{4}$" },
      seats: { title: "Seats", type: "array", items: { type: "integer", minimum: 1, maximum: 60 }, minItems: 1, maxItems: 4 },
      nickname: { anyOf: [{ type: "string", pattern: "^[a-z]+$", maxLength: 8 }, { type: "null" }], default: null, title: "Nickname" },
    },
    required: ["name", "age", "rating", "ratio", "email", "id", "created", "day", "at", "code", "seats"],
  },
  // What zod (zod-to-json-schema, OpenAI's zodResponseFormat) writes for .int().min().max(),
  // .gt()/.lt(), .multipleOf(), .email(), .uuid(), .datetime(), .ip(), .regex(), .length().
  zodObject: {
    type: "object",
    properties: {
      count: { type: "integer", minimum: -10, exclusiveMaximum: 10 },
      step: { type: "integer", multipleOf: 5, minimum: 0, maximum: 100 },
      temp: { type: "number", exclusiveMinimum: -273.15 , maximum: 1e3 },
      ip: { type: "string", format: "ipv4" },
      slug: { type: "string", pattern: "^[a-z0-9]+(?:-[a-z0-9]+)*$", minLength: 3, maxLength: 20 },
      pin: { type: "string", minLength: 4, maxLength: 4, pattern: "^\\d+$" },
      when: { type: "string", format: "date-time" },
      tags: { type: "array", items: { type: "string", maxLength: 6 }, minItems: 2, maxItems: 3 },
    },
    required: ["count", "step", "temp", "ip", "slug", "pin", "when", "tags"],
    additionalProperties: false,
  },
  numberEdges: {
    type: "array",
    items: { anyOf: [
      { type: "number", exclusiveMinimum: 0.1, maximum: 0.2 },
      { type: "integer", minimum: 0.5, maximum: 1e300 },
      { type: "number", minimum: -1e-20, maximum: 1e-20 },
    ] },
    minItems: 3, maxItems: 3,
  },
  patterns: {
    type: "array",
    items: { anyOf: [
      { type: "string", pattern: "ab+c", maxLength: 8 },
      { type: "string", pattern: "^\"[\\\\\\n]x$" },
      { type: "string", pattern: "^\\w+\\s\\S$", minLength: 3, maxLength: 5 },
      { type: "string", pattern: "^(?:\\u00e9|\\u4e2d)+$", maxLength: 3 },
    ] },
    minItems: 4, maxItems: 4,
  },
};

for (const [name, schema] of Object.entries(schemas)) {
  test(`${name}: every walk ends in JSON that ajv validates`, () => {
    const budget = name === "pydanticModel" || name === "zodObject" ? 700 : 160;
    const { status, lines, stderr } = emit({ schema, walks: 12, budget });
    assert.equal(status, 0, stderr);
    assert.equal(lines.length, 12);
    for (const [i, out] of lines.entries()) {
      assert.ok(out.done && out.tokens <= budget, `walk ${i}: not finished within the budget`);
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
  {
    type: "function",
    function: {
      name: "book", // string arguments are raw text in K3's chat format: patterns and formats there too
      parameters: {
        type: "object",
        properties: {
          seat: { type: "integer", minimum: 1, maximum: 60 },
          code: { type: "string", pattern: "^[A-Z]{2}\\d$" },
          day: { type: "string", format: "date" },
          note: { type: "string", pattern: "\"|\\\\", maxLength: 4 },
        },
        required: ["seat", "code", "day", "note"],
      },
    },
  },
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
  const { status, lines, stderr } = emit({ reply: { tools, tool_choice: "required" }, thinking: true, walks: 16, budget: 400 });
  assert.equal(status, 0, stderr);
  for (const [i, out] of lines.entries()) {
    assert.ok(out.done, `walk ${i}: not finished`);
    assert.ok(out.tool_calls.length >= 1, `walk ${i}: no tool call`);
    checkCalls(out, ["get_weather", "search", "ping", "book"], `walk ${i}`);
  }
});

test("a named function with ranges, patterns and formats: its arguments validate", () => {
  const { status, lines, stderr } = emit({
    reply: { tools, tool_choice: { type: "function", function: { name: "book" } } }, walks: 10, budget: 400,
  });
  assert.equal(status, 0, stderr);
  for (const [i, out] of lines.entries()) {
    assert.ok(out.done && out.tool_calls.length >= 1, `walk ${i}: ${out.tool_calls.length} calls`);
    checkCalls(out, ["book"], `walk ${i}`);
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
    reply: { response_format: { type: "json_schema", json_schema: { name: "d", schema: { type: "object", properties: { when: { type: "string", format: "uri" } } } } } },
    walks: 1, budget: 10,
  });
  assert.equal(status, 1);
  assert.match(lines[0].error, /^response_format\.json_schema\.schema\.properties\.when: 'format' "uri" cannot be enforced/);
});

test("what cannot be enforced exactly is refused, naming it", () => {
  const cases = [
    [{ type: "string", pattern: "^(?!x)[a-z]+$" }, /^schema: 'pattern': lookahead and lookbehind cannot be enforced/],
    [{ type: "string", pattern: "(a)\\1" }, /^schema: 'pattern': backreferences/],
    [{ type: "number", multipleOf: 0.01 }, /^schema: 'multipleOf' 0\.01 cannot be enforced/],
    [{ type: "array", minItems: 1e9 }, /^schema: 'minItems' is 1000000000: no reply is that long/],
  ];
  for (const [schema, message] of cases) {
    const { status, lines } = emit({ schema, walks: 1, budget: 10 });
    assert.equal(status, 1, JSON.stringify(schema));
    assert.match(lines[0].error, message);
  }
});
