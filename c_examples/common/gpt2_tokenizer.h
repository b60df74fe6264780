/*
 * gpt2_tokenizer.h: where `make tokenizer-data` installs GPT-2's vocabulary
 * (relative to the repository root), for the programs that open it with
 * ag_tokenizer_open: build/tokenize and train_full's sampler.
 */
#ifndef GPT2_TOKENIZER_H
#define GPT2_TOKENIZER_H

#define GPT2_TOKENIZER_DIR "data/gpt2"
#define GPT2_VOCAB_JSON "encoder.json" /* token text -> id */
#define GPT2_MERGES "vocab.bpe"        /* merges in rank order */

#endif /* GPT2_TOKENIZER_H */
