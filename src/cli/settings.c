/* settings.c - the table of every setting and the one parser for it (settings.h), and the
 * `deltafin settings` command that prints it. This is the only file that reads the environment. */
#include "cli/settings.h"

#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/opts.h"
#include "cli/commands.h"
#include "cli/die.h"
#include "format/config.h"
#include "serve/memo.h"
#include "util/err.h"
#include "util/pool.h"

#define F(field) offsetof(Settings, field)

/* SET_CHOICE stores through an int: every enum it targets must be int-sized. */
_Static_assert(sizeof(StoreKind) == sizeof(int) && sizeof(CachePolicy) == sizeof(int) &&
                   sizeof(SpineChoice) == sizeof(int) && sizeof(MlaCacheMode) == sizeof(int) &&
                   sizeof(ALogMode) == sizeof(int) && sizeof(DeviceKind) == sizeof(int),
               "settings store enums as int");

static const SettingChoice store_kinds[] = {{"auto", STORE_AUTO}, {"mapped", STORE_MAPPED}, {"stream", STORE_STREAM}, {NULL, 0}};
static const SettingChoice io_backends[] = {{"threads", IO_THREADS}, {"uring", IO_URING}, {NULL, 0}};
static const SettingChoice policies[] = {{"crf", POLICY_CRF}, {"lfu", POLICY_LFU}, {"lru", POLICY_LRU}, {NULL, 0}};
static const SettingChoice spines[] = {{"auto", SPINE_AUTO}, {"int8", SPINE_INT8}, {"bf16", SPINE_BF16}, {NULL, 0}};
static const SettingChoice mla_caches[] = {{"latent", MLA_CACHE_LATENT}, {"expanded", MLA_CACHE_EXPANDED}, {NULL, 0}};
static const SettingChoice a_logs[] = {{"per-head", ALOG_PER_HEAD}, {"per-channel", ALOG_PER_CHANNEL}, {NULL, 0}};
static const SettingChoice devices[] = {{"auto", DEV_AUTO}, {"cpu", DEV_CPU}, {"cuda", DEV_CUDA}, {NULL, 0}};
static const SettingChoice host_experts[] = {{"auto", HOST_EXPERTS_AUTO}, {"copy", HOST_EXPERTS_COPY}, {"cpu", HOST_EXPERTS_CPU}, {NULL, 0}};
static const SettingChoice device_passes[] = {{"layers", PASS_LAYERS}, {"products", PASS_PRODUCTS}, {NULL, 0}};

/* "'v' is not a, b or c" */
static int not_one_of(const char *v, const char *const *names, int n) {
    char list[160] = "";
    size_t at = 0;
    for (int i = 0; i < n && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    return df_fail("'%s' is not %s", v, list);
}

static int check_named(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return 0;
    return not_one_of(v, names, n);
}

static int check_effort(const char *v, const char **stored) {
    static const char *const names[] = {"low", "high", "max"};
    *stored = v;
    return check_named(v, names, 3);
}

/* A key a client can send in a header: up to 512 visible ASCII characters, no spaces. */
static int check_key(const char *v, const char **stored) {
    *stored = v;
    if (strlen(v) > 512) return df_fail("longer than 512 characters");
    for (const char *p = v; *p; p++)
        if (*p <= ' ' || *p > '~') return df_fail("only visible ASCII characters (no spaces) may be used in a key");
    return 0;
}

static int check_kernels(const char *v, const char **stored) {
    static const char *const names[] = {"auto", "avx512", "avx2", "neon", "portable"};
    *stored = v;
    return check_named(v, names, 5);
}

/* K3_TRACE: "0" is off, "1" the default file name, anything else the file name. */
static int check_trace(const char *v, const char **stored) {
    *stored = !strcmp(v, "0") ? NULL : !strcmp(v, "1") ? "router_trace.jsonl" : v;
    return 0;
}

static int check_host(const char *v, const char **stored) {
    int loopback, http;
    *stored = v;
    return source_check_host(v, &loopback, &http);
}

/* XDG base directories are absolute (the XDG specification calls a relative one invalid). */
static int check_absolute(const char *v, const char **stored) {
    *stored = v;
    return v[0] == '/' ? 0 : df_fail("'%s' is not an absolute path", v);
}

static int check_path(const char *v, const char **stored) { return *stored = v, source_check_path(v); }
static int check_revision(const char *v, const char **stored) { return *stored = v, source_check_revision(v); }
static int check_token(const char *v, const char **stored) { return *stored = v, source_check_token(v); }

/* Every setting. A row without a default leaves its field at `unset` (0, or NULL for text): the
 * library reads that as "decide yourself" (all cores, a measured budget, the model's top-k...). */
static const Setting table[] = {
    {.name = "DELTAFIN_ROOT", .arg = "DIR", .flag = "model", .short_flag = 'm', .alias = "root", .kind = SET_TEXT, .offset = F(root), .what = "a directory",
     .def_text = "the default install ($XDG_CACHE_HOME/deltafin, else ~/.cache/deltafin) when it holds a model, else the bundled model",
     .help = "the model directory: an install (setup, fetch, warm and doctor work on it) or any checkpoint directory"},
    {.name = "DELTAFIN_QUIET", .flag = "quiet", .short_flag = 'q', .kind = SET_BOOL, .offset = F(quiet), .def = "0",
     .help = "no start-up line and no notes: only the output, warnings and errors"},
    {.name = "DELTAFIN_VERBOSE", .flag = "verbose", .kind = SET_BOOL, .offset = F(verbose), .def = "0",
     .help = "the full start-up line: every resolved setting (run --stats shows it too)"},
    {.name = "K3_THREADS", .flag = "threads", .short_flag = 't', .kind = SET_INT, .offset = F(engine.threads), .lo = 1, .hi = POOL_MAX_THREADS, .what = "a thread count", .def_text = "all cores",
     .help = "compute threads; results are bit-identical for any count"},
    {.name = "K3_RAM_GB", .flag = "ram-gb", .kind = SET_GB, .offset = F(engine.store.ram_bytes), .lo = 1, .hi = 1000000, .what = "a size in GB", .def_text = "auto",
     .help = "memory budget; auto = available memory and the cgroup limit, minus a reserve"},
    {.name = "K3_STORE", .flag = "store", .kind = SET_CHOICE, .offset = F(engine.store.kind), .choices = store_kinds, .what = "a store", .def = "auto",
     .help = "stream (budgeted expert cache + spine streaming) when the model exceeds the budget, else mapped"},
    {.name = "K3_PIN_LAYERS", .flag = "pin-layers", .kind = SET_INT, .offset = F(engine.store.pin_layers), .lo = 0, .hi = K3_MAX_LAYERS, .what = "a layer count", .def_text = "auto", .unset = -1,
     .help = "spine layers kept resident when streaming (at most the model's layers)"},
    {.name = "K3_CACHE_POLICY", .flag = "cache-policy", .kind = SET_CHOICE, .offset = F(engine.store.policy), .choices = policies, .what = "a policy", .def = CACHE_POLICY_DEFAULT_NAME,
     .help = "expert cache eviction when streaming (crf: decayed use counts, layer-aware; lfu; lru)"},
    {.name = "K3_IO_THREADS", .flag = "io-threads", .kind = SET_INT, .offset = F(engine.store.io_threads), .lo = 1, .hi = 256, .what = "a thread count", .def = "8",
     .help = "parallel expert reads when streaming (I/O threads, or reads in flight with DELTAFIN_IO=uring)"},
    {.name = "K3_IO", .flag = "io", .kind = SET_CHOICE, .offset = F(engine.store.io), .choices = io_backends, .what = "an I/O backend", .def = "threads",
     .help = "streaming: how reads run: threads (blocking readers) or uring (io_uring, Linux only; fixed buffers once the cache's pages are prepared)"},
    {.name = "K3_POPULATE", .flag = "populate", .kind = SET_BOOL, .offset = F(engine.store.populate), .def = "1",
     .help = "streaming: prepare the expert cache's pages on a background thread at start-up"},
    {.name = "K3_PREFETCH", .flag = "prefetch", .kind = SET_BOOL, .offset = F(engine.store.prefetch), .def = "1",
     .help = "streaming: read the experts the next layer chose last time, and the next streamed layer, ahead"},
    {.name = "K3_DIRECT", .flag = "direct", .kind = SET_BOOL, .offset = F(engine.store.direct), .def = "1",
     .help = "streaming: O_DIRECT reads where the file system allows them, F_NOCACHE on macOS (0: buffered + DONTNEED)"},
    {.name = "K3_SPEC", .flag = "spec", .kind = SET_BOOL, .offset = F(engine.spec), .def = "1",
     .help = "lossless n-gram speculation in run, chat and serve (same tokens either way)"},
    {.name = "K3_LOOKAHEAD", .flag = "lookahead", .kind = SET_BOOL, .offset = F(engine.store.lookahead), .def = "1",
     .help = "streaming: guess the next layer's experts with its router and read them ahead"},
    {.name = "K3_SPINE", .flag = "spine", .kind = SET_CHOICE, .offset = F(engine.spine), .choices = spines, .what = "a spine format", .def = "auto",
     .help = "int8: the converted int8 spine (lossy); bf16: exact; auto: int8 when all of it is converted"},
    {.name = "K3_MOE_TOP_K", .flag = "moe-top-k", .kind = SET_INT, .offset = F(engine.top_k), .lo = 1, .hi = K3_MAX_TOP_K, .what = "an expert count", .def_text = "the model's",
     .help = "route each token to only its N best experts (at most the model's), renormalised; lossy"},
    {.name = "K3_PROFILE", .flag = "profile", .kind = SET_BOOL, .offset = F(engine.profile), .def = "0",
     .help = "one line per forward: bytes read, cache hits, GB/s, time per phase"},
    {.name = "K3_TRACE", .arg = "FILE", .flag = "router-trace", .kind = SET_TEXT, .offset = F(engine.trace), .check = check_trace, .what = "a file name", .def_text = "off",
     .help = "router selections to a JSON-lines file (1: router_trace.jsonl; 0: off)"},
    {.name = "K3_REPLAY", .arg = "FILE", .flag = "replay", .kind = SET_TEXT, .offset = F(engine.replay), .what = "a file name", .def_text = "off",
     .help = "benchmark only: a router trace whose selections replace the router's (mapped onto the model); the output is meaningless"},
    {.name = "K3_REPLAY_LOOKAHEAD", .flag = "replay-lookahead", .kind = SET_INT, .offset = F(engine.replay_lookahead), .lo = 0, .hi = 100, .what = "a recall in percent", .def_text = "off", .unset = -1,
     .help = "with DELTAFIN_REPLAY and DELTAFIN_LOOKAHEAD=1: simulate router lookahead of this recall (percent) on the replayed routing"},
    {.name = "K3_CONTEXT", .flag = "ctx-size", .short_flag = 'c', .alias = "context", .kind = SET_INT, .offset = F(engine.context), .lo = 1, .hi = 1 << 24, .what = "a position count", .def_text = "65536 (4096 with DELTAFIN_MLA_CACHE=expanded)",
     .help = "positions a sequence may hold (within the model's limit)"},
    {.name = "K3_PREFILL_WINDOW", .flag = "prefill-window", .kind = SET_INT, .offset = F(engine.window), .lo = 0, .hi = MODEL_MAX_WINDOW, .what = "a row count", .def = "0",
     .help = "prefill window: the most prompt positions one pass reads each routed expert for (0: sized from the memory plan)"},
    {.name = "K3_MLA_CACHE", .flag = "mla-cache", .kind = SET_CHOICE, .offset = F(engine.mla_cache), .choices = mla_caches, .what = "a cache layout", .def = "latent",
     .help = "MLA attention cache layout: latent (normalised latent and k_pe) or expanded (every head's key and value)"},
    {.name = "K3_HF_HOST", .arg = "URL", .flag = "hf-host", .kind = SET_TEXT, .offset = F(engine.fetch.host), .check = check_host, .what = "a host", .def = "huggingface.co",
     .help = "where to install from (http:// only on loopback)"},
    {.name = "K3_HF_PATH", .arg = "ORG/NAME", .flag = "hf-path", .kind = SET_TEXT, .offset = F(engine.fetch.path), .check = check_path, .what = "a repository", .def = "moonshotai/Kimi-K3",
     .help = "the repository to install"},
    {.name = "K3_HF_REVISION", .arg = "REV", .flag = "hf-revision", .kind = SET_TEXT, .offset = F(engine.fetch.revision), .check = check_revision, .what = "a revision", .def = "main",
     .help = "the revision to install"},
    {.name = "HF_TOKEN", .arg = "TOKEN", .flag = "hf-token", .kind = SET_TEXT, .offset = F(engine.fetch.token), .check = check_token, .what = "a token", .def_text = "none", .secret = 1,
     .help = "sent to the source as a bearer token"},
    {.name = "K3_FETCH_CONNECT_TIMEOUT", .flag = "fetch-connect-timeout", .kind = SET_INT, .offset = F(engine.fetch.connect_timeout_s), .lo = 1, .hi = 3600, .what = "a number of seconds", .def = "20",
     .help = "seconds to connect to the source"},
    {.name = "K3_FETCH_STALL_TIMEOUT", .flag = "fetch-stall-timeout", .kind = SET_INT, .offset = F(engine.fetch.stall_timeout_s), .lo = 1, .hi = 3600, .what = "a number of seconds", .def = "60",
     .help = "a transfer that receives nothing for this long is retried"},
    {.name = "K3_FETCH_RETRIES", .flag = "fetch-retries", .kind = SET_INT, .offset = F(engine.fetch.retries), .lo = 0, .hi = 100, .what = "a retry count", .def = "6",
     .help = "attempts after the first for a failed range"},
    {.name = "K3_FETCH_BACKOFF_MS", .flag = "fetch-backoff-ms", .kind = SET_INT, .offset = F(engine.fetch.backoff_ms), .lo = 0, .hi = 600000, .what = "a number of milliseconds", .def = "1000",
     .help = "first retry delay, doubled each time"},
    {.name = "K3_FETCH_PARALLEL", .flag = "fetch-parallel", .kind = SET_INT, .offset = F(engine.fetch.parallel), .lo = 1, .hi = 64, .what = "a connection count", .def = "8",
     .help = "concurrent connections to the source"},
    {.name = "K3_FETCH_CHUNK_KB", .flag = "fetch-chunk-kb", .kind = SET_INT, .offset = F(engine.fetch.chunk_kb), .lo = 4, .hi = 4 << 20, .what = "a size in KiB", .def = "65536",
     .help = "largest byte range one request asks for"},
    {.name = "K3_DISK_FREE_BYTES", .flag = "disk-free-bytes", .kind = SET_INT64, .offset = F(engine.fetch.disk_free_bytes), .lo = 0, .hi = INT64_MAX, .what = "a byte count", .def_text = "measured", .unset = -1,
     .help = "tests: the free disk space setup assumes"},
    {.name = "K3_OFFLINE", .flag = "offline", .kind = SET_BOOL, .offset = F(engine.offline), .def = "0",
     .help = "1: never fetch; a missing expert of a streaming install is an error"},
    {.name = "K3_SERVER_MAX_TOKENS", .flag = "server-max-tokens", .kind = SET_INT64, .offset = F(server_max_tokens), .lo = 1, .hi = 1 << 24, .what = "a token count", .def_text = "unlimited", .unset = -1,
     .help = "ceiling on server generations"},
    {.name = "K3_RESPONSE_MEMO_ENTRIES", .flag = "memo-entries", .kind = SET_INT, .offset = F(memo_entries), .lo = 0, .hi = MEMO_MAX_ENTRIES, .what = "an entry count", .def = "32",
     .help = "exact replay cache for identical server requests (0 disables)"},
    {.name = "K3_PROMPT_SNAPSHOT", .flag = "prompt-snapshot", .kind = SET_BOOL, .offset = F(prompt_snapshot), .def = "1",
     .help = "server: keep a copy of the decode state at the end of each prompt (0 disables)"},
    {.name = "DELTAFIN_PROMPT_CACHE", .arg = "DIR|off", .flag = "prompt-cache", .kind = SET_TEXT, .offset = F(prompt_cache), .what = "a directory or off", .nonempty = 1,
     .def_text = "$XDG_CACHE_HOME/deltafin-prompt-cache (else ~/.cache/deltafin-prompt-cache)",
     .help = "serve: keep the decode state of each finished prompt in this folder, so a prompt that starts with one is not prefilled again (after a restart too); off: none"},
    {.name = "DELTAFIN_PROMPT_CACHE_GB", .flag = "prompt-cache-gb", .kind = SET_GB, .offset = F(prompt_cache_bytes), .lo = 1, .hi = 100000000, .what = "a size in GB", .def = "16",
     .help = "serve: the most the prompt cache's folder may hold (least recently used entries go first)"},
    {.name = "DELTAFIN_ANSWER_TOKENS", .flag = "answer-tokens", .kind = SET_INT64, .offset = F(answer_tokens), .lo = 0, .hi = 1 << 24, .what = "a token count", .def = "8192",
     .help = "chat answers (serve's chats and messages, deltafin chat) stop after this many tokens unless the request (or -n) says otherwise; 0: no limit"},
    {.name = "DELTAFIN_REPEAT_STOP", .flag = "repeat-stop", .kind = SET_BOOL, .offset = F(repeat_stop), .def = "1",
     .help = "end a chat answer caught in a loop (its last tokens one block repeated: 3 copies, 128 tokens at least); 0: let it run"},
    {.name = "DELTAFIN_API_KEY", .arg = "KEY", .flag = "api-key", .kind = SET_TEXT, .offset = F(api_key), .check = check_key, .what = "a key", .def_text = "none",
     .secret = 1, .nonempty = 1, .help = "serve: require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (set but empty is refused)"},
    {.name = "K3_REASONING_EFFORT", .arg = "low|high|max", .flag = "effort", .kind = SET_TEXT, .offset = F(effort), .check = check_effort, .what = "an effort", .def_text = "max",
     .help = "chat thinking effort (low, high, max)"},
    {.name = "K3_A_LOG", .flag = "a-log", .kind = SET_CHOICE, .offset = F(engine.a_log), .choices = a_logs, .what = "an indexing", .def = "per-head",
     .help = "KDA decay-gate indexing; per-channel reproduces the original engine's reading (compatibility only)"},
    {.name = "K3_KERNELS", .arg = "auto|avx512|avx2|neon|portable", .flag = "kernels", .kind = SET_TEXT, .offset = F(engine.kernels), .check = check_kernels, .what = "a kernel set", .def = "auto",
     .help = "avx512, avx2 (x86-64), neon (AArch64) or portable (all bit-identical); auto: the widest the CPU runs"},
    {.name = "K3_DEV", .flag = "device", .kind = SET_CHOICE, .offset = F(engine.device), .choices = devices, .what = "a device", .def = "auto",
     .help = "cuda when the binary has the CUDA backend and a GPU answers, else cpu"},
    {.name = "K3_DEV_PASS", .flag = "device-pass", .kind = SET_CHOICE, .offset = F(engine.device_pass), .choices = device_passes, .what = "a device pass", .def = "layers",
     .help = "cuda: every forward with every layer on the GPU (layers), or only the matrix products, bit-identical to the CPU (products)"},
    {.name = "K3_DEV_EXPERT_GB", .flag = "device-expert-gb", .kind = SET_GB, .offset = F(engine.device_expert_bytes), .lo = 0, .hi = 1000000, .what = "a size in GB", .def_text = "auto", .unset = -1,
     .help = "GPU memory for the layer pass's expert cache (auto: all the spine leaves; 0: no cache, experts stay in host memory)"},
    {.name = "K3_DEV_HOST_EXPERTS", .flag = "device-host-experts", .kind = SET_CHOICE, .offset = F(engine.host_experts), .choices = host_experts, .what = "a way", .def = "auto",
     .help = "experts the GPU's cache misses: copy (into the cache), cpu (CPU threads compute them from host memory meanwhile; copied into the cache in the background), auto (split by measured cost, the likeliest to be used again copied into the cache)"},
    {.name = "K3_DEV_GRAPHS", .flag = "device-graphs", .kind = SET_BOOL, .offset = F(engine.device_graphs), .def = "1",
     .help = "cuda: decode steps replay their launches between waits as CUDA graphs (0: launched one by one; same results)"},
    {.name = "K3_DEV_TENSOR_CORES", .flag = "device-tensor-cores", .kind = SET_BOOL, .offset = F(engine.device_tensor_cores), .def = "1",
     .help = "the layer pass's products of many rows (prefill windows) as BF16 tensor-core GEMMs of X in three parts (within the reference's tolerance); 0: on the CUDA cores"},
    {.name = "TMPDIR", .arg = "DIR", .flag = "tmpdir", .kind = SET_TEXT, .offset = F(tmpdir), .what = "a directory", .def = "/tmp",
     .help = "where bench keeps its children's output while it runs"},
    {.name = "XDG_CACHE_HOME", .arg = "DIR", .kind = SET_TEXT, .offset = F(cache_home), .check = check_absolute, .what = "a directory", .def_text = "~/.cache",
     .help = "where per-user caches live: the default install is its deltafin folder (environment only, shared with other programs)"},
    {.name = "XDG_STATE_HOME", .arg = "DIR", .kind = SET_TEXT, .offset = F(state_home), .check = check_absolute, .what = "a directory", .def_text = "~/.local/state",
     .help = "where per-user state lives: chat's line history is deltafin/chat_history in it (environment only)"},
};

#define N_SETTINGS (sizeof table / sizeof table[0])
_Static_assert(N_SETTINGS <= SETTINGS_MAX, "raise SETTINGS_MAX");

const Setting *settings_table(size_t *n) {
    *n = N_SETTINGS;
    return table;
}

#define OLD_PREFIX "K3_"
#define PREFIX "DELTAFIN_"

const char *settings_old_var(const Setting *row) { return strncmp(row->name, OLD_PREFIX, 3) ? NULL : row->name; }

const char *settings_var(const Setting *row) {
    static char names[SETTINGS_MAX][64]; /* DELTAFIN_ + the rest, made once per row */
    if (!settings_old_var(row)) return row->name;
    char *n = names[row - table];
    if (!n[0]) snprintf(n, sizeof names[0], PREFIX "%s", row->name + 3);
    return n;
}

const Setting *settings_find_n(const char *name, size_t n) {
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const char *a = settings_var(&table[i]), *b = settings_old_var(&table[i]);
        if ((strlen(a) == n && !strncmp(a, name, n)) || (b && strlen(b) == n && !strncmp(b, name, n))) return &table[i];
    }
    return NULL;
}

const Setting *settings_find(const char *name) { return settings_find_n(name, strlen(name)); }

const Setting *settings_find_flag(const char *flag) {
    for (size_t i = 0; i < N_SETTINGS; i++)
        if ((table[i].flag && !strcmp(table[i].flag, flag)) || (table[i].alias && !strcmp(table[i].alias, flag)))
            return &table[i];
    return NULL;
}

static void *field(Settings *s, const Setting *row) { return (char *)s + row->offset; }

/* A whole number in [lo, hi]; anything else (spaces, fractions, overflow) fails. */
static int parse_integer(const char *v, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end || n < lo || n > hi) return -1;
    *out = n;
    return 0;
}

static int parse_choice(const Setting *row, const char *v, int *out) {
    const char *names[8];
    int n = 0;
    for (const SettingChoice *c = row->choices; c->name; c++, n++) {
        if (!strcmp(c->name, v)) return *out = c->value, 0;
        names[n] = c->name;
    }
    return not_one_of(v, names, n);
}

/* A row without a default: its field at `unset`. */
static void set_unset(Settings *s, const Setting *row) {
    void *p = field(s, row);
    switch (row->kind) {
    case SET_INT:
    case SET_BOOL:
    case SET_CHOICE: *(int *)p = (int)row->unset; break;
    case SET_INT64: *(int64_t *)p = row->unset; break;
    case SET_GB: *(uint64_t *)p = row->unset < 0 ? UINT64_MAX : (uint64_t)row->unset; break;
    case SET_TEXT: *(const char **)p = NULL; break;
    }
}

static int parse_into(Settings *s, const Setting *row, const char *v) {
    void *p = field(s, row);
    long long n;
    switch (row->kind) {
    case SET_INT:
    case SET_INT64:
        if (parse_integer(v, row->lo, row->hi, &n))
            return df_fail("'%s' is not %s in %lld..%lld", v, row->what, row->lo, row->hi);
        if (row->kind == SET_INT) *(int *)p = (int)n;
        else *(int64_t *)p = (int64_t)n;
        return 0;
    case SET_BOOL:
        if (strcmp(v, "0") && strcmp(v, "1")) return df_fail("'%s' is not 0 or 1", v);
        *(int *)p = v[0] == '1';
        return 0;
    case SET_CHOICE: return parse_choice(row, v, (int *)p);
    case SET_GB: {
        char *end;
        errno = 0;
        double gb = strtod(v, &end);
        if (errno || end == v || *end || !(gb >= row->lo / 100.0 && gb <= (double)row->hi))
            return df_fail("'%s' is not %s (%g..%lld)", v, row->what, row->lo / 100.0, row->hi);
        *(uint64_t *)p = (uint64_t)llround(gb * 1e9);
        return 0;
    }
    case SET_TEXT: {
        const char *stored = v;
        if (row->check && row->check(v, &stored)) return -1;
        *(const char **)p = stored;
        return 0;
    }
    }
    return df_fail("unknown setting kind");
}

/* FetchOptions.given follows the origins of the source's rows: an install fetches from the source
 * it records unless the settings name another one. */
static void note_source_given(Settings *s, const Setting *row, int given) {
    unsigned bit = row->offset == F(engine.fetch.host)       ? FETCH_GIVEN_HOST
                   : row->offset == F(engine.fetch.path)     ? FETCH_GIVEN_PATH
                   : row->offset == F(engine.fetch.revision) ? FETCH_GIVEN_REVISION
                                                             : 0;
    if (given) s->engine.fetch.given |= bit;
    else s->engine.fetch.given &= ~bit;
}

int settings_set(Settings *s, const Setting *row, const char *value, const char *origin) {
    size_t i = (size_t)(row - table);
    if (!value || !*value) {
        s->origin[i] = NULL;
        note_source_given(s, row, 0);
        if (!row->def) return set_unset(s, row), 0;
        value = row->def;
    } else {
        s->origin[i] = origin;
        note_source_given(s, row, 1);
    }
    return parse_into(s, row, value) ? df_failctx("%s", origin) : 0;
}

const char *settings_origin(const Settings *s, const Setting *row) { return s->origin[row - table]; }

void settings_defaults(Settings *s) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < N_SETTINGS; i++)
        if (settings_set(s, &table[i], NULL, table[i].name)) /* a default the table cannot parse */
            abort();
}

/* HOME, else the password database's home directory; NULL when neither has an absolute one. */
static const char *home_dir(void) {
    const char *h = getenv("HOME");
    if (h && h[0] == '/') return h;
    struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir && pw->pw_dir[0] == '/' ? pw->pw_dir : NULL;
}

/* The value of row in the environment, under its name or its older one (*from: which), or NULL.
 * Both set, to different values: an error (-1 in *bad). */
static const char *env_value(const Setting *row, const char **from, int *bad) {
    const char *name = settings_var(row), *old = settings_old_var(row);
    const char *v = getenv(name), *o = old ? getenv(old) : NULL;
    *bad = 0, *from = name;
    if (v && o && strcmp(v, o))
        return *bad = df_fail("%s=%s and its older name %s=%s disagree: unset one", name, v, old, o), NULL;
    if (!v && o) *from = old;
    return v ? v : o;
}

int settings_from_env(Settings *s) {
    settings_defaults(s);
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const char *from;
        int bad;
        const char *v = env_value(&table[i], &from, &bad);
        if (bad) return -1;
        if (v && !*v && table[i].nonempty) return df_fail("%s is set but empty: give %s, or unset it", from, table[i].what);
        if (v && *v && settings_set(s, &table[i], v, from)) return -1;
    }
    s->home = home_dir();
    return 0;
}

/* base (an XDG variable's value) or $HOME/fallback, then "/deltafin" and tail. */
static int xdg_path(const Settings *s, const char *base, const char *fallback, const char *tail, char *buf, size_t n) {
    int len = base ? snprintf(buf, n, "%s/deltafin%s", base, tail)
              : s->home ? snprintf(buf, n, "%s/%s/deltafin%s", s->home, fallback, tail)
                        : -1;
    if (len < 0) return df_fail("no home directory (HOME is not set): set DELTAFIN_ROOT or give -m/--model DIR");
    if ((size_t)len >= n) return df_fail("the path under %s is too long", base ? base : s->home);
    return 0;
}

int settings_default_root(const Settings *s, char *buf, size_t n) { return xdg_path(s, s->cache_home, ".cache", "", buf, n); }

int settings_prompt_cache_dir(const Settings *s, char *buf, size_t n) {
    if (s->prompt_cache && !strcmp(s->prompt_cache, "off")) return buf[0] = 0, 0;
    if (!s->prompt_cache) return xdg_path(s, s->cache_home, ".cache", "-prompt-cache", buf, n);
    if ((size_t)snprintf(buf, n, "%s", s->prompt_cache) >= n) return df_fail("DELTAFIN_PROMPT_CACHE: the path is too long");
    return 0;
}

int settings_history_file(const Settings *s, char *buf, size_t n) {
    return xdg_path(s, s->state_home, ".local/state", "/chat_history", buf, n);
}

void settings_value_text(const Settings *s, const Setting *row, char *buf, size_t n) {
    const void *p = (const char *)s + row->offset;
    switch (row->kind) {
    case SET_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case SET_INT64: snprintf(buf, n, "%lld", (long long)*(const int64_t *)p); break;
    case SET_BOOL: snprintf(buf, n, "%d", *(const int *)p); break;
    case SET_GB: snprintf(buf, n, "%.12g", *(const uint64_t *)p / 1e9); break;
    case SET_TEXT: snprintf(buf, n, "%s", *(const char *const *)p ? *(const char *const *)p : ""); break;
    case SET_CHOICE:
        snprintf(buf, n, "?");
        for (const SettingChoice *c = row->choices; c->name; c++)
            if (c->value == *(const int *)p) snprintf(buf, n, "%s", c->name);
        break;
    }
}

void settings_print(const Settings *s, FILE *f) {
    Settings d;
    settings_defaults(&d);
    for (size_t i = 0; i < N_SETTINGS; i++) {
        const Setting *row = &table[i];
        char now[256], def[256], flag[64] = "";
        settings_value_text(s, row, now, sizeof now);
        settings_value_text(&d, row, def, sizeof def);
        int is_default = !strcmp(now, def);
        const char *shown = is_default && !row->def ? row->def_text : row->secret ? "(set, not shown)" : now;
        const char *from = s->origin[i];
        if (row->flag) snprintf(flag, sizeof flag, "; option --%s", row->flag);
        char also[64] = "";
        if (settings_old_var(row)) snprintf(also, sizeof also, "; also %s", settings_old_var(row));
        fprintf(f, "%s=%s%s%s%s\n    %s (default: %s%s%s)\n", settings_var(row), shown, is_default ? "" : "   [set]",
                !is_default && from && strcmp(from, settings_var(row)) ? " by " : "",
                !is_default && from && strcmp(from, settings_var(row)) ? from : "", row->help, row->def ? row->def : row->def_text,
                flag, also);
    }
}

int cmd_settings(Settings *set, int argc, char **argv) {
    static const CliCommand cmd = {
        "settings", "[options]",
        "Lists every setting with its value now, its default and what it does. Each is an environment "
        "variable and an option of every command (the option overrides the variable); keys and tokens "
        "are never printed.",
        NULL, 0, 0, NULL, 0};
    cli_parse(&cmd, set, argc, argv, NULL, NULL);
    settings_print(set, stdout);
    return 0;
}
