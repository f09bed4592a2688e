/* json_pointer.h - resolving a local "$ref" ("#", "#/$defs/a", "#/items/0", with ~0 and ~1) in
 * a schema document, for the tests' independent schema readers. NULL when nothing is there. */
#ifndef DF_JSON_POINTER_H
#define DF_JSON_POINTER_H

#include <jansson.h>
#include <stdlib.h>

static inline const json_t *json_pointer(const json_t *root, const char *ref) {
    const json_t *at = root;
    const char *p = ref + 1;
    while (at && *p == '/') {
        char tok[256];
        size_t n = 0;
        for (p++; *p && *p != '/' && n + 1 < sizeof tok; p++) {
            char c = *p;
            if (c == '~') c = p[1] == '0' ? '~' : '/', p++;
            tok[n++] = c;
        }
        tok[n] = 0;
        at = json_is_array(at) ? json_array_get(at, strtoul(tok, NULL, 10)) : json_object_get(at, tok);
    }
    return at;
}

#endif
