/* fuzz_chatsave - libFuzzer target for chat save files (/load, chat --load: src/cli/chat_save.c).
 *
 * A save file ends with the SHA-256 of everything before it, which is a checksum, not a MAC: a
 * crafted file passes it. So the harness plays the crafter: the input is a file without its
 * trailing sum, its model fingerprint (header bytes 12..75) is set to the fuzzing model's, and
 * the sum is appended; everything after the fingerprint check then meets hostile values. The
 * model is a tiny synth checkpoint made once per process. What must hold for every input: a
 * refusal leaves a one-line message; a file that loads gives a conversation within bounds that
 * saves and loads again to the same messages. Seeds (tests/fuzz/corpus/chatsave) are files
 * /save wrote on this model, without their sum.
 *
 * Built by `make fuzz` (build-fuzz/fuzz/fuzz_chatsave); `tests/fuzz/run.sh 60 chatsave` runs it
 * for a minute (docs/FUZZING.md). */
#include <ftw.h>
#include <openssl/evp.h>

#include "cli/chat.h"
#include "fuzz.h"
#include "synth/synth.h"

#define HEADER_BYTES 160
#define MODEL_AT 12

static Chat chat;
static int max_context; /* the engine's */
static char dir[512], saved[600];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void cleanup(void) {
    session_free(&chat.s);
    tok_free(chat.tok);
    json_decref(chat.msgs);
    engine_close(chat.e);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/deltafin-fuzz-chat-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) return perror("mkdtemp"), exit(2), 0;
    snprintf(saved, sizeof saved, "%s/saved.chat", dir);
    char model[600];
    snprintf(model, sizeof model, "%s/model", dir);
    SynthPreset p;
    SynthOptions so = {0};
    EngineOptions o;
    memset(&o, 0, sizeof o);
    o.threads = 1, o.store.kind = STORE_MAPPED, o.device = DEV_CPU, o.replay_lookahead = -1;
    if (synth_preset(&p, "tiny", &so) || synth_write(&p, 3, model, 0) || !(chat.e = engine_open(model, &o)) ||
        !(chat.tok = engine_tokenizer(chat.e))) {
        fprintf(stderr, "fuzz_chatsave: %s\n", df_errmsg());
        exit(2);
    }
    session_init(&chat.s, chat.e);
    EngineInfo info;
    engine_info(chat.e, &info);
    max_context = info.max_context;
    chat.xo = (XtmlOptions)XTML_OPTIONS_DEFAULT;
    chat.msgs = json_array();
    atexit(cleanup);
    FILE *f = fmemopen((void *)"", 1, "rb"); /* computes the model's fingerprint (and fails: too short) */
    FUZZ_ASSERT(f && chat_load_stream(&chat, f, 1, "init") == -1 && chat.model_id[0]);
    fclose(f);
    return 0;
}

/* Back to an empty conversation, as a fresh chat holds one. */
static void forget(void) {
    json_array_clear(chat.msgs);
    session_reset(&chat.s);
    chat.tail.n = chat.unanswered.n = 0;
    chat.turn = 0;
    free(chat.system_copy);
    chat.system = chat.system_copy = NULL;
}

/* A loaded conversation saves and loads again unchanged. */
static void round_trip(void) {
    json_t *before = json_deep_copy(chat.msgs);
    size_t held = chat.s.held.n;
    int turn = chat.turn;
    FUZZ_ASSERT(chat_save(&chat, saved) == 0);
    forget();
    FUZZ_ASSERT(chat_load(&chat, saved) == 0);
    FUZZ_ASSERT(json_equal(before, chat.msgs) && chat.s.held.n == held && chat.turn == turn);
    json_decref(before);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    unsigned char *file = malloc(size + 32);
    unsigned int sum_len = 32;
    if (size) memcpy(file, data, size);
    if (size >= MODEL_AT + 64) memcpy(file + MODEL_AT, chat.model_id, 64);
    if (!EVP_Digest(file, size, file + size, &sum_len, EVP_sha256(), NULL)) abort();
    FILE *f = fmemopen(file, size + 32, "rb");
    FUZZ_ASSERT(f);
    int rc = chat_load_stream(&chat, f, size + 32, "input");
    fclose(f);
    if (rc) fuzz_check_message();
    else {
        FUZZ_ASSERT(chat.turn >= 0 && chat.turn <= (1 << 24) && chat.s.held.n <= (size_t)max_context);
        round_trip();
    }
    forget();
    free(file);
    df_errclear();
    return 0;
}
