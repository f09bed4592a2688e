/* statefile.h - a sequence's State and the tokens it holds, as one file: what chat's /save writes
 * (with the conversation as the caller's payload) and what the prompt cache keeps (prompt_cache.h).
 * Loading one replaces reading those tokens again.
 *
 * Layout (integers little-endian):
 *   the header (STATEFILE_HEADER_BYTES): magic "DFSTATE\n", format version, kind (chat or
 *     prompt), the identity it was written under (StateIdentity: the model's fingerprint and every
 *     setting that changes the numbers), the token count, the picked-but-unfed token, and the
 *     byte counts of the payload and of the State; the rest zero;
 *   the payload (the caller's bytes; chat: its conversation as JSON);
 *   the tokens the State holds (int32 each);
 *   the settled State (state_save, model.h);
 *   the SHA-256 of everything before it (64 lowercase hex digits).
 *
 * A file is believed only as far as it is checked: the header against this engine's identity and
 * context and against the file's size before anything else is read; the State's values finite
 * (state_load); the sum at the end, or (verify) before anything is read at all. A file of another
 * model or of other numerics settings is refused with a message that says which.
 *
 * Writing goes to a temporary file beside the target (created exclusively, mode 0600: a State and
 * its tokens are the conversation) renamed over it once complete and flushed, so a reader never
 * sees a partial file and an interrupted write leaves the target as it was. An existing target is
 * replaced only when it is itself a state file. */
#ifndef DF_STATEFILE_H
#define DF_STATEFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/engine.h"
#include "engine/session.h"
#include "fetch/digest.h"
#include "text/tokids.h"

#define STATEFILE_HEADER_BYTES 256

typedef enum { STATEFILE_CHAT = 1, STATEFILE_PROMPT = 2 } StateFileKind;

/* What makes a saved State valid here: the weights (a fingerprint of config.json, SHA256SUMS when
 * present, and samples of every tensor outside the routed experts) and each setting that changes
 * a State's numbers (the MLA cache layout, A_log's indexing, the spine's format, experts per token,
 * the vocabulary, the device and its pass). */
typedef struct {
    char model_id[65];                    /* 64 hex digits */
    uint32_t mla_cache, a_log, spine_int8, top_k, top_k_full, vocab;
    char device[64];                      /* "cpu", or the pass, the tensor cores and the device's
                                           * description: "layers tensor-cores cuda (NVIDIA H200, ...)" */
} StateIdentity;

/* This engine's identity. The fingerprint reads samples of the spine's tensors (a few MB at K3's
 * size), once: the Engine keeps it. Returns 0, or -1 with a message (a file could not be read). */
int state_identity(Engine *e, StateIdentity *id);
/* How two identities differ, as a phrase ("another model", "DELTAFIN_MLA_CACHE=expanded, this
 * session uses latent", ...), or NULL when they agree. Written into buf (len bytes). */
const char *state_identity_diff(const StateIdentity *file, const StateIdentity *mine, char *buf, size_t len);

typedef struct {
    StateFileKind kind;
    const int32_t *tokens;   /* what st holds */
    size_t n;
    int pending;             /* a token picked and not fed, or -1 */
    const void *payload;     /* the caller's bytes, or NULL */
    size_t payload_bytes;
    const State *st;         /* settled (session_settle): exactly tokens[0..n) */
    const Model *m;          /* st's model */
} StateFileContent;

/* Writes c to path as described above. Returns 0, or -1 with a message (nothing at path changed). */
int statefile_write(const char *path, const StateIdentity *id, const StateFileContent *c);

typedef struct {
    FILE *f;
    const char *path;        /* borrowed */
    uint64_t size;
    Sha256 sha;              /* of everything read so far */
    StateFileKind kind;
    uint32_t n_tokens;
    int32_t pending;
    uint64_t payload_bytes, state_bytes;
    StateIdentity id;        /* as the file says */
} StateFileReader;

/* statefile_open's answer for a readable file written under another identity (another model or
 * other numerics settings) or in another format version: not damaged, but not for this engine. */
#define STATEFILE_OTHER 1

/* Opens path (a regular file: a FIFO is refused at once, never waited on) and checks its header
 * against kind, id, the context limit max_tokens and the file's size; with verify, also its sum
 * (the whole file read once first). Returns 0, STATEFILE_OTHER with a message naming what differs,
 * or -1 with a message (not a state file, damaged, unreadable); the reader is closed on failure. */
int statefile_open(StateFileReader *r, const char *path, StateFileKind kind, const StateIdentity *id, const Model *m,
                   int max_tokens, int verify);
/* The payload, at most max bytes, into a new NUL-terminated buffer (*n its length). */
int statefile_payload(StateFileReader *r, char **out, size_t *n, size_t max);
/* The tokens (each checked against the vocabulary), after the payload. */
int statefile_tokens(StateFileReader *r, TokIds *t);
/* The State into s with tokens t (session_restore), then the file's sum. Returns 0, or -1 with a
 * message: s is then reset (a damaged State is never kept). */
int statefile_restore(StateFileReader *r, Session *s, const TokIds *t);
void statefile_close(StateFileReader *r);

#endif
