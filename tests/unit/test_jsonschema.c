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
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) CHECK_MSG(compile_text(ok[i], 0) == 0, "%s: %s", ok[i], df_errmsg());
}

static void everything_else_is_refused_by_path(void) {
    static const struct {
        const char *schema;
        int strict;
        const char *msg;
    } bad[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", 0, "schema: 'pattern' is not supported"},
        {"{\"type\":\"object\",\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date-time\"}}}", 0,
         "schema.properties.when: 'format' is not supported"},
        {"{\"type\":\"number\",\"minimum\":0}", 0, "schema: 'minimum' is not supported"},
        {"{\"type\":\"integer\",\"multipleOf\":2}", 0, "schema: 'multipleOf' is not supported"},
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
