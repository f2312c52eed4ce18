// Tokenizers through the C API: Megatron's tokenizer types (core/data/tokenizer.h).
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "capi/src/handles.h"
#include "core/checkpoint/checkpoint_tokenizer.h"
#include "core/data/tokenizer.h"

struct ptdp_tokenizer_impl {
  static constexpr const char* kType = "ptdp_tokenizer";
  ptdp::capi::Registration<ptdp_tokenizer_impl> registration{this};  // live while it exists
  std::unique_ptr<ptdp::Tokenizer> tokenizer;
};

namespace {

using ptdp::str_cat;
using ptdp::capi::guard;
using ptdp::capi::live;
using ptdp::capi::require_non_null;

ptdp_tokenizer_options default_options() {
  ptdp_tokenizer_options o{};
  o.struct_size = sizeof o;
  o.type = PTDP_TOKENIZER_BYTE_LEVEL;
  return o;
}

std::string text_or_empty(const char* s) { return s ? std::string(s) : std::string(); }

ptdp_tokenizer wrap(std::unique_ptr<ptdp::Tokenizer> t) {
  auto h = std::make_unique<ptdp_tokenizer_impl>();
  h->tokenizer = std::move(t);
  return h.release();
}

}  // namespace

extern "C" {

PTDP_API ptdp_status ptdp_tokenizer_options_init(ptdp_tokenizer_options* options) {
  return guard(__func__, [&] {
    ptdp::capi::reset_options(options, "options");
    *options = default_options();
  });
}

PTDP_API ptdp_status ptdp_tokenizer_create(const ptdp_tokenizer_options* options, ptdp_tokenizer* out) {
  return guard(__func__, [&] {
    require_non_null(options, "options");
    require_non_null(out, "out");
    const ptdp_tokenizer_options o =
        ptdp::capi::read_options(options, default_options(), "options", "ptdp_tokenizer_options_init");
    const int type = static_cast<int>(o.type);
    PTDP_CHECK_ARG(type >= PTDP_TOKENIZER_BYTE_LEVEL && type <= PTDP_TOKENIZER_SENTENCE_PIECE,
                   str_cat("options->type = ", type, " is not a ptdp_tokenizer_type"));
    // The fields each type needs, named as the C caller knows them (the core names the flags).
    if (o.type == PTDP_TOKENIZER_GPT2_BPE) {
      PTDP_CHECK_ARG(o.vocab_file != nullptr && o.vocab_file[0] != '\0',
                     "options->vocab_file is NULL or empty: PTDP_TOKENIZER_GPT2_BPE needs --vocab-file (vocab.json)");
      PTDP_CHECK_ARG(o.merge_file != nullptr && o.merge_file[0] != '\0',
                     "options->merge_file is NULL or empty: PTDP_TOKENIZER_GPT2_BPE needs --merge-file (merges.txt)");
    }
    if (o.type == PTDP_TOKENIZER_NULL) {
      PTDP_CHECK_ARG(o.vocab_size > 0 && o.vocab_size < INT32_MAX,
                     str_cat("options->vocab_size = ", o.vocab_size, " is not in [1, 2^31 - 1) (--vocab-size; PTDP_TOKENIZER_NULL needs it)"));
    }
    ptdp::TokenizerConfig c;
    c.type = static_cast<ptdp::TokenizerType>(type);
    c.vocab_file = text_or_empty(o.vocab_file);
    c.merge_file = text_or_empty(o.merge_file);
    c.tokenizer_model = text_or_empty(o.tokenizer_model);
    c.vocab_size = o.vocab_size;
    *out = wrap(ptdp::make_tokenizer(c));
  });
}

PTDP_API ptdp_status ptdp_tokenizer_create_from_checkpoint(const char* directory, ptdp_tokenizer* out) {
  return guard(__func__, [&] {
    ptdp::capi::require_path(directory, "directory");
    require_non_null(out, "out");
    *out = wrap(ptdp::make_tokenizer(ptdp::checkpoint_tokenizer(directory)));
  });
}

PTDP_API ptdp_status ptdp_tokenizer_destroy(ptdp_tokenizer tokenizer) {
  return guard(__func__, [&] {
    if (tokenizer == nullptr) return;
    live(tokenizer, "tokenizer");
    ptdp::capi::release(tokenizer);
  });
}

PTDP_API ptdp_status ptdp_tokenizer_get_type(ptdp_tokenizer tokenizer, ptdp_tokenizer_type* type) {
  return guard(__func__, [&] {
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    require_non_null(type, "type");
    *type = static_cast<ptdp_tokenizer_type>(t.tokenizer->type());
  });
}

PTDP_API ptdp_status ptdp_tokenizer_encode(ptdp_tokenizer tokenizer, const char* text, size_t length, int32_t* ids,
                                           size_t capacity, size_t* count) {
  return guard(__func__, [&] {
    require_non_null(count, "count");
    *count = 0;  // documented: count is always written (0 on a bad argument)
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    PTDP_CHECK_ARG(text != nullptr || length == 0, str_cat("text is NULL but length = ", length));
    PTDP_CHECK_ARG(ids != nullptr || capacity == 0, str_cat("ids is NULL but capacity = ", capacity));
    const std::vector<int32_t> v = t.tokenizer->encode(length ? std::string_view(text, length) : std::string_view());
    *count = v.size();
    PTDP_CHECK_ARG(capacity >= v.size(), str_cat("capacity = ", capacity, " is smaller than the ", v.size(),
                                                 " ids of the text (*count receives the number)"));
    if (!v.empty()) std::memcpy(ids, v.data(), v.size() * sizeof(int32_t));
  });
}

PTDP_API ptdp_status ptdp_tokenizer_decode(ptdp_tokenizer tokenizer, const int32_t* ids, size_t count, char* buffer,
                                           size_t capacity, size_t* length) {
  return guard(__func__, [&] {
    require_non_null(length, "length");
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    PTDP_CHECK_ARG(ids != nullptr || count == 0, str_cat("ids is NULL but count = ", count));
    ptdp::capi::copy_text(t.tokenizer->decode(ids, count), buffer, capacity, length);
  });
}

PTDP_API ptdp_status ptdp_tokenizer_vocab_size(ptdp_tokenizer tokenizer, int64_t* size) {
  return guard(__func__, [&] {
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    require_non_null(size, "size");
    *size = t.tokenizer->vocab_size();
  });
}

PTDP_API ptdp_status ptdp_tokenizer_eod(ptdp_tokenizer tokenizer, int32_t* id) {
  return guard(__func__, [&] {
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    require_non_null(id, "id");
    *id = t.tokenizer->eod();
  });
}

PTDP_API ptdp_status ptdp_tokenizer_bos(ptdp_tokenizer tokenizer, int32_t* id) {
  return guard(__func__, [&] {
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    require_non_null(id, "id");
    *id = t.tokenizer->bos();
  });
}

PTDP_API ptdp_status ptdp_tokenizer_token_to_id(ptdp_tokenizer tokenizer, const char* token, size_t length,
                                                int32_t* id) {
  return guard(__func__, [&] {
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    require_non_null(id, "id");
    PTDP_CHECK_ARG(token != nullptr || length == 0, str_cat("token is NULL but length = ", length));
    *id = t.tokenizer->token_to_id(length ? std::string_view(token, length) : std::string_view());
  });
}

PTDP_API ptdp_status ptdp_tokenizer_id_to_token(ptdp_tokenizer tokenizer, int32_t id, char* buffer, size_t capacity,
                                                size_t* length) {
  return guard(__func__, [&] {
    require_non_null(length, "length");
    const ptdp_tokenizer_impl& t = live(tokenizer, "tokenizer");
    ptdp::capi::copy_text(t.tokenizer->id_to_token(id), buffer, capacity, length);
  });
}

}  // extern "C"
