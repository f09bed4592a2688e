/* synth_corpus.h - the built-in training text for the synthetic vocabulary: original English
 * prose, source code in several languages and prose in other scripts (Latin, Cyrillic, Greek,
 * Han, kana, Hangul, Arabic, Devanagari, Thai). Fixed: changing it changes every synthetic
 * vocabulary, and with it token ids in golden tests. */
#ifndef DF_SYNTH_CORPUS_H
#define DF_SYNTH_CORPUS_H

extern const char *const SYNTH_CORPUS[];
extern const int SYNTH_CORPUS_DOCS;
/* Documents [0, CODE_FIRST) are English, [CODE_FIRST, OTHER_FIRST) code, the rest other languages. */
extern const int SYNTH_CORPUS_CODE_FIRST, SYNTH_CORPUS_OTHER_FIRST;

#endif
