/* jsonschema.h - JSON Schema to Grammar: the JSON texts a constrained reply may write are
 * exactly the texts of values that validate, within the subset below. Anything outside the
 * subset is refused with a message naming the schema path; nothing is silently ignored.
 *
 * Supported (JSON Schema 2020-12 meaning unless said otherwise):
 *   type          "object" "array" "string" "number" "integer" "boolean" "null", or an array of
 *                 them (nullable fields: ["string", "null"]); each keyword below must apply to
 *                 one of the listed types
 *   properties, required, additionalProperties
 *                 objects are written with their declared properties only, in declared order,
 *                 the required ones always and the others optionally. additionalProperties
 *                 false, absent, true or a schema are all accepted with properties (extra
 *                 members are never written); an object with no properties and
 *                 additionalProperties a schema (or true, or absent) is a map: any keys, values
 *                 valid for that schema. `required` must name declared properties.
 *   items, minItems, maxItems            (items false: only the empty array)
 *   minLength, maxLength                 (Unicode characters, as validators count them)
 *   pattern       an ECMAScript regular expression, within the subset of regex.h (no lookaround,
 *                 backreferences or word boundaries: those are refused naming the construct)
 *   format        date-time, date, time, email, uuid, ipv4 (strfa.h: what is written); any other
 *                 format is refused naming it
 *   minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers or draft-04's booleans),
 *   multipleOf    (whole numbers only)   numbers written as numrange.h says: exactly the numbers
 *                 in range that are written with at most 15 digits, no exponent
 *                 A pattern, a format, a range and lengths together compile to one automaton
 *                 (GK_DFA), capped at AUTO_MAX_STATES states: past it the schema is refused.
 *   enum, const   any JSON values; with `type`, the values of other types are dropped
 *   anyOf         any alternatives, as long as at most GRAMMAR_MAX_THREADS partial parses can be
 *                 open at once (alternatives that start alike, e.g. two objects, stay open
 *                 together until they differ)
 *   $ref, $defs, definitions
 *                 local JSON pointers ("#", "#/$defs/x", "#/properties/a/items", ...), recursion
 *                 included (nesting is bounded by GRAMMAR_MAX_FRAMES)
 *   true, {}      any JSON value (nesting bounded)
 *   annotations   title description default examples $comment $schema $id deprecated readOnly
 *                 writeOnly (no effect on what is valid)
 *   uniqueItems   false only
 * Refused: multipleOf that is not a whole number (validators divide in floating point: 0.07 is
 * not a multiple of 0.01 to them), oneOf, allOf, not, if/then/else, prefixItems, contains,
 * patternProperties, propertyNames, min/maxProperties, dependent*, unevaluated*, uniqueItems true,
 * $ref to anything but this document, the false schema where a value is required, minItems or
 * minLength above 2^20 (no reply is that long), and every keyword not listed here.
 *
 * strict (OpenAI's strict mode): in addition every object must have additionalProperties false
 * and list all its properties in required.
 *
 * Text policy of what is written: no insignificant white space at all; strings escape only
 * with \" \\ \/ \b \f \n \r \t and \uXXXX (no surrogate halves, no \u0000: characters outside
 * the BMP are written as UTF-8), raw control characters never, other text as well-formed
 * UTF-8 (strings with a pattern or format: one spelling per character, see automaton.h);
 * numbers with at most 15 integer digits and 15 fraction digits and an exponent of at most two
 * digits, so they parse to the same double (and integers to int64) in jansson, JavaScript and
 * Python alike. Enum and const values, and member names, are written as
 * jansson's compact text.
 *
 * Limits: schemas may nest 128 levels (each $ref followed counts as one); values may nest as
 * deep as GRAMMAR_MAX_FRAMES allows (about 60 levels); GRAMMAR_MAX_* cap the compiled size. */
#ifndef DF_JSONSCHEMA_H
#define DF_JSONSCHEMA_H

#include <jansson.h>
#include <stdint.h>

#include "text/grammar.h"

/* The node for the JSON text of values valid against schema (its own document for $ref).
 * where names the schema in the request ("response_format.json_schema.schema"); messages are
 * "where.path: what". Returns 0, or -1 with a message. */
int jsonschema_value(Grammar *g, const json_t *schema, int strict, const char *where, uint32_t *node);

/* Any JSON object (response_format {"type": "json_object"}). */
uint32_t jsonschema_any_object(Grammar *g);

/* The arguments of one K3 tool call (docs/MODEL.md 6.3) for a function's `parameters` (NULL: no
 * arguments): per declared property, in order, required ones always,
 *   <|open|>argument key="KEY" type="T"<|sep|>VALUE<|close|>argument<|sep|>
 * with KEY escaped (& -> &amp;, " -> &quot;), T one of the JSON types the property's schema
 * admits, and VALUE the verbatim text of a string (well-formed UTF-8 without NUL) or the
 * compact JSON of any other value. parameters must be an object schema with properties (or
 * none: no arguments). Returns 0, or -1 with a message naming where. */
int jsonschema_arguments(Grammar *g, const json_t *parameters, int strict, const char *where, uint32_t *node);

#endif
