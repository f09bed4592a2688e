/* schema_validate.h - a JSON Schema validator for the tests (the subset of
 * src/text/jsonschema.h, with JSON Schema's own meaning: any member order, extra members where
 * additionalProperties allows them, integers as whole numbers). It checks parsed values, such as
 * the arguments a tool call ends up with after K3's chat format is parsed back, independently of
 * how they were written. The Node tests check the same outputs with ajv. */
#ifndef DF_SCHEMA_VALIDATE_H
#define DF_SCHEMA_VALIDATE_H

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Code points of a UTF-8 string (what validators count as a string's length). */
static long sv_length(const char *s) {
    long n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int sv_has_type(const json_t *v, const char *t) {
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v));
    return 0;
}

static long sv_count(const json_t *s, const char *key, long dflt) {
    const json_t *v = json_object_get(s, key);
    return v ? (long)json_integer_value(v) : dflt;
}

static int sv_valid(const json_t *root, const json_t *s, const json_t *v);

static int sv_object(const json_t *root, const json_t *s, const json_t *v) {
    const json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
    const json_t *req = json_object_get(s, "required");
    for (size_t i = 0; i < json_array_size(req); i++)
        if (!json_object_get(v, json_string_value(json_array_get(req, i)))) return 0;
    const char *key;
    const json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        const json_t *ps = json_object_get(props, key);
        if (ps ? !sv_valid(root, ps, x) : json_is_false(addl) ? 1 : json_is_object(addl) && !sv_valid(root, addl, x))
            return 0;
    }
    return 1;
}

static int sv_typed(const json_t *root, const json_t *s, const json_t *v) {
    const json_t *t = json_object_get(s, "type");
    int ok = 0;
    for (size_t i = 0; i < (json_is_array(t) ? json_array_size(t) : 1) && !ok; i++)
        ok = sv_has_type(v, json_string_value(json_is_array(t) ? json_array_get(t, i) : t));
    if (!ok) return 0;
    if (json_is_string(v)) {
        long n = sv_length(json_string_value(v));
        return n >= sv_count(s, "minLength", 0) && n <= sv_count(s, "maxLength", LONG_MAX);
    }
    if (json_is_array(v)) {
        long n = (long)json_array_size(v);
        const json_t *items = json_object_get(s, "items");
        if (n < sv_count(s, "minItems", 0) || n > sv_count(s, "maxItems", LONG_MAX)) return 0;
        for (size_t i = 0; i < json_array_size(v); i++)
            if (items && !sv_valid(root, items, json_array_get(v, i))) return 0;
        return 1;
    }
    if (json_is_object(v)) return sv_object(root, s, v);
    return 1;
}

static int sv_valid(const json_t *root, const json_t *s, const json_t *v) {
    if (json_is_boolean(s)) return json_is_true(s);
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) return sv_valid(root, json_pointer(root, json_string_value(x)), v);
    if ((x = json_object_get(s, "anyOf"))) {
        for (size_t i = 0; i < json_array_size(x); i++)
            if (sv_valid(root, json_array_get(x, i), v)) return 1;
        return 0;
    }
    if ((x = json_object_get(s, "const")) && !json_equal(x, v)) return 0;
    if ((x = json_object_get(s, "enum"))) {
        int found = 0;
        for (size_t i = 0; i < json_array_size(x) && !found; i++) found = json_equal(json_array_get(x, i), v);
        if (!found) return 0;
    }
    if (json_object_get(s, "type")) return sv_typed(root, s, v);
    return 1;
}

/* 1 when v is valid against schema (its own document for $ref). */
static int sv_check(const json_t *schema, const json_t *v) { return sv_valid(schema, schema, v); }

#endif
