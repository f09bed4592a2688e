/* route.h - which endpoint a request's method and path name, independent of HTTP plumbing.
 *
 * Paths are compared whole and exactly (no trailing slash, no case folding), except that
 * /v1/models/ followed by anything is ROUTE_MODEL (the endpoint checks the id: model names may
 * hold a slash, "owner/name"). HEAD is answered
 * wherever GET is (the HTTP layer sends the headers only), OPTIONS wherever the path exists
 * (CORS preflight and Allow). Stateless; the strings are static. */
#ifndef DF_ROUTE_H
#define DF_ROUTE_H

#include <stddef.h>

typedef enum {
    ROUTE_MODELS,
    ROUTE_MODEL,
    ROUTE_CHAT,
    ROUTE_COMPLETIONS,
    ROUTE_MESSAGES,
    ROUTE_COUNT_TOKENS,
    ROUTE_RESPONSES,
    ROUTE_HEALTH,
    ROUTE_METRICS,
} Route;

typedef enum {
    ROUTE_OK = 0,           /* *route is the endpoint */
    ROUTE_PREFLIGHT = 1,    /* OPTIONS on a known path: *allow lists its methods */
    ROUTE_NOT_FOUND = 404,
    ROUTE_BAD_METHOD = 405, /* *allow lists the methods the path accepts */
} RouteResult;

/* Looks up method and path. allow (may be NULL) gets the path's methods ("GET, HEAD", "POST"). */
RouteResult route_find(const char *method, const char *path, Route *route, const char **allow);

/* 1 when the route needs no API key (the health check, so that load balancers need none). */
int route_is_public(Route r);
/* 1 for the routes that generate (they take a JSON body and may wait for the model). */
int route_generates(Route r);
/* 1 for Anthropic's routes (their errors take Anthropic's shape). */
int route_is_anthropic(Route r);
/* The model id a ROUTE_MODEL path names (inside path). */
const char *route_model_id(const char *path);

/* Percent-decodes s in place (a path or query) and returns its new length, except that %00
 * stays as it is: a NUL would end the path early ("/v1/models%00x" must not be "/v1/models").
 * Malformed escapes stay as they are. */
size_t route_unescape(char *s);

#endif
