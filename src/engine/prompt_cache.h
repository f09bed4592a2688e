/* prompt_cache.h - decode States of finished prompts kept on disk, so that a prompt starting with
 * one of them (a returning conversation, a restarted server, a second client with the same system
 * prompt and tools) is read from the file instead of prefilled again.
 *
 * An entry is one state file (statefile.h, kind "prompt"): the tokens of a whole prompt and the
 * State right after it. Its name is the SHA-256 of its tokens ("<hex>.dfstate"), so one prompt
 * is kept once. A prompt finds the longest entry whose tokens are a strict prefix of it (at least
 * one token is left to feed, which gives the logits of the first pick); a State cannot be cut
 * back (KDA's recurrent state), so only whole entries match.
 *
 * The folder is the cache's alone (created 0700: entries hold conversations). At open it is read
 * once: every entry's header and tokens (its State stays on disk). Entries written under another
 * identity (another model, other numerics settings: statefile.h) are stale: never used, reported
 * at open, and the first to go when room is needed. The bound (bytes of all entries in the folder)
 * is kept by removing the least recently used (file modification times: a hit touches its entry).
 * Files that are not state files are never touched.
 *
 * Every entry is checked as it loads (header against this engine and the index, values finite, the
 * SHA-256 at the end); a damaged one is refused with a log line, removed, and the prompt is
 * prefilled as if it had not been there. Writes are atomic (statefile.h): a kill at any moment
 * leaves the entries as they were, plus at most a temporary file the next open removes.
 *
 * Threads: one thread (the scheduler's model thread) calls lookup and store; pcache_counts may be
 * called from any thread. Log lines go to the caller's function (the server's log). */
#ifndef DF_PROMPT_CACHE_H
#define DF_PROMPT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/session.h"

typedef struct PromptCache PromptCache;

typedef struct {
    const char *dir;        /* the folder (created when missing) */
    uint64_t max_bytes;     /* the most bytes all entries may take */
    int min_tokens;         /* prompts shorter than this are not kept (their prefill is cheap) */
    void (*log)(void *ctx, const char *line); /* one line per event worth a log line, or NULL */
    void *log_ctx;
} PromptCacheOptions;

typedef struct {
    int entries, stale;     /* usable entries, and entries of another identity */
    uint64_t bytes;         /* of all entries */
    uint64_t hits, misses;  /* lookups that restored an entry, and that found none */
    uint64_t tokens_restored; /* prompt tokens read from entries instead of prefilled */
    uint64_t stores, refused; /* entries written, and entries refused (damaged, foreign, unreadable) */
} PromptCacheCounts;

/* Opens (creating it) the cache folder for engine e. Returns NULL with a message when the folder
 * cannot be created or read, or the engine's identity cannot be computed. */
PromptCache *pcache_open(Engine *e, const PromptCacheOptions *o);
void pcache_close(PromptCache *c);

/* Before a prompt's prefill: when an entry holds a strict prefix of prompt[0..n) longer than
 * `have` (what s, or its snapshot, already holds), restores it into s and returns its token
 * count; otherwise returns 0 and leaves s alone. An entry that fails to load is refused (logged,
 * removed when damaged), s is reset, and the next-best entry is tried. */
size_t pcache_restore(PromptCache *c, Session *s, const int32_t *prompt, size_t n, size_t have);

/* After a prompt: keeps st (settled, holding exactly tokens[0..n)) unless n < min_tokens or an
 * entry for these tokens exists; removes least recently used entries to make room. A failure is
 * logged, never returned: the cache only ever costs a prefill. */
void pcache_store(PromptCache *c, const State *st, const int32_t *tokens, size_t n);

void pcache_counts(PromptCache *c, PromptCacheCounts *out);

#endif
