/* jsonschema.c - compiling the supported JSON Schema subset into grammar nodes (see
 * jsonschema.h). One schema object compiles to one node per "filter" (which JSON types are
 * wanted at its top, and whether a string there is raw tool-argument text); $ref targets are
 * compiled once per filter and may refer back to themselves through a forward node. */
#include "text/jsonschema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/numrange.h"
#include "text/strbuf.h"
#include "text/strfa.h"
#include "util/err.h"

#define SCHEMA_MAX_NESTING 128 /* schemas inside schemas, each $ref counting as one */
#define SCHEMA_MAX_COUNT 1000000000 /* maxLength, maxItems */
#define SCHEMA_MAX_MIN_COUNT (1 << 20) /* minLength, minItems: a reply holds at most a context of tokens */
#define ARG_KEY_MAX 3000            /* an argument header stays under the parser's 4096 bytes */
#define PATH_CAP 240

enum { JT_NULL = 1, JT_BOOLEAN = 2, JT_OBJECT = 4, JT_ARRAY = 8, JT_NUMBER = 16, JT_STRING = 32, JT_ALL = 63 };
static const char *const type_names[] = {"null", "boolean", "object", "array", "number", "string"};

typedef struct {
    uint8_t types; /* JT_* wanted at the top */
    uint8_t raw;   /* a string at the top is raw text (a string tool argument) */
} Filter;

static const Filter ALL_JSON = {JT_ALL, 0};

typedef struct {
    const json_t *schema;
    Filter f;
    uint32_t node;
} Memo;

typedef struct {
    Grammar *g;
    const json_t *root;
    int strict;
    const char *where;
    char path[PATH_CAP];
    size_t plen;
    int depth;
    Memo *memo;
    size_t n_memo, cap_memo;
    uint32_t any; /* any JSON value, built on first use */
} Ctx;

#define EMPTY GRAMMAR_NONE /* compiled to nothing: no value of the wanted types is valid */

static int fail(Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(Ctx *c, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return df_fail("%s%s: %s", c->where, c->path, msg);
}

/* Appends a path segment (printable ASCII kept, other bytes as '?'); returns the old length. */
static size_t path_push(Ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static size_t path_push(Ctx *c, const char *fmt, ...) {
    size_t old = c->plen;
    if (c->plen < PATH_CAP - 1) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->path + c->plen, PATH_CAP - c->plen, fmt, ap);
        va_end(ap);
        for (char *p = c->path + c->plen; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e) *p = '?';
        c->plen = strlen(c->path);
    }
    return old;
}

static void path_pop(Ctx *c, size_t old) {
    c->plen = old;
    c->path[old] = 0;
}

/* ------------------------------------------------------------------ node builders */

static GSpan text(Grammar *g, const char *s) { return gb_text(g, s, strlen(s)); }
static GSpan marker(Grammar *g, int m) {
    GUnit u = GU_MARKER(m);
    return gb_units(g, &u, 1);
}
static const GSpan NO_TEXT = {0, 0};

static uint32_t lit_text(Grammar *g, const char *s) { return gb_lit1(g, text(g, s)); }

static uint32_t string_node(Grammar *g, uint32_t min, uint32_t max, int raw) {
    return gb_leaf(g, raw ? GK_RAWSTR : GK_JSTRING, min, max, 0);
}

static uint32_t array_node(Grammar *g, uint32_t item, uint32_t min, uint32_t max) {
    return gb_repeat(g, item, min, max, text(g, "["), text(g, ","), text(g, "]"), 0);
}

/* An object with any keys whose values match `value`. */
static uint32_t map_node(Grammar *g, uint32_t value) {
    uint32_t kids[3] = {string_node(g, 0, UINT32_MAX, 0), lit_text(g, ":"), value};
    return gb_repeat(g, gb_seq(g, kids, 3), 0, UINT32_MAX, text(g, "{"), text(g, ","), text(g, "}"), 0);
}

static uint32_t bool_node(Grammar *g) {
    GSpan l[2] = {text(g, "true"), text(g, "false")};
    return gb_lit(g, l, 2);
}

static uint32_t any_json(Ctx *c) {
    if (c->any != GRAMMAR_NONE) return c->any;
    Grammar *g = c->g;
    uint32_t fwd = c->any = gb_forward(g);
    uint32_t alts[6] = {lit_text(g, "null"), bool_node(g), map_node(g, fwd), array_node(g, fwd, 0, UINT32_MAX),
                        gb_leaf(g, GK_NUMBER, 0, 0, 0), string_node(g, 0, UINT32_MAX, 0)};
    gb_resolve(g, fwd, gb_choice(g, alts, 6));
    return fwd;
}

/* Any value of the filter's types. */
static uint32_t any_value(Ctx *c, Filter f) {
    if (f.types == JT_ALL && !f.raw) return any_json(c);
    Grammar *g = c->g;
    uint32_t alts[6], n = 0, any = any_json(c);
    if (f.types & JT_NULL) alts[n++] = lit_text(g, "null");
    if (f.types & JT_BOOLEAN) alts[n++] = bool_node(g);
    if (f.types & JT_OBJECT) alts[n++] = map_node(g, any);
    if (f.types & JT_ARRAY) alts[n++] = array_node(g, any, 0, UINT32_MAX);
    if (f.types & JT_NUMBER) alts[n++] = gb_leaf(g, GK_NUMBER, 0, 0, 0);
    if (f.types & JT_STRING) alts[n++] = string_node(g, 0, UINT32_MAX, f.raw);
    return n ? gb_choice(g, alts, n) : EMPTY;
}

/* A member's key literal: the name as jansson writes a string, then ':'. */
static GSpan key_literal(Grammar *g, const char *name) {
    json_t *str = json_string(name);
    char *q = json_dumps(str, JSON_ENCODE_ANY);
    json_decref(str);
    if (!q) return (GSpan){0, 0}; /* not reached: jansson keys are UTF-8 */
    GSpan lits[2] = {text(g, q), text(g, ":")};
    free(q);
    return gb_join(g, lits, 2);
}

/* ------------------------------------------------------------------ keywords */

typedef enum {
    KW_ANNOT, KW_DEFS, KW_TYPE, KW_ENUM, KW_CONST, KW_ANYOF, KW_REF, KW_OBJECT, KW_ARRAY, KW_STRING, KW_NUMBER, KW_N
} KwClass;

static const struct {
    const char *name;
    KwClass cls;
} keywords[] = {
    {"title", KW_ANNOT}, {"description", KW_ANNOT}, {"default", KW_ANNOT}, {"examples", KW_ANNOT},
    {"$comment", KW_ANNOT}, {"$schema", KW_ANNOT}, {"$id", KW_ANNOT}, {"deprecated", KW_ANNOT},
    {"readOnly", KW_ANNOT}, {"writeOnly", KW_ANNOT}, {"$defs", KW_DEFS}, {"definitions", KW_DEFS},
    {"type", KW_TYPE}, {"enum", KW_ENUM}, {"const", KW_CONST}, {"anyOf", KW_ANYOF}, {"$ref", KW_REF},
    {"properties", KW_OBJECT}, {"required", KW_OBJECT}, {"additionalProperties", KW_OBJECT},
    {"items", KW_ARRAY}, {"minItems", KW_ARRAY}, {"maxItems", KW_ARRAY}, {"uniqueItems", KW_ARRAY},
    {"minLength", KW_STRING}, {"maxLength", KW_STRING}, {"pattern", KW_STRING}, {"format", KW_STRING},
    {"minimum", KW_NUMBER}, {"maximum", KW_NUMBER}, {"exclusiveMinimum", KW_NUMBER}, {"exclusiveMaximum", KW_NUMBER},
    {"multipleOf", KW_NUMBER},
};

static int keyword_class(const char *k) {
    for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
        if (!strcmp(keywords[i].name, k)) return (int)keywords[i].cls;
    return -1;
}

static const char *refusal_reason(const char *k) {
    if (!strcmp(k, "oneOf")) return "use 'anyOf' instead";
    return "the keyword is outside the supported subset";
}

typedef struct {
    unsigned present;  /* bit per KwClass */
    const char *first[KW_N];
} Keywords;

static int scan_keywords(Ctx *c, const json_t *s, Keywords *kw) {
    const char *key;
    const json_t *v;
    memset(kw, 0, sizeof *kw);
    json_object_foreach((json_t *)s, key, v) {
        int cls = keyword_class(key);
        if (cls < 0) return fail(c, "'%.60s' is not supported: %s", key, refusal_reason(key));
        kw->present |= 1u << cls;
        if (!kw->first[cls]) kw->first[cls] = key;
    }
    return 0;
}

/* Fails when a keyword other than annotations, $defs and the allowed classes is present. */
static int only_with(Ctx *c, const Keywords *kw, const char *what, unsigned allowed) {
    allowed |= 1u << KW_ANNOT | 1u << KW_DEFS;
    for (int cls = 0; cls < KW_N; cls++)
        if ((kw->present >> cls & 1) && !(allowed >> cls & 1))
            return fail(c, "'%s' cannot be combined with '%s' here", what, kw->first[cls]);
    return 0;
}

/* A non-negative integer keyword, or dflt when absent. A minimum (minItems, minLength) above what
 * a reply can hold is refused as such. */
static int count_kw(Ctx *c, const json_t *s, const char *key, uint32_t dflt, uint32_t *out) {
    const json_t *v = json_object_get(s, key);
    *out = dflt;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SCHEMA_MAX_COUNT)
        return fail(c, "'%s' must be an integer from 0 to %d", key, SCHEMA_MAX_COUNT);
    if (!strncmp(key, "min", 3) && json_integer_value(v) > SCHEMA_MAX_MIN_COUNT)
        return fail(c, "'%s' is %lld: no reply is that long (a reply holds at most %d tokens)", key,
                    (long long)json_integer_value(v), SCHEMA_MAX_MIN_COUNT);
    *out = (uint32_t)json_integer_value(v);
    return 0;
}

/* The "type" keyword as JT_* bits; *integer when integers only are meant for numbers. */
static int parse_type(Ctx *c, const json_t *t, uint8_t *types, int *integer) {
    *types = 0, *integer = 0;
    int number = 0;
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    if (!json_is_string(t) && !(json_is_array(t) && n)) return fail(c, "'type' must be a type name or a non-empty array of them");
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        const char *name = json_string_value(e);
        int bit = -1;
        for (int k = 0; k < 6 && name; k++)
            if (!strcmp(name, type_names[k])) bit = k;
        if (name && !strcmp(name, "integer")) bit = 4, *integer = 1;
        else if (bit == 4) number = 1;
        if (bit < 0) return fail(c, "'type' has '%.40s', which is not a JSON Schema type", name ? name : "(not a string)");
        *types |= (uint8_t)(1u << bit);
    }
    if (number) *integer = 0;
    return 0;
}

/* ------------------------------------------------------------------ compiling */

static int compile(Ctx *c, const json_t *s, Filter f, uint32_t *node);

static const json_t *resolve_ref(Ctx *c, const char *ref) {
    if (ref[0] != '#') return fail(c, "'$ref' %.60s: only references into this schema (#...) are supported", ref), NULL;
    const json_t *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') return fail(c, "'$ref' %.60s: anchors are not supported, use a JSON pointer", ref), NULL;
    char tok[256];
    while (*p == '/') {
        size_t n = 0;
        for (p++; *p && *p != '/'; p++) {
            char ch = *p;
            if (ch == '~' && (p[1] == '0' || p[1] == '1')) ch = p[1] == '0' ? '~' : '/', p++;
            if (n + 1 >= sizeof tok) return fail(c, "'$ref' %.60s: a path segment is too long", ref), NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        const json_t *next = NULL;
        if (json_is_object(at)) next = json_object_get(at, tok);
        else if (json_is_array(at) && n && strspn(tok, "0123456789") == n) next = json_array_get(at, strtoul(tok, NULL, 10));
        if (!next) return fail(c, "'$ref' %.60s does not point into the schema", ref), NULL;
        at = next;
    }
    return at;
}

static int compile_ref(Ctx *c, const json_t *s, Filter f, uint32_t *node) {
    const char *ref = json_string_value(json_object_get(s, "$ref"));
    if (!ref) return fail(c, "'$ref' must be a string");
    const json_t *target = resolve_ref(c, ref);
    if (!target) return -1;
    for (size_t i = 0; i < c->n_memo; i++)
        if (c->memo[i].schema == target && c->memo[i].f.types == f.types && c->memo[i].f.raw == f.raw) {
            *node = c->memo[i].node;
            return 0;
        }
    uint32_t fwd = gb_forward(c->g), x;
    if (c->n_memo == c->cap_memo) {
        c->cap_memo = c->cap_memo ? c->cap_memo * 2 : 16;
        c->memo = df_realloc(c->memo, c->cap_memo * sizeof *c->memo);
    }
    c->memo[c->n_memo++] = (Memo){target, f, fwd};
    char saved[PATH_CAP];
    size_t saved_len = c->plen;
    memcpy(saved, c->path, sizeof saved);
    path_pop(c, 0);
    path_push(c, "%s", ref);
    int rc = compile(c, target, f, &x);
    memcpy(c->path, saved, sizeof saved);
    c->plen = saved_len;
    if (rc) return -1;
    if (x != EMPTY) gb_resolve(c->g, fwd, x);
    *node = x == EMPTY ? EMPTY : fwd;
    return 0;
}

static int compile_anyof(Ctx *c, const json_t *s, Filter f, uint32_t *node) {
    const json_t *arr = json_object_get(s, "anyOf");
    if (!json_is_array(arr) || !json_array_size(arr)) return fail(c, "'anyOf' must be a non-empty array of schemas");
    size_t n = json_array_size(arr);
    uint32_t *alts = df_malloc(n * sizeof *alts), k = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        size_t mark = path_push(c, ".anyOf[%zu]", i);
        uint32_t x;
        rc = compile(c, json_array_get(arr, i), f, &x);
        if (!rc && x != EMPTY) alts[k++] = x;
        path_pop(c, mark);
    }
    if (!rc) *node = k ? gb_choice(c->g, alts, k) : EMPTY;
    free(alts);
    return rc;
}

/* The JT_* type of a value; integral numbers also count as integers (*integral). */
static int value_type(const json_t *v, int *integral) {
    *integral = json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    switch (json_typeof(v)) {
    case JSON_NULL: return JT_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return JT_BOOLEAN;
    case JSON_OBJECT: return JT_OBJECT;
    case JSON_ARRAY: return JT_ARRAY;
    case JSON_STRING: return JT_STRING;
    default: return JT_NUMBER;
    }
}

static int compile_enum(Ctx *c, const json_t *s, const Keywords *kw, Filter f, uint32_t *node) {
    int is_enum = kw->present >> KW_ENUM & 1;
    if (is_enum && (kw->present >> KW_CONST & 1)) return fail(c, "give 'enum' or 'const', not both");
    if (only_with(c, kw, is_enum ? "enum" : "const", 1u << KW_ENUM | 1u << KW_CONST | 1u << KW_TYPE)) return -1;
    const json_t *values = json_object_get(s, is_enum ? "enum" : "const");
    if (is_enum && (!json_is_array(values) || !json_array_size(values))) return fail(c, "'enum' must be a non-empty array");
    uint8_t types = JT_ALL;
    int integer = 0;
    if ((kw->present >> KW_TYPE & 1) && parse_type(c, json_object_get(s, "type"), &types, &integer)) return -1;
    size_t n = is_enum ? json_array_size(values) : 1, k = 0;
    GSpan *lits = df_malloc(n * sizeof *lits);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = is_enum ? json_array_get(values, i) : values;
        int integral, t = value_type(v, &integral);
        if (!(t & f.types & types) || (t == JT_NUMBER && integer && !integral)) continue;
        if (t == JT_STRING && f.raw) {
            lits[k++] = gb_text(c->g, json_string_value(v), json_string_length(v));
            continue;
        }
        char *dump = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!dump) {
            free(lits);
            return fail(c, "'%s' value %zu cannot be written as JSON", is_enum ? "enum" : "const", i);
        }
        lits[k++] = text(c->g, dump);
        free(dump);
    }
    *node = k ? gb_lit(c->g, lits, k) : EMPTY;
    free(lits);
    return 0;
}

/* Checks `required` against `properties` (and strict mode's rules) for an object schema. */
static int check_object_rules(Ctx *c, const json_t *s, const json_t *props, const json_t *req) {
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return fail(c, "'properties' must be an object");
    if (req && !json_is_array(req)) return fail(c, "'required' must be an array of property names");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl)) return fail(c, "'additionalProperties' must be a boolean or a schema");
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *name = json_string_value(json_array_get(req, i));
        if (!name) return fail(c, "'required' must be an array of property names");
        if (!json_object_get(props, name)) return fail(c, "'required' names '%.60s', which is not in 'properties'", name);
    }
    if (!c->strict) return 0;
    if (!json_is_false(addl)) return fail(c, "strict mode needs \"additionalProperties\": false on every object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)props, key, v) {
        int listed = 0;
        for (size_t i = 0; i < json_array_size(req) && !listed; i++) listed = !strcmp(json_string_value(json_array_get(req, i)), key);
        if (!listed) return fail(c, "strict mode needs every property in 'required'; '%.60s' is missing", key);
    }
    return 0;
}

static int is_required(const json_t *req, const char *name) {
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!strcmp(json_string_value(json_array_get(req, i)), name)) return 1;
    return 0;
}

static int compile_object(Ctx *c, const json_t *s, uint32_t *node) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    if (check_object_rules(c, s, props, req)) return -1;
    Grammar *g = c->g;
    if (!json_object_size(props) && !json_is_false(addl)) { /* a map */
        uint32_t value = EMPTY;
        size_t mark = path_push(c, ".additionalProperties");
        int rc = addl && json_is_object(addl) ? compile(c, addl, ALL_JSON, &value) : (value = any_json(c), 0);
        path_pop(c, mark);
        if (rc) return -1;
        *node = value == EMPTY ? gb_members(g, NULL, 0, text(g, "{"), text(g, ","), text(g, "}")) : map_node(g, value);
        return 0;
    }
    size_t n = json_object_size(props), k = 0;
    GMember *m = df_malloc((n ? n : 1) * sizeof *m);
    const char *key;
    const json_t *v;
    int rc = 0;
    json_object_foreach((json_t *)props, key, v) {
        size_t mark = path_push(c, ".properties.%.60s", key);
        uint32_t value;
        rc = compile(c, v, ALL_JSON, &value);
        int required = is_required(req, key);
        if (!rc && value == EMPTY && required) rc = fail(c, "no value is valid for this required property");
        path_pop(c, mark);
        if (rc) break;
        if (value == EMPTY) continue;
        m[k++] = (GMember){key_literal(g, key), value, (uint8_t)required};
    }
    if (!rc) *node = gb_members(g, m, k, text(g, "{"), text(g, ","), text(g, "}"));
    free(m);
    return rc;
}

static int compile_array(Ctx *c, const json_t *s, uint32_t *node) {
    uint32_t min, max, item = EMPTY;
    if (count_kw(c, s, "minItems", 0, &min) || count_kw(c, s, "maxItems", UINT32_MAX, &max)) return -1;
    if (min > max) return fail(c, "'minItems' is greater than 'maxItems'");
    const json_t *uniq = json_object_get(s, "uniqueItems"), *items = json_object_get(s, "items");
    if (uniq && !json_is_false(uniq)) return fail(c, "'uniqueItems' true is not supported");
    size_t mark = path_push(c, ".items");
    int rc = items ? compile(c, items, ALL_JSON, &item) : (item = any_json(c), 0);
    if (!rc && item == EMPTY && min > 0) rc = fail(c, "no value is valid for the items, but 'minItems' is %u", min);
    path_pop(c, mark);
    if (rc) return -1;
    if (item == EMPTY) item = any_json(c), max = 0;
    *node = array_node(c->g, item, min, max);
    return 0;
}

/* A bound keyword (minimum, exclusiveMinimum, ...) into *d when it is a number; *v its value. */
static int bound_kw(Ctx *c, const json_t *s, const char *key, int *has, double *v, Decimal *d) {
    const json_t *j = json_object_get(s, key);
    *has = 0;
    if (!j || json_is_boolean(j)) return 0; /* (a draft-04 boolean exclusive*: number_bounds) */
    if (!json_is_number(j)) return fail(c, "'%s' must be a number", key);
    *has = 1, *v = json_number_value(j);
    if (json_is_integer(j)) decimal_of_int(json_integer_value(j), d);
    else decimal_of_double(*v, d);
    return 0;
}

/* One side of the range: `inclusive` (minimum) and `exclusive` (exclusiveMinimum, or draft-04's
 * boolean beside minimum); the tighter one wins. */
static int number_bound(Ctx *c, const json_t *s, const char *inclusive, const char *exclusive, int upper, int *has,
                        int *excl, Decimal *d) {
    int has_in, has_ex;
    double vin = 0, vex = 0;
    Decimal dex;
    if (bound_kw(c, s, inclusive, &has_in, &vin, d) || bound_kw(c, s, exclusive, &has_ex, &vex, &dex)) return -1;
    *has = has_in || has_ex, *excl = json_is_true(json_object_get(s, exclusive));
    if (*excl && !has_in) return fail(c, "'%s' true needs '%s' beside it", exclusive, inclusive);
    if (has_ex && (!has_in || (upper ? vex <= vin : vex >= vin))) *d = dex, *excl = 1;
    return 0;
}

/* A number with a range or a multiple: an automaton of exactly the numbers allowed (numrange.h). */
static int compile_number(Ctx *c, const json_t *s, int integer, uint32_t *node) {
    NumSpec sp;
    memset(&sp, 0, sizeof sp);
    sp.integer = integer;
    if (number_bound(c, s, "minimum", "exclusiveMinimum", 0, &sp.has_lo, &sp.lo_excl, &sp.lo) ||
        number_bound(c, s, "maximum", "exclusiveMaximum", 1, &sp.has_hi, &sp.hi_excl, &sp.hi))
        return -1;
    const json_t *m = json_object_get(s, "multipleOf");
    if (m) {
        double v = json_number_value(m);
        if (!json_is_number(m) || !(v > 0)) return fail(c, "'multipleOf' must be a number above 0");
        if (v != floor(v))
            return fail(c, "'multipleOf' %g cannot be enforced: only whole multiples can (validators divide in floating "
                           "point, so 0.07 is not a multiple of 0.01 to them)", v);
        if (v > NUM_MAX_MULTIPLE) return fail(c, "'multipleOf' %g is above %d, the largest that can be enforced", v, NUM_MAX_MULTIPLE);
        sp.integer = 1, sp.multiple = v > 1 ? (uint32_t)v : 0;
    }
    Dfa d;
    if (number_dfa(&sp, AUTO_MAX_STATES, &d)) return fail(c, "%s", df_errmsg());
    *node = gb_dfa(c->g, &d);
    dfa_free(&d);
    return 0;
}

/* A string: with a pattern or a format an automaton (strfa.h), else a plain string of min..max
 * characters. */
static int compile_string(Ctx *c, const json_t *s, int raw, uint32_t *node) {
    uint32_t min, max;
    if (count_kw(c, s, "minLength", 0, &min) || count_kw(c, s, "maxLength", UINT32_MAX, &max)) return -1;
    if (min > max) return fail(c, "'minLength' is greater than 'maxLength'");
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) return fail(c, "'pattern' must be a string");
    if (fmt && !json_is_string(fmt)) return fail(c, "'format' must be a string");
    if (!pat && !fmt) {
        *node = string_node(c->g, min, max, raw);
        return 0;
    }
    if (strfa_node(c->g, json_string_value(pat), pat ? json_string_length(pat) : 0, json_string_value(fmt), min, max, raw, node))
        return fail(c, "%s", df_errmsg());
    return 0;
}

static int compile_typed(Ctx *c, const json_t *s, const Keywords *kw, Filter f, uint32_t *node) {
    uint8_t types;
    int integer;
    if (only_with(c, kw, "type", 1u << KW_TYPE | 1u << KW_OBJECT | 1u << KW_ARRAY | 1u << KW_STRING | 1u << KW_NUMBER) ||
        parse_type(c, json_object_get(s, "type"), &types, &integer))
        return -1;
    static const struct {
        KwClass cls;
        uint8_t type;
        const char *name;
    } applies[] = {{KW_OBJECT, JT_OBJECT, "object"}, {KW_ARRAY, JT_ARRAY, "array"}, {KW_STRING, JT_STRING, "string"},
                   {KW_NUMBER, JT_NUMBER, "number"}};
    for (int i = 0; i < 4; i++)
        if ((kw->present >> applies[i].cls & 1) && !(types & applies[i].type))
            return fail(c, "'%s' applies to type %s, which 'type' does not list", kw->first[applies[i].cls], applies[i].name);
    Grammar *g = c->g;
    uint32_t alts[6], n = 0, x = EMPTY;
    uint8_t want = types & f.types;
    if (want & JT_NULL) alts[n++] = lit_text(g, "null");
    if (want & JT_BOOLEAN) alts[n++] = bool_node(g);
    if (want & JT_NUMBER) {
        if (!(kw->present >> KW_NUMBER & 1)) alts[n++] = gb_leaf(g, GK_NUMBER, 0, 0, integer);
        else if (compile_number(c, s, integer, &x)) return -1;
        else alts[n++] = x;
    }
    if (want & JT_STRING) {
        if (compile_string(c, s, f.raw, &x)) return -1;
        alts[n++] = x;
    }
    if (want & JT_OBJECT) {
        if (compile_object(c, s, &x)) return -1;
        alts[n++] = x;
    }
    if (want & JT_ARRAY) {
        if (compile_array(c, s, &x)) return -1;
        alts[n++] = x;
    }
    *node = n ? gb_choice(g, alts, n) : EMPTY;
    return 0;
}

static int compile_object_schema(Ctx *c, const json_t *s, Filter f, uint32_t *node) {
    Keywords kw;
    if (scan_keywords(c, s, &kw)) return -1;
    if (kw.present >> KW_REF & 1) return only_with(c, &kw, "$ref", 1u << KW_REF) ? -1 : compile_ref(c, s, f, node);
    if (kw.present >> KW_ANYOF & 1) return only_with(c, &kw, "anyOf", 1u << KW_ANYOF) ? -1 : compile_anyof(c, s, f, node);
    if (kw.present & (1u << KW_ENUM | 1u << KW_CONST)) return compile_enum(c, s, &kw, f, node);
    if (kw.present >> KW_TYPE & 1) return compile_typed(c, s, &kw, f, node);
    for (int cls = KW_OBJECT; cls < KW_N; cls++)
        if (kw.present >> cls & 1) return fail(c, "'%s' needs a 'type' beside it", kw.first[cls]);
    *node = any_value(c, f);
    return 0;
}

static int compile(Ctx *c, const json_t *s, Filter f, uint32_t *node) {
    if (c->depth >= SCHEMA_MAX_NESTING) return fail(c, "the schema nests deeper than %d levels (each $ref counts as one)", SCHEMA_MAX_NESTING);
    c->depth++;
    int rc = 0;
    if (json_is_true(s)) *node = any_value(c, f);
    else if (json_is_false(s)) *node = EMPTY;
    else if (!json_is_object(s)) rc = fail(c, "a schema must be an object or a boolean");
    else rc = compile_object_schema(c, s, f, node);
    c->depth--;
    if (!rc && c->g->too_big) rc = fail(c, "the schema is too large to enforce");
    return rc;
}

static void ctx_init(Ctx *c, Grammar *g, const json_t *root, int strict, const char *where) {
    memset(c, 0, sizeof *c);
    c->g = g, c->root = root, c->strict = strict, c->where = where, c->any = GRAMMAR_NONE;
}

int jsonschema_value(Grammar *g, const json_t *schema, int strict, const char *where, uint32_t *node) {
    Ctx c;
    ctx_init(&c, g, schema, strict, where);
    int rc = compile(&c, schema, ALL_JSON, node);
    if (!rc && *node == EMPTY) rc = fail(&c, "no value is valid against the schema");
    free(c.memo);
    return rc;
}

uint32_t jsonschema_any_object(Grammar *g) {
    Ctx c;
    ctx_init(&c, g, NULL, 0, "");
    return map_node(g, any_json(&c));
}

/* ------------------------------------------------------------------ tool-call arguments */

/* The header text of an argument, escaped as K3's chat format escapes attribute values. */
static void xtml_attr(StrBuf *b, const char *s) {
    for (; *s; s++) {
        if (*s == '&') sb_adds(b, "&amp;");
        else if (*s == '"') sb_adds(b, "&quot;");
        else sb_add(b, s, 1);
    }
}

/* One argument's value: a SWITCH on the declared type, each case the value then the close. */
static int argument_value(Ctx *c, const json_t *schema, uint32_t *node) {
    Grammar *g = c->g;
    GSpan lits[6];
    uint32_t conts[6], n = 0;
    for (int t = 0; t < 6; t++) {
        uint32_t x;
        Filter f = {(uint8_t)(1u << t), (uint8_t)((1u << t) == JT_STRING)};
        if (compile(c, schema, f, &x)) return -1;
        if (x == EMPTY) continue;
        GSpan head[3] = {text(g, type_names[t]), text(g, "\""), marker(g, GM_SEP)};
        GSpan tail[3] = {marker(g, GM_CLOSE), text(g, "argument"), marker(g, GM_SEP)};
        uint32_t kids[2] = {x, gb_lit1(g, gb_join(g, tail, 3))};
        lits[n] = gb_join(g, head, 3);
        conts[n++] = gb_seq(g, kids, 2);
    }
    *node = n ? gb_switch(g, lits, conts, n) : EMPTY;
    return 0;
}

/* parameters: absent or {} (no arguments), or an object schema with properties. */
static int check_parameters(Ctx *c, const json_t *p) {
    Keywords kw;
    uint8_t types;
    int integer;
    if (!p || (json_is_object(p) && !json_object_size(p))) return 0;
    if (!json_is_object(p)) return fail(c, "'parameters' must be a JSON Schema object");
    if (scan_keywords(c, p, &kw) || only_with(c, &kw, "parameters", 1u << KW_TYPE | 1u << KW_OBJECT)) return -1;
    if (!(kw.present >> KW_TYPE & 1) || parse_type(c, json_object_get(p, "type"), &types, &integer) || types != JT_OBJECT)
        return fail(c, "'parameters' must have \"type\": \"object\"");
    const json_t *props = json_object_get(p, "properties"), *addl = json_object_get(p, "additionalProperties");
    if (check_object_rules(c, p, props, json_object_get(p, "required"))) return -1;
    if (!json_object_size(props) && json_is_object(addl))
        return fail(c, "arguments with any names ('additionalProperties' as a schema) are not supported; declare 'properties'");
    return 0;
}

static int compile_arguments(Ctx *c, const json_t *p, uint32_t *node) {
    Grammar *g = c->g;
    if (check_parameters(c, p)) return -1;
    const json_t *props = json_object_get(p, "properties"), *req = json_object_get(p, "required"), *v;
    size_t n = json_object_size(props), k = 0;
    GMember *m = df_malloc((n ? n : 1) * sizeof *m);
    const char *key;
    int rc = 0;
    json_object_foreach((json_t *)props, key, v) {
        size_t mark = path_push(c, ".properties.%.60s", key);
        uint32_t value = EMPTY;
        int required = is_required(req, key);
        StrBuf b = {0};
        xtml_attr(&b, key);
        if (b.n > ARG_KEY_MAX) rc = fail(c, "the property name is longer than %d bytes", ARG_KEY_MAX);
        if (!rc) rc = argument_value(c, v, &value);
        if (!rc && value == EMPTY && required) rc = fail(c, "no value is valid for this required property");
        path_pop(c, mark);
        if (!rc && value != EMPTY) {
            GSpan parts[4] = {marker(g, GM_OPEN), text(g, "argument key=\""), gb_text(g, b.p, b.n), text(g, "\" type=\"")};
            m[k++] = (GMember){gb_join(g, parts, 4), value, (uint8_t)required};
        }
        sb_free(&b);
        if (rc) break;
    }
    if (!rc) *node = gb_members(g, m, k, NO_TEXT, NO_TEXT, NO_TEXT);
    if (!rc && g->too_big) rc = fail(c, "the parameters are too large to enforce");
    free(m);
    return rc;
}

int jsonschema_arguments(Grammar *g, const json_t *parameters, int strict, const char *where, uint32_t *node) {
    Ctx c;
    ctx_init(&c, g, parameters, strict, where);
    int rc = compile_arguments(&c, parameters, node);
    free(c.memo);
    return rc;
}
