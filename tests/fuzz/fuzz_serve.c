/* fuzz_serve.c - libFuzzer harness for the server's request handling without the network: the
 * request line's path is percent-decoded and routed; a generation route's body is validated
 * (OpenAI chat / completions / responses, Anthropic messages) and, when valid, rendered into prompt tokens
 * with K3's chat format (a synthetic vocabulary), its sampling checked and its output constraint
 * (response_format, tool_choice) compiled; every refusal is turned
 * into the error body its API sends. Whatever the input, nothing may crash, leak or read out of
 * bounds, and every refusal names a status the server sends.
 *
 * Input: "METHOD PATH\n" then the body.
 *
 * Built by `make fuzz` (build-fuzz/fuzz/fuzz_serve); `tests/fuzz/run.sh 60 serve` runs it for a minute
 * from tests/fuzz/corpus/serve (docs/FUZZING.md). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/anthropic.h"
#include "serve/exchange.h"
#include "serve/responses.h"
#include "serve/route.h"
#include "serve/wire.h"
#include "synth/vocab_synth.h"
#include "text/tokenizer.h"
#include "text/vocab_trie.h"

#define MODEL_ID "deltafin-kimi-k3"

static Tokenizer *tok;
static Memo *memo;
static VocabTrie *trie;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char dir[] = "/tmp/df-fuzz-serve-XXXXXX";
    if (!mkdtemp(dir) || vocab_write_synthetic(dir, 1000, 7) || !(tok = tok_load(dir))) {
        fprintf(stderr, "fuzz_serve: cannot make the synthetic vocabulary in %s\n", dir);
        abort();
    }
    char path[64]; /* loaded: the files are not needed any more */
    snprintf(path, sizeof path, "%s/tiktoken.model", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    rmdir(dir);
    memo = memo_new(0);
    if (!(trie = vocab_trie_new(tok))) abort();
    return 0;
}

static void check_error(const ApiError *err, int anthropic) {
    static const int statuses[] = {400, 401, 404, 405, 413, 429, 500};
    int known = 0;
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) known |= err->status == statuses[i];
    if (!known || !err->message[0]) abort();
    char *body = anthropic ? anthropic_error(err) : wire_error(err);
    free(body);
}

/* A valid request all the way to its prompt tokens and sampler. */
static void render(const ApiRequest *r) {
    ExchangeEnv env = {tok, memo, -1, -1, 8192, 1, 4096, NULL, trie, MODEL_ID};
    Exchange x;
    ApiError err;
    if (exchange_init(&x, &env, r, &err)) check_error(&err, r->anthropic);
    else if (x.prompt.n == 0 || x.prompt.n > 4096) abort();
    exchange_free(&x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nl = memchr(data, '\n', size);
    size_t head = nl ? (size_t)(nl - data) : size;
    if (head > 512) return 0;
    char line[513];
    memcpy(line, data, head);
    line[head] = 0;
    char *space = strchr(line, ' ');
    if (!space) return 0;
    *space = 0;
    char *path = space + 1;
    route_unescape(path);
    Route route;
    if (route_find(line, path, &route, NULL) != ROUTE_OK || !route_generates(route)) return 0;
    const char *body = nl ? (const char *)nl + 1 : "";
    size_t len = nl ? size - head - 1 : 0;
    ApiRequest r;
    ApiError err;
    int rc = route == ROUTE_MESSAGES    ? anthropic_request_parse(body, len, MODEL_ID, 0, &r, &err)
             : route == ROUTE_RESPONSES ? responses_request_parse(body, len, MODEL_ID, &r, &err)
                                        : api_request_parse(route == ROUTE_CHAT ? API_CHAT : API_COMPLETION, body, len, MODEL_ID, &r, &err);
    if (rc) {
        check_error(&err, route == ROUTE_MESSAGES);
        return 0;
    }
    render(&r);
    api_request_free(&r);
    return 0;
}
