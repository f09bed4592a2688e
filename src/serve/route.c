/* route.c - the server's route table (see route.h). */
#include "serve/route.h"

#include <stddef.h>
#include <string.h>

#define MODEL_PREFIX "/v1/models/"

static const struct {
    const char *path;
    int post;     /* 1: POST; 0: GET (and HEAD) */
    Route route;
} routes[] = {
    {"/v1/models", 0, ROUTE_MODELS},
    {MODEL_PREFIX, 0, ROUTE_MODEL}, /* a prefix: see route.h */
    {"/v1/chat/completions", 1, ROUTE_CHAT},
    {"/v1/completions", 1, ROUTE_COMPLETIONS},
    {"/v1/responses", 1, ROUTE_RESPONSES},
    {"/v1/messages", 1, ROUTE_MESSAGES},
    {"/v1/messages/count_tokens", 1, ROUTE_COUNT_TOKENS},
    {"/health", 0, ROUTE_HEALTH},
    {"/metrics", 0, ROUTE_METRICS},
};

RouteResult route_find(const char *method, const char *path, Route *route, const char **allow) {
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int model = routes[i].route == ROUTE_MODEL;
        if (model ? strncmp(path, MODEL_PREFIX, strlen(MODEL_PREFIX)) || !path[strlen(MODEL_PREFIX)]
                  : strcmp(path, routes[i].path) != 0)
            continue;
        const char *methods = routes[i].post ? "POST" : "GET, HEAD";
        if (allow) *allow = methods;
        *route = routes[i].route;
        if (!strcmp(method, "OPTIONS")) return ROUTE_PREFLIGHT;
        int ok = routes[i].post ? !strcmp(method, "POST") : !strcmp(method, "GET") || !strcmp(method, "HEAD");
        return ok ? ROUTE_OK : ROUTE_BAD_METHOD;
    }
    return ROUTE_NOT_FOUND;
}

int route_is_public(Route r) { return r == ROUTE_HEALTH; }

int route_generates(Route r) { return r == ROUTE_CHAT || r == ROUTE_COMPLETIONS || r == ROUTE_MESSAGES || r == ROUTE_RESPONSES; }

int route_is_anthropic(Route r) { return r == ROUTE_MESSAGES || r == ROUTE_COUNT_TOKENS; }

const char *route_model_id(const char *path) { return path + strlen(MODEL_PREFIX); }

static int hex_digit(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    ch = (char)(ch | 0x20);
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

size_t route_unescape(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        int hi = r[0] == '%' ? hex_digit(r[1]) : -1, lo = hi >= 0 ? hex_digit(r[2]) : -1;
        if (lo >= 0 && (hi | lo)) {
            *w++ = (char)(hi * 16 + lo);
            r += 3;
        } else
            *w++ = *r++;
    }
    *w = 0;
    return (size_t)(w - s);
}
