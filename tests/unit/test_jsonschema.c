/* The JSON Schema compiler accepts its documented subset and refuses everything else with a
 * message that names the schema path; hostile schemas (deep, huge, self-referential, wildly
 * ambiguous) are refused quickly instead of exhausting memory or time. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "text/jsonschema.h"
#include "text/reply_grammar.h"
#include "text/strbuf.h"
#include "util/clock.h"

/* Compiles schema text as a response_format schema; returns 0 or -1 (message in df_errmsg). */
static int compile_text(const char *text, int strict) {
    json_error_t e;
    json_t *s = json_loads(text, JSON_DECODE_ANY, &e);
    if (!s) {
        fprintf(stderr, "test schema does not parse: %s\n  %s\n", e.text, text);
        exit(2);
    }
    Grammar *g;
    int rc = json_grammar(s, strict, "schema", NULL, &g);
    grammar_free(g);
    json_decref(s);
    return rc;
}

static void the_subset_compiles(void) {
    static const char *const ok[] = {
        "{}",
        "true",
        "{\"type\":\"string\",\"minLength\":1,\"maxLength\":10,\"description\":\"x\",\"title\":\"t\"}",
        "{\"type\":[\"number\",\"null\"]}",
        "{\"type\":\"integer\",\"examples\":[1],\"default\":2,\"$comment\":\"c\"}",
        "{\"type\":\"boolean\",\"deprecated\":false,\"readOnly\":true}",
        "{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"minItems\":1,\"maxItems\":1,\"uniqueItems\":false}",
        "{\"type\":\"array\",\"items\":false}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"],\"additionalProperties\":true}",
        "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"number\"}}",
        "{\"type\":\"object\",\"additionalProperties\":false}",
        "{\"enum\":[1,\"a\",null,[1],{\"b\":2}]}",
        "{\"const\":{\"x\":[true]}}",
        "{\"type\":\"string\",\"enum\":[\"a\",1]}",
        "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}],\"description\":\"either\"}",
        "{\"$defs\":{\"a\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#/$defs/a\"}}}",
        "{\"definitions\":{\"a~b/c\":{\"type\":\"null\"}},\"$ref\":\"#/definitions/a~0b~1c\"}",
        "{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}},\"required\":[\"next\"]}",
        "{\"type\":\"array\",\"items\":{\"$ref\":\"#\"},\"maxItems\":3}",
        "{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$id\":\"x\",\"type\":\"null\"}",
        "{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}",
        "{\"type\":[\"number\",\"null\"],\"exclusiveMinimum\":-1.5,\"exclusiveMaximum\":1e300}",
        "{\"type\":\"number\",\"minimum\":3,\"exclusiveMinimum\":true}",
        "{\"type\":\"integer\",\"multipleOf\":5,\"maximum\":-10}",
        "{\"type\":\"number\",\"multipleOf\":2.0}",
        "{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$|^x(?:ab)+?\\\\u{1F600}\",\"maxLength\":10}",
        "{\"type\":\"string\",\"pattern\":\"[\\\\s\\\\S]\",\"format\":\"email\"}",
        "{\"type\":\"string\",\"format\":\"date-time\"}",
        "{\"type\":\"string\",\"format\":\"date\"}",
        "{\"type\":\"string\",\"format\":\"time\"}",
        "{\"type\":\"string\",\"format\":\"uuid\",\"minLength\":36}",
        "{\"type\":\"string\",\"format\":\"ipv4\"}",
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) CHECK_MSG(compile_text(ok[i], 0) == 0, "%s: %s", ok[i], df_errmsg());
}

static void everything_else_is_refused_by_path(void) {
    static const struct {
        const char *schema;
        int strict;
        const char *msg;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"^(?=a)b\"}", 0,
         "schema: 'pattern': lookahead and lookbehind cannot be enforced (at character 2)"},
        {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", 0, "schema: 'pattern': backreferences"},
        {"{\"type\":\"string\",\"pattern\":\"a\\\\bc\"}", 0, "schema: 'pattern': word boundaries"},
        {"{\"type\":\"string\",\"pattern\":\"a^b\"}", 0, "schema: 'pattern': anchors (^ and $) can be enforced only"},
        {"{\"type\":\"string\",\"pattern\":\"a{2\"}", 0, "schema: 'pattern': a '{' that is not a quantifier"},
        {"{\"type\":\"string\",\"pattern\":\"[b-a]\"}", 0, "schema: 'pattern': a range out of order"},
        {"{\"type\":\"string\",\"pattern\":\"(a\"}", 0, "schema: 'pattern': a '(' without its ')'"},
        {"{\"type\":\"string\",\"pattern\":\"a{1001}\"}", 0, "schema: 'pattern': a quantifier count above 1000"},
        {"{\"type\":\"string\",\"pattern\":\"a[ab]{16}$\"}", 0, "schema: 'pattern' needs an automaton of more than"},
        {"{\"type\":\"string\",\"pattern\":\"^a$\",\"minLength\":2}", 0,
         "schema: no string satisfies 'pattern' within 'minLength'/'maxLength'"},
        {"{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"uri\"}}}", 0,
         "schema.properties.when: 'format' \"uri\" cannot be enforced"},
        {"{\"type\":\"string\",\"format\":7}", 0, "schema: 'format' must be a string"},
        {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":3}", 0, "schema: no number in this range can be written"},
        {"{\"type\":\"number\",\"minimum\":1e16}", 0, "schema: no number in this range can be written"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":1}", 0, "schema: no number in this range"},
        {"{\"type\":\"number\",\"minimum\":\"3\"}", 0, "schema: 'minimum' must be a number"},
        {"{\"type\":\"number\",\"exclusiveMinimum\":true}", 0, "schema: 'exclusiveMinimum' true needs 'minimum'"},
        {"{\"type\":\"number\",\"multipleOf\":0.01}", 0, "schema: 'multipleOf' 0.01 cannot be enforced"},
        {"{\"type\":\"number\",\"multipleOf\":0}", 0, "schema: 'multipleOf' must be a number above 0"},
        {"{\"type\":\"integer\",\"multipleOf\":1000000}", 0, "schema: 'multipleOf' 1e+06 is above 100000"},
        {"{\"minimum\":1}", 0, "schema: 'minimum' needs a 'type' beside it"},
        {"{\"type\":\"string\",\"minimum\":1}", 0, "schema: 'minimum' applies to type number"},
        {"{\"type\":\"array\",\"minItems\":1000000000}", 0,
         "schema: 'minItems' is 1000000000: no reply is that long (a reply holds at most 1048576 tokens)"},
        {"{\"type\":\"string\",\"minLength\":2000000}", 0, "schema: 'minLength' is 2000000: no reply is that long"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", 0, "schema: 'oneOf' is not supported: use 'anyOf'"},
        {"{\"allOf\":[{\"type\":\"string\"}]}", 0, "schema: 'allOf' is not supported"},
        {"{\"not\":{}}", 0, "schema: 'not' is not supported"},
        {"{\"type\":\"array\",\"prefixItems\":[]}", 0, "schema: 'prefixItems' is not supported"},
        {"{\"type\":\"array\",\"uniqueItems\":true}", 0, "schema: 'uniqueItems' true is not supported"},
        {"{\"type\":\"object\",\"patternProperties\":{}}", 0, "schema: 'patternProperties' is not supported"},
        {"{\"type\":\"object\",\"minProperties\":1}", 0, "schema: 'minProperties' is not supported"},
        {"{\"nullable\":true,\"type\":\"string\"}", 0, "schema: 'nullable' is not supported"},
        {"{\"properties\":{\"a\":{}}}", 0, "schema: 'properties' needs a 'type' beside it"},
        {"{\"type\":\"string\",\"items\":{}}", 0, "schema: 'items' applies to type array"},
        {"{\"type\":\"strin\"}", 0, "schema: 'type' has 'strin'"},
        {"{\"type\":[]}", 0, "schema: 'type' must be"},
        {"{\"type\":\"string\",\"minLength\":3,\"maxLength\":2}", 0, "schema: 'minLength' is greater than 'maxLength'"},
        {"{\"type\":\"array\",\"minItems\":-1}", 0, "schema: 'minItems' must be an integer"},
        {"{\"type\":\"array\",\"items\":false,\"minItems\":1}", 0, "schema.items: no value is valid"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", 0, "schema: 'required' names 'b'"},
        {"{\"type\":\"object\",\"properties\":{\"a\":false},\"required\":[\"a\"]}", 0, "schema.properties.a: no value"},
        {"{\"anyOf\":[]}", 0, "schema: 'anyOf' must be a non-empty array"},
        {"{\"anyOf\":[{}],\"type\":\"string\"}", 0, "schema: 'anyOf' cannot be combined with 'type'"},
        {"{\"$ref\":\"#/$defs/a\",\"type\":\"string\",\"$defs\":{\"a\":{}}}", 0, "schema: '$ref' cannot be combined with 'type'"},
        {"{\"$ref\":\"#/$defs/missing\"}", 0, "schema: '$ref' #/$defs/missing does not point into the schema"},
        {"{\"$ref\":\"https://example.com/s.json\"}", 0, "schema: '$ref' https://example.com/s.json: only references"},
        {"{\"$ref\":\"#anchor\"}", 0, "schema: '$ref' #anchor: anchors are not supported"},
        {"{\"enum\":[]}", 0, "schema: 'enum' must be a non-empty array"},
        {"{\"enum\":[1],\"const\":1}", 0, "schema: give 'enum' or 'const'"},
        {"{\"type\":\"string\",\"enum\":[1,2]}", 0, "schema: no value is valid against the schema"},
        {"{\"enum\":[1],\"minLength\":1}", 0, "schema: 'enum' cannot be combined with 'minLength'"},
        {"3", 0, "schema: a schema must be an object or a boolean"},
        {"false", 0, "schema: no value is valid"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}},\"required\":[\"a\"]}", 1,
         "schema: strict mode needs \"additionalProperties\": false"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},\"b\":{\"type\":\"string\"}},\"required\":[\"a\"],"
         "\"additionalProperties\":false}",
         1, "schema: strict mode needs every property in 'required'; 'b' is missing"},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#\"}},\"required\":[\"a\"]}", 0,
         "schema: no finite value satisfies it"},
        {"{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}", 0,
         "schema: an anyOf (or $ref) refers to itself"},
        {"{\"$ref\":\"#\"}", 0, "schema: an anyOf (or $ref) refers to itself"},
        {"{\"type\":\"array\",\"items\":{\"$ref\":\"#/items\"}}", 0, "schema: an anyOf (or $ref) refers to itself"},
        {"{\"type\":\"array\",\"minItems\":1,\"items\":{\"$ref\":\"#\"}}", 0, "schema: no finite value"},
        {"{\"type\":\"array\",\"minItems\":1048576,\"items\":{\"type\":\"array\",\"minItems\":1048576}}", 0,
         "schema: its shortest value is longer than 1073741823 tokens (minItems or minLength multiplied through nesting)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int rc = compile_text(bad[i].schema, bad[i].strict);
        CHECK_MSG(rc == -1 && !strncmp(df_errmsg(), bad[i].msg, strlen(bad[i].msg)), "%s\n     got '%s'", bad[i].schema,
                  rc ? df_errmsg() : "(accepted)");
    }
}

/* Builds "{"type":"array","items":" x depth, then leaf, then closing braces. */
static char *nested(int depth, const char *leaf) {
    StrBuf b = {0};
    for (int i = 0; i < depth; i++) sb_adds(&b, "{\"type\":\"array\",\"items\":");
    sb_adds(&b, leaf);
    for (int i = 0; i < depth; i++) sb_adds(&b, "}");
    return b.p;
}

/* head, then n items printf'd from fmt with (separator, i, i + 1), then tail. */
static char *repeated(const char *head, const char *fmt, int n, const char *tail) {
    StrBuf b = {0};
    sb_adds(&b, head);
    for (int i = 0; i < n; i++) {
        char item[256];
        snprintf(item, sizeof item, fmt, i ? "," : "", i, i + 1);
        sb_adds(&b, item);
    }
    sb_adds(&b, tail);
    return b.p;
}

static void hostile_schemas_are_refused_quickly(void) {
    double t0 = df_now();
    char *deep = nested(150, "{}");
    CHECK(compile_text(deep, 0) == -1 && strstr(df_errmsg(), "nests deeper than 128 levels"));
    free(deep);
    deep = nested(60, "{}"); /* deep but within the limits: fine */
    CHECK_MSG(compile_text(deep, 0) == 0, "%s", df_errmsg());
    free(deep);
    /* an enum with more literals than the grammar may hold */
    char *text = repeated("{\"enum\":[", "%s%d", 30000, "]}");
    CHECK(compile_text(text, 0) == -1 && strstr(df_errmsg(), "too large"));
    free(text);
    /* 40 alternatives that all start alike: too many partial parses at once */
    text = repeated("{\"anyOf\":[", "%s{\"type\":\"object\",\"properties\":{\"k%d\":{\"type\":\"null\"}}}", 40, "]}");
    CHECK(compile_text(text, 0) == -1 && strstr(df_errmsg(), "overlap too much"));
    free(text);
    /* ambiguity that multiplies with nesting: two alike alternatives per level, ten levels */
    char *amb = df_strdup("{\"type\":\"null\"}");
    for (int i = 0; i < 10; i++) {
        StrBuf n = {0};
        sb_adds(&n, "{\"anyOf\":[{\"type\":\"array\",\"items\":");
        sb_adds(&n, amb);
        sb_adds(&n, "},{\"type\":\"array\",\"maxItems\":5,\"items\":");
        sb_adds(&n, amb);
        sb_adds(&n, "}]}");
        free(amb);
        amb = n.p;
    }
    CHECK(compile_text(amb, 0) == -1 && strstr(df_errmsg(), "overlap too much"));
    free(amb);
    /* $defs referring to each other many times: compiled once each, not exponentially */
    text = repeated("{\"$defs\":{",
                    "%1$s\"d%2$d\":{\"type\":\"object\",\"properties\":{\"a\":{\"$ref\":\"#/$defs/d%3$d\"},"
                    "\"b\":{\"$ref\":\"#/$defs/d%3$d\"}}}",
                    40, ",\"d40\":{\"type\":\"null\"}},\"$ref\":\"#/$defs/d0\"}");
    CHECK_MSG(compile_text(text, 0) == 0, "%s", df_errmsg());
    free(text);
    /* thousands of properties */
    text = repeated("{\"type\":\"object\",\"properties\":{", "%s\"p%d\":{\"type\":\"integer\"}", 5000, "}}");
    CHECK_MSG(compile_text(text, 0) == 0, "%s", df_errmsg());
    free(text);
    CHECK_MSG(df_now() - t0 < 10, "hostile schemas took %.1f s", df_now() - t0);
}

int main(void) {
    RUN(the_subset_compiles);
    RUN(everything_else_is_refused_by_path);
    RUN(hostile_schemas_are_refused_quickly);
    return check_summary();
}
