// SentencePieceTokenizer: libsentencepiece with Megatron's special tokens around it (see
// sentencepiece_tokenizer.h).
#include "core/data/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "io/file_read.h"

namespace ptdp {

namespace {

// libsentencepiece reports most faults as a Status, but some of its parts throw (the Darts trie
// builder throws Darts::Details::Exception on a model with a zero-length piece): every call
// into it goes through here, so what it throws becomes a ptdp::Error instead of escaping.
template <typename F>
sentencepiece::util::Status sp_call(F&& call, ErrorCode code, const std::string& what) {
  try {
    return call();
  } catch (const std::exception& e) {
    throw_error(code, str_cat(what, ": ", e.what()));
  } catch (...) {
    throw_error(code, str_cat(what, ": libsentencepiece threw an unknown exception"));
  }
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& path) {
    // SentencePiece opens the path itself: refuse what is no regular file first, and load
    // from the bytes read here so the file read is the one checked.
    const std::string bytes = read_regular_file(path, "SentencePiece model file", kMaxTokenizerFileBytes);
    const sentencepiece::util::Status st = sp_call([&] { return sp_.LoadFromSerializedProto(bytes); }, ErrorCode::Io,
                                                   path + ": SentencePiece cannot load it");
    if (!st.ok()) throw_io_error(path, str_cat("SentencePiece cannot load it: ", st.ToString()));
    const int n = sp_.GetPieceSize();
    pieces_.reserve(static_cast<std::size_t>(n) + 8);
    for (int i = 0; i < n; ++i) {
      pieces_.push_back(sp_.IdToPiece(i));
      vocab_.emplace(pieces_.back(), i);
    }
    // Megatron's _SentencePieceTokenizer._initalize: each special token is the model's piece when
    // it has one, else a new id after the others; the model's pad, bos and eos pieces are special
    // too, with "<PAD>", "<BOS>", "<EOS>" standing in for the ones it lacks.
    const auto piece_or = [&](int id, const char* stand_in) {
      return id >= 0 && id < n ? pieces_[static_cast<std::size_t>(id)] : std::string(stand_in);
    };
    add_special("<CLS>");
    add_special("<SEP>");
    eod_ = add_special("<EOD>");
    add_special("<MASK>");
    add_special(piece_or(sp_.pad_id(), "<PAD>"));
    bos_ = add_special(piece_or(sp_.bos_id(), "<BOS>"));
    add_special(piece_or(sp_.eos_id(), "<EOS>"));
  }

  TokenizerType type() const override { return TokenizerType::SentencePiece; }

  // Megatron's tokenize: the earliest special token (the first in insertion order on a tie)
  // cuts the text; SentencePiece encodes what lies between.
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    std::size_t idx = 0;
    while (true) {
      std::size_t best = std::string_view::npos;
      const Special* next = nullptr;
      for (const Special& s : specials_) {
        const std::size_t at = text.find(s.text, idx);
        if (at != std::string_view::npos && (best == std::string_view::npos || at < best)) {
          best = at;
          next = &s;
        }
      }
      if (next == nullptr) break;
      encode_plain(text.substr(idx, best - idx), ids);
      ids.push_back(next->id);
      idx = best + next->text.size();
    }
    encode_plain(text.substr(idx), ids);
    return ids;
  }

  // Megatron's detokenize: SentencePiece's decode of each run of ordinary ids followed by " ",
  // then the special token's text and " ".
  std::string decode(const int32_t* ids, std::size_t count) const override {
    PTDP_CHECK_ARG(ids != nullptr || count == 0, "ids is NULL");
    for (std::size_t i = 0; i < count; ++i) {
      PTDP_CHECK_ARG(ids[i] >= 0 && ids[i] < static_cast<int64_t>(pieces_.size()),
                     str_cat("id ", ids[i], " at position ", i, " is not in the vocabulary [0, ", pieces_.size(), ")"));
    }
    std::string text;
    std::size_t last = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const auto it = special_of_id_.find(ids[i]);
      if (it == special_of_id_.end()) continue;
      text += decode_plain(ids + last, i - last) + " ";
      text += it->second + " ";
      last = i + 1;
    }
    text += decode_plain(ids + last, count - last);
    return text;
  }

  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  int32_t eod() const override { return eod_; }
  int32_t bos() const override { return bos_; }
  int32_t token_to_id(std::string_view token) const override {
    const auto it = vocab_.find(std::string(token));
    return it == vocab_.end() ? -1 : it->second;
  }
  std::string id_to_token(int32_t id) const override {
    PTDP_CHECK_ARG(id >= 0 && id < static_cast<int64_t>(pieces_.size()),
                   str_cat("id ", id, " is not in the vocabulary [0, ", pieces_.size(), ")"));
    return pieces_[static_cast<std::size_t>(id)];
  }

 private:
  struct Special {
    std::string text;
    int32_t id;
  };

  int32_t add_special(const std::string& text) {
    auto it = vocab_.find(text);
    if (it == vocab_.end()) {
      const auto id = static_cast<int32_t>(pieces_.size());
      pieces_.push_back(text);
      it = vocab_.emplace(text, id).first;
    }
    // A dict keeps the first insertion's place when a key comes again.
    bool seen = false;
    for (const Special& s : specials_) seen = seen || s.text == text;
    if (!seen) specials_.push_back({text, it->second});
    special_of_id_[it->second] = text;
    return it->second;
  }

  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    std::vector<int> out;
    const sentencepiece::util::Status st =
        sp_call([&] { return sp_.Encode(text, &out); }, ErrorCode::Internal, "SentencePiece encode");
    if (!st.ok()) throw_error(ErrorCode::Internal, str_cat("SentencePiece encode: ", st.ToString()));
    ids.insert(ids.end(), out.begin(), out.end());
  }

  std::string decode_plain(const int32_t* ids, std::size_t count) const {
    if (count == 0) return std::string();
    const std::vector<int> v(ids, ids + count);
    std::string out;
    const sentencepiece::util::Status st = sp_call([&] { return sp_.Decode(v, &out); }, ErrorCode::InvalidArgument,
                                                   "SentencePiece cannot decode the ids");
    PTDP_CHECK_ARG(st.ok(), str_cat("SentencePiece cannot decode the ids: ", st.ToString()));
    return out;
  }

  sentencepiece::SentencePieceProcessor sp_;
  std::vector<std::string> pieces_;  // id -> piece, Megatron's additions last
  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<Special> specials_;    // in Megatron's insertion order
  std::unordered_map<int32_t, std::string> special_of_id_;
  int32_t eod_ = -1, bos_ = -1;
};

}  // namespace

std::unique_ptr<Tokenizer> make_sentencepiece_tokenizer(const std::string& path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace ptdp
