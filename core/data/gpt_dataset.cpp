#include "core/data/gpt_dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "base/error.h"
#include "core/layers/cross_entropy.h"
#include "io/file_read.h"

namespace ptdp {

namespace {

std::string num(int64_t v) { return std::to_string(v); }

// The message for a token outside the vocabulary; built piecewise (GCC 12's -Wrestrict).
[[noreturn]] void token_error(const std::string& where, int64_t document, int64_t position, int64_t token,
                              int32_t vocab_size) {
  std::string m = where;
  m += ": document ";
  m += num(document);
  m += " position ";
  m += num(position);
  m += ": token id ";
  m += num(token);
  m += " is >= vocab_size ";
  m += num(vocab_size);
  throw_error(ErrorCode::InvalidArgument, m);
}

void check_range(const TokenSource& src, int64_t d, int64_t offset, int64_t count) {
  PTDP_CHECK_ARG(d >= 0 && d < src.num_documents(),
                 src.describe() + ": document " + num(d) + " is out of range [0, " + num(src.num_documents()) + ")");
  const int64_t length = src.document_length(d);
  PTDP_CHECK_ARG(offset >= 0 && count >= 0 && offset <= length && count <= length - offset,
                 src.describe() + ": tokens [" + num(offset) + ", " + num(offset + count) + ") are outside document " +
                     num(d) + " of " + num(length) + " tokens");
}

// Python's round(): to nearest, ties to even, whatever the floating-point rounding mode.
int64_t round_half_even(double x) {
  const double f = std::floor(x);
  const double diff = x - f;
  auto r = static_cast<int64_t>(f);
  if (diff > 0.5 || (diff == 0.5 && r % 2 != 0)) ++r;
  return r;
}

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\f\v") == std::string_view::npos;
}

std::string quoted(std::string_view s) {
  std::string q = "\"";
  q += s;
  q += '"';
  return q;
}

}  // namespace

const char* data_split_name(DataSplit split) {
  switch (split) {
    case DataSplit::Train: return "train";
    case DataSplit::Valid: return "valid";
    case DataSplit::Test: return "test";
  }
  return "unknown";
}

// ---- byte-level tokenizer -----------------------------------------------------------------

std::vector<int32_t> byte_encode(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string byte_decode(const int32_t* ids, std::size_t count) {
  PTDP_CHECK_ARG(ids != nullptr || count == 0, "ids is NULL");
  std::string out(count, '\0');
  for (std::size_t i = 0; i < count; ++i) {
    PTDP_CHECK_ARG(ids[i] >= 0 && ids[i] <= 255, "id " + num(ids[i]) + " at position " +
                                                     num(static_cast<int64_t>(i)) + " is not a byte (0..255)");
    out[i] = static_cast<char>(static_cast<unsigned char>(ids[i]));
  }
  return out;
}

// ---- indexed data set ------------------------------------------------------------------------

IndexedTokenSource::IndexedTokenSource(const std::string& prefix, int32_t vocab_size)
    : dataset_(prefix), vocab_size_(vocab_size) {
  PTDP_CHECK_ARG(vocab_size > 0, "vocab_size = " + num(vocab_size) + " is not > 0");
  PTDP_CHECK_ARG(dataset_.num_documents() <= std::numeric_limits<int32_t>::max(),
                 describe() + " has more than 2^31 - 1 documents");
}

int64_t IndexedTokenSource::document_length(int64_t d) const { return dataset_.document_length(d); }

void IndexedTokenSource::read(int64_t d, int64_t offset, int64_t count, int32_t* out) const {
  check_range(*this, d, offset, count);
  // Only the sequences overlapping [offset, offset + count) are read.
  int64_t position = 0;  // of the current sequence's first token within the document
  const int64_t end = offset + count;
  for (int64_t s = dataset_.document_first_sequence(d); s < dataset_.document_end_sequence(d) && position < end;
       ++s) {
    const int64_t length = dataset_.sequence_length(s);
    if (position + length > offset) {
      const int64_t lo = std::max(offset, position), hi = std::min(end, position + length);
      dataset_.read_sequence(s, lo - position, hi - lo, out + (lo - offset));
      for (int64_t k = lo; k < hi; ++k) {
        if (out[k - offset] >= vocab_size_) token_error(describe(), d, k, out[k - offset], vocab_size_);
      }
    }
    position += length;
  }
}

// ---- text file --------------------------------------------------------------------------------

std::vector<std::string> text_documents(std::string_view text) {
  std::vector<std::string> docs;
  std::string current;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (is_blank(line)) {
      if (!current.empty()) docs.push_back(std::move(current) + "\n");
      current.clear();
    } else {
      current += line;
      current += '\n';
    }
    start = end + 1;
  }
  if (!current.empty()) docs.push_back(std::move(current) + "\n");
  return docs;
}

TextTokenSource::TextTokenSource(const std::string& path, int32_t vocab_size) : path_(path) {
  PTDP_CHECK_ARG(vocab_size > 0, "vocab_size = " + num(vocab_size) + " is not > 0");
  const std::string text = read_regular_file(path, "text file", kMaxTokenizerFileBytes);
  const std::vector<std::string> docs = text_documents(text);
  starts_.reserve(docs.size() + 1);
  starts_.push_back(0);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    for (std::size_t k = 0; k < docs[d].size(); ++k) {
      const int32_t t = static_cast<unsigned char>(docs[d][k]);
      if (t >= vocab_size) {
        token_error(describe(), static_cast<int64_t>(d), static_cast<int64_t>(k), t, vocab_size);
      }
    }
    bytes_ += docs[d];
    starts_.push_back(static_cast<int64_t>(bytes_.size()));
  }
}

int64_t TextTokenSource::document_length(int64_t d) const {
  PTDP_CHECK_ARG(d >= 0 && d < num_documents(),
                 describe() + ": document " + num(d) + " is out of range [0, " + num(num_documents()) + ")");
  return starts_[static_cast<std::size_t>(d) + 1] - starts_[static_cast<std::size_t>(d)];
}

void TextTokenSource::read(int64_t d, int64_t offset, int64_t count, int32_t* out) const {
  check_range(*this, d, offset, count);
  const char* p = bytes_.data() + starts_[static_cast<std::size_t>(d)] + offset;
  for (int64_t k = 0; k < count; ++k) out[k] = static_cast<unsigned char>(p[k]);
}

// ---- mock data --------------------------------------------------------------------------------

namespace {
const uint64_t kMockLengthStream = philox_name_hash("ptdp.gpt_dataset.mock_length");
const uint64_t kMockTokenStream = philox_name_hash("ptdp.gpt_dataset.mock_tokens");
}  // namespace

MockTokenSource::MockTokenSource(uint64_t seed, int32_t seq_length, int32_t vocab_size)
    : seed_(seed), vocab_size_(vocab_size) {
  PTDP_CHECK_ARG(seq_length > 0, "seq_length = " + num(seq_length) + " is not > 0");
  PTDP_CHECK_ARG(vocab_size > 0, "vocab_size = " + num(vocab_size) + " is not > 0");
  const int64_t lo = std::max<int64_t>(1, seq_length / 2);
  const int64_t hi = 4 * static_cast<int64_t>(seq_length);
  const auto span = static_cast<uint64_t>(hi - lo + 1);
  lengths_.resize(kNumDocuments);
  for (int64_t d = 0; d < kNumDocuments; ++d) {
    const uint64_t bits = philox_bits(PhiloxStream{seed, kMockLengthStream}, static_cast<uint64_t>(d));
    lengths_[static_cast<std::size_t>(d)] = lo + static_cast<int64_t>((bits * span) >> 32);
  }
}

int64_t MockTokenSource::document_length(int64_t d) const {
  PTDP_CHECK_ARG(d >= 0 && d < kNumDocuments, "mock data: document " + num(d) + " is out of range");
  return lengths_[static_cast<std::size_t>(d)];
}

void MockTokenSource::read(int64_t d, int64_t offset, int64_t count, int32_t* out) const {
  check_range(*this, d, offset, count);
  const PhiloxStream stream{seed_, kMockTokenStream + static_cast<uint64_t>(d)};
  for (int64_t k = 0; k < count; ++k) {
    const uint64_t bits = philox_bits(stream, static_cast<uint64_t>(offset + k));
    out[k] = static_cast<int32_t>((bits * static_cast<uint64_t>(vocab_size_)) >> 32);
  }
}

// ---- splits -----------------------------------------------------------------------------------

std::array<double, 3> parse_split(std::string_view split) {
  auto bad = [&](const std::string& why) {
    std::string m = "split ";
    m += quoted(split);
    m += ": ";
    m += why;
    m += " (expected up to three non-negative weights separated by ',' or '/', e.g. \"969,30,1\")";
    throw_error(ErrorCode::InvalidArgument, m);
  };
  std::array<double, 3> w{0, 0, 0};
  const char* p = split.data();
  const char* const end = p + split.size();
  auto skip_spaces = [&] {
    while (p < end && (*p == ' ' || *p == '\t')) ++p;
  };
  int n = 0;
  while (true) {
    skip_spaces();
    if (n == 3) bad("more than three weights");
    if (p < end && *p == '-') bad("negative weight");
    double v = 0;
    const auto [next, ec] = std::from_chars(p, end, v, std::chars_format::fixed);
    if (p == end) bad("missing weight");
    if (ec != std::errc() || next == p) bad("not a number at " + quoted(std::string_view(p, end - p)));
    if (!std::isfinite(v)) bad("weight is not finite");
    w[static_cast<std::size_t>(n++)] = v;
    p = next;
    skip_spaces();
    if (p == end) break;
    if (*p != ',' && *p != '/') bad("unexpected " + quoted(std::string_view(p, 1)));
    ++p;
  }
  const double sum = w[0] + w[1] + w[2];
  if (!(sum > 0)) bad("the weights sum to 0");
  for (double& x : w) x /= sum;
  return w;
}

std::array<int64_t, 4> split_boundaries(const std::array<double, 3>& weights, int64_t num_documents) {
  PTDP_CHECK_ARG(num_documents >= 0, "num_documents = " + num(num_documents) + " is negative");
  std::array<int64_t, 4> b{0, 0, 0, 0};
  for (std::size_t i = 0; i < 3; ++i) {
    b[i + 1] = b[i] + round_half_even(weights[i] * static_cast<double>(num_documents));
  }
  const int64_t excess = b[3] - num_documents;
  for (std::size_t i = 1; i < 4; ++i) b[i] = std::clamp<int64_t>(b[i] - excess, b[i - 1], num_documents);
  return b;
}

PhiloxStream document_shuffle_stream(uint64_t seed, DataSplit split) {
  static const uint64_t base = philox_name_hash("ptdp.gpt_dataset.document_index");
  return PhiloxStream{seed, base + static_cast<uint64_t>(split)};
}

PhiloxStream sample_shuffle_stream(uint64_t seed, DataSplit split) {
  static const uint64_t base = philox_name_hash("ptdp.gpt_dataset.shuffle_index");
  return PhiloxStream{seed, base + static_cast<uint64_t>(split)};
}

GptSplit::GptSplit(std::shared_ptr<const TokenSource> source, DataSplit split, int64_t first_document,
                   int64_t end_document, int32_t seq_length, uint64_t seed, int64_t num_samples_wanted)
    : source_(std::move(source)),
      split_(split),
      seq_length_(seq_length),
      first_document_(first_document),
      end_document_(end_document) {
  PTDP_CHECK_ARG(source_ != nullptr, "source is NULL");
  PTDP_CHECK_ARG(seq_length > 0, "seq_length = " + num(seq_length) + " is not > 0");
  PTDP_CHECK_ARG(0 <= first_document && first_document <= end_document && end_document <= source_->num_documents(),
                 "documents [" + num(first_document) + ", " + num(end_document) + ") are outside [0, " +
                     num(source_->num_documents()) + ")");
  PTDP_CHECK_ARG(end_document <= std::numeric_limits<int32_t>::max(), "more than 2^31 - 1 documents");
  const int64_t s = seq_length;
  PTDP_CHECK_ARG(num_samples_wanted >= 0 && num_samples_wanted <= (std::numeric_limits<int64_t>::max() - 1) / s,
                 std::string("num_samples for split ") + data_split_name(split) + " = " + num(num_samples_wanted) +
                     " is negative or too large");
  for (int64_t d = first_document; d < end_document; ++d) tokens_per_epoch_ += source_->document_length(d);

  if (num_samples_wanted > 0) {
    if (tokens_per_epoch_ < s + 1) {
      std::string m = "split ";
      m += data_split_name(split);
      m += " (documents [";
      m += num(first_document);
      m += ", ";
      m += num(end_document);
      m += ") of ";
      m += source_->describe();
      m += ") has ";
      m += num(tokens_per_epoch_);
      m += " tokens, fewer than one sample of seq_length + 1 = ";
      m += num(s + 1);
      m += " tokens; ";
      m += num(num_samples_wanted);
      m += " samples were asked for";
      throw_error(ErrorCode::InvalidArgument, m);
    }
    // Megatron's _get_num_epochs: the fewest epochs whose tokens hold num_samples * s + 1.
    const int64_t needed = num_samples_wanted * s + 1;
    num_epochs_ = std::max<int64_t>(1, (needed + tokens_per_epoch_ - 1) / tokens_per_epoch_);
  }
  const int64_t docs = end_document - first_document;
  PTDP_CHECK_ARG(docs == 0 || num_epochs_ <= std::numeric_limits<int64_t>::max() / 2 / docs,
                 std::string("split ") + data_split_name(split) + " needs too many epochs");

  document_index_.reserve(static_cast<std::size_t>(docs * num_epochs_));
  for (int64_t e = 0; e < num_epochs_; ++e) {
    for (int64_t d = first_document; d < end_document; ++d) document_index_.push_back(static_cast<int32_t>(d));
  }
  philox_shuffle(document_index_, document_shuffle_stream(seed, split));

  // Megatron's build_sample_idx: sample i starts s tokens after sample i - 1.
  const int64_t total = num_epochs_ * tokens_per_epoch_;
  const int64_t n = total > 0 ? (total - 1) / s : 0;
  sample_position_.resize(static_cast<std::size_t>(n));
  sample_offset_.resize(static_cast<std::size_t>(n));
  std::size_t position = 0;
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    sample_position_[static_cast<std::size_t>(i)] = static_cast<int64_t>(position);
    sample_offset_[static_cast<std::size_t>(i)] = offset;
    int64_t remaining = s;
    while (remaining > 0) {
      const int64_t left = source_->document_length(document_index_[position]) - offset;
      if (left > remaining) {
        offset += remaining;
        remaining = 0;
      } else {
        remaining -= left;
        ++position;
        offset = 0;
      }
    }
  }
  shuffle_index_.resize(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) shuffle_index_[static_cast<std::size_t>(i)] = i;
  philox_shuffle(shuffle_index_, sample_shuffle_stream(seed, split));
}

void GptSplit::read_sample(int64_t i, int32_t* out) const {
  PTDP_CHECK_ARG(i >= 0 && i < num_samples(), std::string("sample ") + num(i) + " of split " +
                                                  data_split_name(split_) + " is out of range [0, " +
                                                  num(num_samples()) + ")");
  auto position = static_cast<std::size_t>(sample_position_[static_cast<std::size_t>(i)]);
  int64_t offset = sample_offset_[static_cast<std::size_t>(i)];
  int64_t need = static_cast<int64_t>(seq_length_) + 1;
  while (need > 0) {
    const int32_t d = document_index_[position];
    const int64_t take = std::min(need, source_->document_length(d) - offset);
    source_->read(d, offset, take, out);
    out += take;
    need -= take;
    ++position;
    offset = 0;
  }
}

void GptSplit::get_batch(int64_t first, int64_t count, int32_t* tokens, int32_t* labels) const {
  const int64_t n = num_samples();
  if (n == 0) {
    std::string m = "split ";
    m += data_split_name(split_);
    m += " has no samples (";
    m += num(tokens_per_epoch_);
    m += " tokens in ";
    m += num(end_document_ - first_document_);
    m += " documents; one sample needs seq_length + 1 = ";
    m += num(static_cast<int64_t>(seq_length_) + 1);
    m += ")";
    throw_error(ErrorCode::InvalidArgument, m);
  }
  PTDP_CHECK_ARG(first >= 0, "first = " + num(first) + " is negative");
  PTDP_CHECK_ARG(count > 0, "count = " + num(count) + " is not > 0");
  PTDP_CHECK_ARG(tokens != nullptr, "tokens is NULL");
  PTDP_CHECK_ARG(labels != nullptr, "labels is NULL");
  const auto s = static_cast<std::size_t>(seq_length_);
  std::vector<int32_t> sample(s + 1);
  for (int64_t j = 0; j < count; ++j) {
    read_sample(shuffle_index_[static_cast<std::size_t>((first % n + j % n) % n)], sample.data());
    std::copy(sample.begin(), sample.end() - 1, tokens + static_cast<std::size_t>(j) * s);
    std::copy(sample.begin() + 1, sample.end(), labels + static_cast<std::size_t>(j) * s);
  }
}

// ---- the three splits ---------------------------------------------------------------------------

GptDataset::GptDataset(std::shared_ptr<const TokenSource> source, const GptDatasetOptions& options)
    : source_(std::move(source)) {
  PTDP_CHECK_ARG(source_ != nullptr, "source is NULL");
  PTDP_CHECK_ARG(options.seq_length > 0, "seq_length = " + num(options.seq_length) + " is not > 0");
  boundaries_ = split_boundaries(parse_split(options.split), source_->num_documents());
  splits_.reserve(kNumDataSplits);
  for (int k = 0; k < kNumDataSplits; ++k) {
    const auto i = static_cast<std::size_t>(k);
    splits_.emplace_back(source_, static_cast<DataSplit>(k), boundaries_[i], boundaries_[i + 1],
                         options.seq_length, options.seed, options.num_samples[i]);
  }
}

namespace {

// The splits of an assembled data set, kept where a single source's token source is kept.
class AssembledSplits final : public TokenSource {
 public:
  explicit AssembledSplits(std::array<std::shared_ptr<const SplitSamples>, kNumDataSplits> splits)
      : splits_(std::move(splits)) {}
  const SplitSamples& split(std::size_t k) const { return *splits_[k]; }
  int64_t num_documents() const override { return 0; }
  int64_t document_length(int64_t) const override { return 0; }
  void read(int64_t, int64_t, int64_t, int32_t*) const override {
    throw_error(ErrorCode::InvalidArgument, "a blended data set has no single token source");
  }
  std::string describe() const override { return "blended data sets"; }

 private:
  std::array<std::shared_ptr<const SplitSamples>, kNumDataSplits> splits_;
};

}  // namespace

GptDataset::GptDataset(std::array<std::shared_ptr<const SplitSamples>, kNumDataSplits> splits) {
  for (int k = 0; k < kNumDataSplits; ++k) {
    const auto i = static_cast<std::size_t>(k);
    PTDP_CHECK_ARG(splits[i] != nullptr,
                   std::string("the samples of split ") + data_split_name(static_cast<DataSplit>(k)) + " are NULL");
    PTDP_CHECK_ARG(splits[i]->seq_length() == splits[0]->seq_length(),
                   std::string("split ") + data_split_name(static_cast<DataSplit>(k)) + " has seq_length " +
                       num(splits[i]->seq_length()) + ", split train " + num(splits[0]->seq_length()));
  }
  source_ = std::make_shared<AssembledSplits>(std::move(splits));
}

const TokenSource& GptDataset::source() const {
  PTDP_CHECK_ARG(!splits_.empty(), "a blended data set has no single token source");
  return *source_;
}

const std::array<int64_t, 4>& GptDataset::boundaries() const {
  PTDP_CHECK_ARG(!splits_.empty(), "a blended data set has no single document split");
  return boundaries_;
}

const GptSplit& GptDataset::split(DataSplit s) const {
  const int k = static_cast<int>(s);
  PTDP_CHECK_ARG(k >= 0 && k < kNumDataSplits, "split = " + num(k) + " is not a data split (0, 1 or 2)");
  PTDP_CHECK_ARG(!splits_.empty(), std::string("split ") + data_split_name(s) +
                                       " of a blended data set is not one GptSplit; use samples()");
  return splits_[static_cast<std::size_t>(k)];
}

const SplitSamples& GptDataset::samples(DataSplit s) const {
  const int k = static_cast<int>(s);
  PTDP_CHECK_ARG(k >= 0 && k < kNumDataSplits, "split = " + num(k) + " is not a data split (0, 1 or 2)");
  if (splits_.empty()) return static_cast<const AssembledSplits&>(*source_).split(static_cast<std::size_t>(k));
  return splits_[static_cast<std::size_t>(k)];
}

std::shared_ptr<const TokenSource> open_token_source(DataSource source, const std::string& path, int32_t seq_length,
                                                     int32_t vocab_size, uint64_t seed) {
  switch (source) {
    case DataSource::Mock: return std::make_shared<MockTokenSource>(seed, seq_length, vocab_size);
    case DataSource::Indexed:
      PTDP_CHECK_ARG(!path.empty(), "the indexed data set's prefix is empty");
      return std::make_shared<IndexedTokenSource>(path, vocab_size);
    case DataSource::Text:
      PTDP_CHECK_ARG(!path.empty(), "the text file's path is empty");
      return std::make_shared<TextTokenSource>(path, vocab_size);
  }
  PTDP_CHECK_ARG(false, "data source " + std::to_string(static_cast<int>(source)) + " is not mock, indexed or text");
  return nullptr;
}

void eod_masks(const int32_t* tokens, int64_t count, int64_t seq_length, int32_t eod, bool eod_mask_loss,
               int32_t* labels, int32_t* position_ids, int32_t* document_starts) {
  PTDP_CHECK_ARG(tokens != nullptr, "eod_masks: tokens is NULL");
  PTDP_CHECK_ARG(count >= 0, "eod_masks: count = " + std::to_string(count) + " is negative");
  PTDP_CHECK_ARG(seq_length > 0, "eod_masks: seq_length = " + std::to_string(seq_length) + " is not > 0");
  PTDP_CHECK_ARG(labels != nullptr || !eod_mask_loss, "eod_masks: labels is NULL but eod_mask_loss is set");
  for (int64_t r = 0; r < count; ++r) {
    int64_t start = 0;  // of the current document: one past the last eod seen in this row
    for (int64_t i = 0; i < seq_length; ++i) {
      const int64_t at = r * seq_length + i;
      if (position_ids) position_ids[at] = static_cast<int32_t>(i - start);
      if (document_starts) document_starts[at] = static_cast<int32_t>(start);
      if (tokens[at] == eod) {
        if (eod_mask_loss) labels[at] = kIgnoreIndex;
        start = i + 1;  // the eod ends its document; the next token begins another
      }
    }
  }
}

}  // namespace ptdp
