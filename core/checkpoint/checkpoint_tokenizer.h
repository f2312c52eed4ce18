// Which tokenizer a checkpoint's text goes through (ptdp-generate, ptdp_tokenizer_create_from_checkpoint):
// the tokenizer flags ptdp-train recorded in its metadata, else the Hugging Face tokenizer files
// that ptdp-convert --from-hf keeps beside the checkpoint.
#pragma once

#include <string>

#include "core/data/tokenizer.h"

namespace ptdp {

/// The tokenizer of the checkpoint in `directory`: the --tokenizer-type (and --vocab-file,
/// --merge-file, --tokenizer-model, the NullTokenizer's --vocab-size) its metadata.json
/// recorded; without one, tokenizer.json, else tokenizer.model, else vocab.json + merges.txt in
/// the directory; without those, the byte-level tokenizer when the run trained on --text-file.
/// Throws Error(InvalidArgument) when nothing says how text becomes ids, Io naming the file for
/// an unknown recorded type, metadata that cannot be read, or a tokenizer path that is not a
/// regular file.
TokenizerConfig checkpoint_tokenizer(const std::string& directory);

}  // namespace ptdp
