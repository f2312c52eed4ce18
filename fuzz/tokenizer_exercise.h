// What the tokenizer targets do with a tokenizer that was read: encode the input's text,
// decode the ids back, and look up a few ids and tokens.
#pragma once

#include <string_view>
#include <vector>

#include "core/data/tokenizer.h"
#include "fuzz/fuzz_support.h"

namespace ptdp::fuzz {

inline void exercise_tokenizer(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> ids;
  refused_cleanly_or_ok([&] { ids = tok.encode(text.substr(0, 4096)); });
  refused_cleanly_or_ok([&] { (void)tok.decode(ids); });
  const int64_t n = tok.vocab_size();
  for (int32_t id : {0, 1, static_cast<int32_t>(n / 2), static_cast<int32_t>(n - 1), static_cast<int32_t>(n),
                     tok.eod(), tok.bos(), -1}) {
    refused_cleanly_or_ok([&] {
      const std::string t = tok.id_to_token(id);
      (void)tok.token_to_id(t);
    });
    refused_cleanly_or_ok([&] { (void)tok.decode(&id, 1); });
  }
}

}  // namespace ptdp::fuzz
