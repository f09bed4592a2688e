/* The settings table (src/cli/settings.c): defaults, strict parsing of every kind, one message
 * naming the variable and the value for every bad value, and the environment read once. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cli/settings.h"
#include "util/err.h"

static const Setting *row(const char *name) {
    const Setting *r = settings_find(name);
    CHECK_MSG(r != NULL, "%s is not in the table", name);
    return r;
}

/* value must be refused, with a message that starts with "NAME: " and (quoted) quotes the value. */
static void refused_as(const char *name, const char *value, int quoted) {
    Settings s;
    settings_defaults(&s);
    const Setting *r = row(name);
    if (!r) return;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "%s: ", name);
    int rc = settings_set(&s, r, value, name);
    CHECK_MSG(rc == -1 && !strncmp(df_errmsg(), prefix, strlen(prefix)) && (!quoted || strstr(df_errmsg(), value)),
              "%s='%s': rc %d, '%s'", name, value, rc, df_errmsg());
}

static void refused(const char *name, const char *value) { refused_as(name, value, 1); }

static Settings with(const char *name, const char *value) {
    Settings s;
    settings_defaults(&s);
    const Setting *r = row(name);
    if (r) CHECK_MSG(settings_set(&s, r, value, name) == 0, "%s='%s': %s", name, value, df_errmsg());
    return s;
}

static void the_defaults_are_the_documented_ones(void) {
    Settings s;
    settings_defaults(&s);
    const EngineOptions *e = &s.engine;
    CHECK(s.root == NULL && !strcmp(s.tmpdir, "/tmp") && !s.api_key && !s.effort && !s.cache_home && !s.state_home);
    CHECK(e->threads == 0 && e->context == 0 && e->top_k == 0 && e->spec == 1 && e->profile == 0 && e->offline == 0);
    CHECK(e->mla_cache == MLA_CACHE_LATENT && e->a_log == ALOG_PER_HEAD && e->spine == SPINE_AUTO && e->device == DEV_AUTO);
    CHECK(!strcmp(e->kernels, "auto") && e->trace == NULL && e->replay == NULL && e->replay_lookahead == -1);
    CHECK(e->store.kind == STORE_AUTO && e->store.ram_bytes == 0 && e->store.pin_layers == -1 &&
          e->store.policy == POLICY_CRF && e->store.io_threads == 8 && e->store.prefetch == 1 && e->store.lookahead == 1 &&
          e->store.populate == 1 && e->store.direct == 1 && e->store.io == IO_THREADS);
    CHECK(!strcmp(e->fetch.host, "huggingface.co") && !strcmp(e->fetch.path, "moonshotai/Kimi-K3") &&
          !strcmp(e->fetch.revision, "main") && !e->fetch.token);
    CHECK(e->fetch.connect_timeout_s == 20 && e->fetch.stall_timeout_s == 60 && e->fetch.retries == 6 &&
          e->fetch.backoff_ms == 1000 && e->fetch.parallel == 8 && e->fetch.chunk_kb == 65536 && e->fetch.disk_free_bytes == -1);
    CHECK(s.server_max_tokens == -1 && s.memo_entries == 32 && s.prompt_snapshot == 1);
}

static void every_row_is_complete_and_unique(void) {
    size_t n;
    const Setting *t = settings_table(&n);
    CHECK(n >= 39);
    for (size_t i = 0; i < n; i++) {
        CHECK_MSG(t[i].help && *t[i].help && (t[i].def || t[i].def_text), "%s", t[i].name);
        CHECK_MSG(settings_find(t[i].name) == &t[i], "%s twice", t[i].name);
        if (t[i].kind == SET_INT || t[i].kind == SET_INT64 || t[i].kind == SET_CHOICE || t[i].kind == SET_GB)
            CHECK_MSG(t[i].what != NULL, "%s", t[i].name);
    }
    CHECK(settings_find("K3_NOT_A_SETTING") == NULL);
}

/* K3_THREADS: whole numbers 1..1024 only; the default (unset or empty) means all cores. */
static void thread_counts_are_strict(void) {
    CHECK(with("K3_THREADS", "3").engine.threads == 3 && with("K3_THREADS", "1").engine.threads == 1);
    CHECK(with("K3_THREADS", "").engine.threads == 0);
    const char *bad[] = {"0", "-2", "abc", "4x", " ", "1.5", "99999999999", "2000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) refused("K3_THREADS", bad[i]);
    CHECK(strstr(df_errmsg(), "K3_THREADS: '2000' is not a thread count in 1..1024"));
}

static void every_kind_parses_and_refuses(void) {
    CHECK(with("K3_RAM_GB", "12.5").engine.store.ram_bytes == 12500000000ull);
    refused("K3_RAM_GB", "lots"), refused("K3_RAM_GB", "0"), refused("K3_RAM_GB", "nan"), refused("K3_RAM_GB", "1e9");
    CHECK(with("K3_STORE", "stream").engine.store.kind == STORE_STREAM);
    refused("K3_STORE", "disk");
    CHECK(strstr(df_errmsg(), "K3_STORE: 'disk' is not auto, mapped or stream"));
    CHECK(with("K3_CACHE_POLICY", "lru").engine.store.policy == POLICY_LRU);
    refused("K3_CACHE_POLICY", "fifo");
    CHECK(with("K3_SPEC", "0").engine.spec == 0);
    refused("K3_SPEC", "yes"), refused("K3_SPEC", "2");
    CHECK(strstr(df_errmsg(), "K3_SPEC: '2' is not 0 or 1"));
    CHECK(with("K3_PROMPT_SNAPSHOT", "0").prompt_snapshot == 0);
    refused("K3_PROMPT_SNAPSHOT", "yes");
    CHECK(with("K3_PIN_LAYERS", "0").engine.store.pin_layers == 0);
    refused("K3_PIN_LAYERS", "-1");
    CHECK(with("K3_SERVER_MAX_TOKENS", "16777216").server_max_tokens == 16777216);
    refused("K3_SERVER_MAX_TOKENS", "0"), refused("K3_SERVER_MAX_TOKENS", "16777217");
    CHECK(with("K3_DISK_FREE_BYTES", "0").engine.fetch.disk_free_bytes == 0);
    CHECK(with("K3_DISK_FREE_BYTES", "9000000000000").engine.fetch.disk_free_bytes == 9000000000000ll);
    refused("K3_DISK_FREE_BYTES", "-1"), refused("K3_DISK_FREE_BYTES", "lots");
    refused("K3_RESPONSE_MEMO_ENTRIES", "4097"), refused("K3_IO_THREADS", "0"), refused("K3_FETCH_PARALLEL", "0");
    refused("K3_CONTEXT", "0"), refused("K3_MOE_TOP_K", "0"), refused("K3_MOE_TOP_K", "2x");
    CHECK(with("K3_MLA_CACHE", "expanded").engine.mla_cache == MLA_CACHE_EXPANDED);
    refused("K3_MLA_CACHE", "compact");
    CHECK(strstr(df_errmsg(), "K3_MLA_CACHE: 'compact' is not latent or expanded"));
    CHECK(with("K3_DEV", "cpu").engine.device == DEV_CPU);
    refused("K3_DEV", "gpu");
    CHECK(with("K3_A_LOG", "per-channel").engine.a_log == ALOG_PER_CHANNEL);
    CHECK(with("K3_SPINE", "int8").engine.spine == SPINE_INT8);
    refused("K3_SPINE", "int4");
    CHECK(!strcmp(with("K3_KERNELS", "portable").engine.kernels, "portable"));
    refused("K3_KERNELS", "sse9");
    CHECK(!strcmp(with("K3_REASONING_EFFORT", "low").effort, "low"));
    refused("K3_REASONING_EFFORT", "medium");
}

/* Text settings: K3_TRACE's 0 and 1, and the source's host, path, revision and token checks. */
static void text_settings_are_checked(void) {
    CHECK(with("K3_TRACE", "0").engine.trace == NULL);
    CHECK(!strcmp(with("K3_TRACE", "1").engine.trace, "router_trace.jsonl"));
    CHECK(!strcmp(with("K3_TRACE", "/tmp/t.jsonl").engine.trace, "/tmp/t.jsonl"));
    CHECK(!strcmp(with("K3_HF_HOST", "http://127.0.0.1:9").engine.fetch.host, "http://127.0.0.1:9"));
    refused_as("K3_HF_HOST", "http://example.com", 0), refused("K3_HF_HOST", "user@host");
    refused("K3_HF_PATH", "a/../b"), refused("K3_HF_REVISION", "a/b");
    refused_as("HF_TOKEN", "a b", 0); /* a token is never repeated in a message */
    CHECK(!strstr(df_errmsg(), "a b"));
    CHECK(!strcmp(with("DELTAFIN_API_KEY", "k").api_key, "k"));
}

/* A flag (any origin) is validated the same way and named in the message. */
static void the_origin_is_named(void) {
    Settings s;
    settings_defaults(&s);
    CHECK(settings_set(&s, row("K3_THREADS"), "many", "--threads") == -1 && !strncmp(df_errmsg(), "--threads: 'many'", 17));
    CHECK(settings_set(&s, row("K3_THREADS"), "4", "--threads") == 0 && s.engine.threads == 4);
    CHECK(settings_set(&s, row("K3_THREADS"), "", "--threads") == 0 && s.engine.threads == 0);
    CHECK(settings_origin(&s, row("K3_THREADS")) == NULL); /* back to the default */
    CHECK(settings_set(&s, row("K3_CONTEXT"), "512", "-c") == 0 && !strcmp(settings_origin(&s, row("K3_CONTEXT")), "-c"));
}

/* Every setting with a flag is found by it (and by its older spelling); flags are unique. */
static void every_flag_is_found(void) {
    size_t n;
    const Setting *t = settings_table(&n);
    for (size_t i = 0; i < n; i++) {
        if (!t[i].flag) continue;
        CHECK_MSG(settings_find_flag(t[i].flag) == &t[i], "--%s", t[i].flag);
        if (t[i].alias) CHECK_MSG(settings_find_flag(t[i].alias) == &t[i], "--%s", t[i].alias);
    }
    CHECK(settings_find_flag("threads") == row("K3_THREADS") && settings_find_flag("ctx-size") == row("K3_CONTEXT"));
    CHECK(settings_find_flag("model") == row("DELTAFIN_ROOT") && settings_find_flag("root") == row("DELTAFIN_ROOT"));
    CHECK(settings_find_flag("no-such-flag") == NULL);
}

/* The default install: XDG_CACHE_HOME/deltafin, else HOME/.cache/deltafin; the history likewise. */
static void default_places_follow_xdg(void) {
    Settings s;
    char buf[256];
    settings_defaults(&s);
    s.home = "/home/u";
    CHECK(settings_default_root(&s, buf, sizeof buf) == 0 && !strcmp(buf, "/home/u/.cache/deltafin"));
    CHECK(settings_history_file(&s, buf, sizeof buf) == 0 && !strcmp(buf, "/home/u/.local/state/deltafin/chat_history"));
    CHECK(settings_set(&s, row("XDG_CACHE_HOME"), "/var/cache/x", "XDG_CACHE_HOME") == 0);
    CHECK(settings_default_root(&s, buf, sizeof buf) == 0 && !strcmp(buf, "/var/cache/x/deltafin"));
    refused_as("XDG_CACHE_HOME", "relative/dir", 1);
    s.home = NULL;
    s.cache_home = NULL;
    CHECK(settings_default_root(&s, buf, sizeof buf) == -1 && strstr(df_errmsg(), "HOME"));
}

static void the_environment_is_read_once(void) {
    setenv("K3_IO_THREADS", "3", 1);
    setenv("K3_STORE", "", 1); /* empty: the default */
    setenv("DELTAFIN_ROOT", "/srv/k3", 1);
    Settings s;
    CHECK(settings_from_env(&s) == 0 && s.engine.store.io_threads == 3 && s.engine.store.kind == STORE_AUTO);
    CHECK(!strcmp(s.root, "/srv/k3") && !strcmp(settings_origin(&s, row("DELTAFIN_ROOT")), "DELTAFIN_ROOT"));
    setenv("K3_POPULATE", "maybe", 1);
    CHECK(settings_from_env(&s) == -1 && strstr(df_errmsg(), "K3_POPULATE: 'maybe' is not 0 or 1"));
    unsetenv("K3_IO_THREADS"), unsetenv("K3_STORE"), unsetenv("DELTAFIN_ROOT"), unsetenv("K3_POPULATE");
}

int main(void) {
    RUN(the_defaults_are_the_documented_ones);
    RUN(every_row_is_complete_and_unique);
    RUN(thread_counts_are_strict);
    RUN(every_kind_parses_and_refuses);
    RUN(text_settings_are_checked);
    RUN(the_origin_is_named);
    RUN(every_flag_is_found);
    RUN(default_places_follow_xdg);
    RUN(the_environment_is_read_once);
    return check_summary();
}
