// ptdp::GptDataset: Megatron's GPTDataset construction (document, sample and shuffle indices)
// checked against the concatenated shuffled documents of a tiny indexed data set, Megatron's
// split boundaries computed by hand, the text and mock sources, and every error message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <thread>

#include "base/error.h"
#include "core/data/gpt_dataset.h"
#include "idx_bytes.h"

using ptdp::DataSplit;
using ptdp::GptDataset;
using ptdp::GptDatasetOptions;
using ptdp::GptSplit;

namespace {

using Docs = std::vector<std::vector<std::vector<int32_t>>>;

// Documents with distinct tokens (document d, token k = 100 * d + k): 8 documents, one of them
// empty and one made of three sequences, 33 tokens in all.
Docs tiny_docs() {
  const std::vector<int> lengths{3, 5, 1, 7, 0, 4, 2, 11};
  Docs docs;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> all;
    for (int k = 0; k < lengths[d]; ++k) all.push_back(static_cast<int32_t>(100 * d) + k);
    if (d == 7) {  // three sequences: 4 + 0 + 7 tokens
      docs.push_back({std::vector<int32_t>(all.begin(), all.begin() + 4), {},
                      std::vector<int32_t>(all.begin() + 4, all.end())});
    } else {
      docs.push_back({all});
    }
  }
  return docs;
}

std::vector<int32_t> flat(const std::vector<std::vector<int32_t>>& seqs) {
  std::vector<int32_t> out;
  for (const auto& s : seqs) out.insert(out.end(), s.begin(), s.end());
  return out;
}

std::shared_ptr<const ptdp::TokenSource> indexed(const std::string& prefix, const Docs& docs, int32_t vocab = 5000) {
  ptdp::write_indexed_dataset(prefix, docs, ptdp::IndexedDType::UInt16);
  return std::make_shared<ptdp::IndexedTokenSource>(prefix, vocab);
}

// Fisher-Yates written out independently of ptdp::philox_shuffle (128-bit multiply here).
template <typename T>
std::vector<T> reference_shuffle(std::vector<T> v, ptdp::PhiloxStream stream) {
  for (std::size_t i = v.size(); i-- > 1;) {
    const ptdp::Philox4x32 r = ptdp::philox_block(stream, i);
    const unsigned __int128 bits = (static_cast<unsigned __int128>(r.v[1]) << 32) | r.v[0];
    std::swap(v[i], v[static_cast<std::size_t>((bits * (i + 1)) >> 64)]);
  }
  return v;
}

std::vector<int32_t> sample(const GptSplit& sp, int64_t i) {
  std::vector<int32_t> out(static_cast<std::size_t>(sp.seq_length()) + 1, -1);
  sp.read_sample(i, out.data());
  return out;
}

// The split's documents concatenated in document-index order.
std::vector<int32_t> concatenation(const GptSplit& sp, const Docs& docs) {
  std::vector<int32_t> out;
  for (int32_t d : sp.document_index()) {
    const auto t = flat(docs[static_cast<std::size_t>(d)]);
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

// Runs `f` expecting ptdp::Error with `code`; returns the message.
template <typename F>
std::string error_of(F&& f, ptdp::ErrorCode code) {
  try {
    f();
  } catch (const ptdp::Error& e) {
    CHECK(e.code() == code);
    return e.what();
  }
  FAIL("no error thrown");
  return {};
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

}  // namespace

TEST_CASE("gpt dataset: samples are s+1 consecutive tokens of the shuffled documents", "[data]") {
  idx_bytes::TempDir dir("gpt_samples");
  const Docs docs = tiny_docs();
  const auto src = indexed(dir.prefix("tiny"), docs);
  const int32_t s = 4;
  const GptSplit sp(src, DataSplit::Train, 0, 8, s, 1234, 0);

  // One epoch: every document once, in the order Fisher-Yates over Philox gives.
  std::vector<int32_t> ids(8);
  std::iota(ids.begin(), ids.end(), 0);
  CHECK(sp.num_epochs() == 1);
  CHECK(sp.tokens_per_epoch() == 33);
  CHECK(sp.document_index() == reference_shuffle(ids, ptdp::document_shuffle_stream(1234, DataSplit::Train)));
  CHECK(sp.document_index() != ids);  // the shuffle did something

  const std::vector<int32_t> concat = concatenation(sp, docs);
  REQUIRE(concat.size() == 33);
  CHECK(sp.num_samples() == (33 - 1) / s);  // 8: the samples cover tokens [0, 33) exactly
  std::set<int32_t> covered;
  for (int64_t i = 0; i < sp.num_samples(); ++i) {
    const auto got = sample(sp, i);
    const std::vector<int32_t> want(concat.begin() + i * s, concat.begin() + i * s + s + 1);
    CHECK(got == want);
    if (i + 1 < sp.num_samples()) CHECK(got.back() == sample(sp, i + 1).front());
    covered.insert(got.begin(), got.end());
  }
  CHECK(covered == std::set<int32_t>(concat.begin(), concat.end()));
  CHECK(covered.size() == 33);

  // The shuffle index is a Philox permutation of the samples and orders get_batch.
  std::vector<int64_t> order(static_cast<std::size_t>(sp.num_samples()));
  std::iota(order.begin(), order.end(), 0);
  CHECK(sp.shuffle_index() == reference_shuffle(order, ptdp::sample_shuffle_stream(1234, DataSplit::Train)));
  std::vector<int32_t> tokens(static_cast<std::size_t>(3 * s)), labels(tokens.size());
  sp.get_batch(6, 3, tokens.data(), labels.data());  // samples 6, 7 and 0 (wrapped)
  for (int j = 0; j < 3; ++j) {
    const auto want = sample(sp, sp.shuffle_index()[static_cast<std::size_t>((6 + j) % 8)]);
    CHECK(std::vector<int32_t>(tokens.begin() + j * s, tokens.begin() + (j + 1) * s) ==
          std::vector<int32_t>(want.begin(), want.end() - 1));
    CHECK(std::vector<int32_t>(labels.begin() + j * s, labels.begin() + (j + 1) * s) ==
          std::vector<int32_t>(want.begin() + 1, want.end()));
  }

  // Other lengths: (33 - 1) / s samples, each a window of the concatenation; the tokens after
  // the last sample (fewer than s) are left out, as in Megatron.
  const std::map<int32_t, int64_t> counts{{1, 32}, {2, 16}, {3, 10}, {7, 4}, {11, 2}, {31, 1}, {32, 1}, {33, 0}};
  for (const auto& [len, count] : counts) {
    INFO("s = " << len);
    const GptSplit other(src, DataSplit::Train, 0, 8, len, 99, 0);
    REQUIRE(other.num_samples() == count);
    const std::vector<int32_t> c = concatenation(other, docs);
    for (int64_t i = 0; i < count; ++i) {
      CHECK(sample(other, i) == std::vector<int32_t>(c.begin() + i * len, c.begin() + i * len + len + 1));
    }
  }
}

TEST_CASE("gpt dataset: more samples than one epoch repeat the documents over epochs", "[data]") {
  idx_bytes::TempDir dir("gpt_epochs");
  const Docs docs = tiny_docs();
  const auto src = indexed(dir.prefix("tiny"), docs);
  const int32_t s = 5;
  // One epoch gives (33 - 1) / 5 = 6 samples; 20 need 20 * 5 + 1 = 101 tokens: 4 epochs (132),
  // since 3 epochs (99 tokens) give only 19.
  const GptSplit sp(src, DataSplit::Train, 0, 8, s, 7, 20);
  CHECK(sp.num_epochs() == 4);
  CHECK(sp.num_samples() == (4 * 33 - 1) / 5);  // 26
  CHECK((3 * 33 - 1) / 5 < 20);
  std::map<int32_t, int> times;
  for (int32_t d : sp.document_index()) ++times[d];
  REQUIRE(times.size() == 8);
  for (const auto& [d, n] : times) CHECK(n == 4);

  const std::vector<int32_t> concat = concatenation(sp, docs);
  REQUIRE(concat.size() == 132);
  for (int64_t i = 0; i < sp.num_samples(); ++i) {
    CHECK(sample(sp, i) == std::vector<int32_t>(concat.begin() + i * s, concat.begin() + i * s + s + 1));
  }
  // Exactly as many samples as one epoch holds need no second epoch.
  CHECK(GptSplit(src, DataSplit::Train, 0, 8, s, 7, 6).num_epochs() == 1);
  CHECK(GptSplit(src, DataSplit::Train, 0, 8, s, 7, 7).num_epochs() == 2);
}

TEST_CASE("gpt dataset: split strings and Megatron's document boundaries", "[data]") {
  using B = std::array<int64_t, 4>;
  const auto w = ptdp::parse_split("969,30,1");
  CHECK(w[0] == Approx(0.969));
  CHECK(w[1] == Approx(0.030));
  CHECK(w[2] == Approx(0.001));
  CHECK(ptdp::parse_split("969, 30, 1") == w);
  CHECK(ptdp::parse_split(" 969 ,30 , 1 ") == w);
  CHECK(ptdp::parse_split("98/2/0") == std::array<double, 3>{0.98, 0.02, 0.0});
  CHECK(ptdp::parse_split("1") == std::array<double, 3>{1.0, 0.0, 0.0});
  CHECK(ptdp::parse_split("0.5,0.5") == std::array<double, 3>{0.5, 0.5, 0.0});

  // boundaries[i+1] = boundaries[i] + round(w_i * N) (half to even), then all shifted by the excess.
  CHECK(ptdp::split_boundaries(w, 1000) == B{0, 969, 999, 1000});
  CHECK(ptdp::split_boundaries(ptdp::parse_split("90,9,1"), 1000) == B{0, 900, 990, 1000});
  CHECK(ptdp::split_boundaries(w, 100) == B{0, 97, 100, 100});   // 96.9 -> 97, 3, 0.1 -> 0
  CHECK(ptdp::split_boundaries(w, 10) == B{0, 10, 10, 10});      // 9.69 -> 10, 0.3 -> 0, 0
  CHECK(ptdp::split_boundaries(w, 0) == B{0, 0, 0, 0});
  CHECK(ptdp::split_boundaries(ptdp::parse_split("98/2/0"), 50) == B{0, 49, 50, 50});
  CHECK(ptdp::split_boundaries(ptdp::parse_split("1,1,1"), 10) == B{0, 4, 7, 10});  // 3+3+3 = 9: +1
  CHECK(ptdp::split_boundaries(ptdp::parse_split("1,1"), 3) == B{0, 1, 3, 3});      // 2+2 = 4: -1
  CHECK(ptdp::split_boundaries(ptdp::parse_split("1,1"), 5) == B{0, 3, 5, 5});      // 2.5 -> 2 twice: +1
  CHECK(ptdp::split_boundaries(ptdp::parse_split("1,1,2"), 2) == B{0, 1, 1, 2});    // 0, 0, 1: +1

  // A data set's splits take those document ranges.
  idx_bytes::TempDir dir("gpt_split");
  const auto src = indexed(dir.prefix("tiny"), tiny_docs());
  GptDatasetOptions o;
  o.split = "6,1,1";  // 6, 1, 1 of 8 documents
  o.seq_length = 2;
  const GptDataset ds(src, o);
  CHECK(ds.boundaries() == B{0, 6, 7, 8});
  CHECK(ds.split(DataSplit::Valid).first_document() == 6);
  CHECK(ds.split(DataSplit::Valid).tokens_per_epoch() == 2);
  CHECK(ds.split(DataSplit::Test).tokens_per_epoch() == 11);
  CHECK(ds.num_samples(DataSplit::Train) == (20 - 1) / 2);
  for (int32_t d : ds.split(DataSplit::Train).document_index()) CHECK(d < 6);
}

TEST_CASE("gpt dataset: the same inputs give the same samples, another seed another order", "[data]") {
  idx_bytes::TempDir dir("gpt_determinism");
  const auto src = indexed(dir.prefix("tiny"), tiny_docs());
  GptDatasetOptions o;
  o.split = "1";
  o.seq_length = 3;
  o.num_samples = {40, 0, 0};
  const GptDataset a(src, o), b(src, o);
  const GptSplit& sa = a.split(DataSplit::Train);
  const GptSplit& sb = b.split(DataSplit::Train);
  CHECK(sa.document_index() == sb.document_index());
  CHECK(sa.shuffle_index() == sb.shuffle_index());
  std::vector<int32_t> ta(40 * 3), la(ta.size()), tb(ta.size()), lb(ta.size());
  a.get_batch(DataSplit::Train, 0, 40, ta.data(), la.data());
  b.get_batch(DataSplit::Train, 0, 40, tb.data(), lb.data());
  CHECK(ta == tb);
  CHECK(la == lb);

  o.seed = 1235;
  const GptDataset c(src, o);
  CHECK(c.split(DataSplit::Train).document_index() != sa.document_index());
  CHECK(c.split(DataSplit::Train).shuffle_index() != sa.shuffle_index());
  c.get_batch(DataSplit::Train, 0, 40, tb.data(), lb.data());
  CHECK(ta != tb);
  // The three splits shuffle with different streams.
  CHECK(ptdp::document_shuffle_stream(1, DataSplit::Train).stream !=
        ptdp::document_shuffle_stream(1, DataSplit::Valid).stream);
}

TEST_CASE("gpt dataset: data-parallel shares of a global batch concatenate to the batch", "[data]") {
  GptDatasetOptions o;
  o.seq_length = 16;
  o.num_samples = {100, 10, 0};
  const GptDataset ds(std::make_shared<ptdp::MockTokenSource>(o.seed, o.seq_length, 1000), o);
  const int64_t B = 8, s = o.seq_length;
  const int64_t n = ds.num_samples(DataSplit::Train);
  REQUIRE(n >= 100);
  for (int64_t k : {int64_t{0}, int64_t{3}, n / B, n / B + 1}) {  // the last two wrap around
    std::vector<int32_t> whole(static_cast<std::size_t>(B * s)), whole_labels(whole.size());
    ds.get_batch(DataSplit::Train, k * B, B, whole.data(), whole_labels.data());
    for (int64_t d : {1, 2, 4}) {
      std::vector<int32_t> parts, part_labels;
      for (int64_t r = 0; r < d; ++r) {
        std::vector<int32_t> t(static_cast<std::size_t>(B / d * s)), l(t.size());
        ds.get_batch(DataSplit::Train, k * B + r * B / d, B / d, t.data(), l.data());
        parts.insert(parts.end(), t.begin(), t.end());
        part_labels.insert(part_labels.end(), l.begin(), l.end());
      }
      CHECK(parts == whole);
      CHECK(part_labels == whole_labels);
    }
  }
  // Wrapping: sample n + j is sample j.
  std::vector<int32_t> t1(static_cast<std::size_t>(s)), l1(t1.size()), t2(t1.size()), l2(t1.size());
  ds.get_batch(DataSplit::Train, n + 5, 1, t1.data(), l1.data());
  ds.get_batch(DataSplit::Train, 5, 1, t2.data(), l2.data());
  CHECK(t1 == t2);
  CHECK(l1 == l2);
}

TEST_CASE("gpt dataset: a text file gives byte tokens, one document per paragraph", "[data]") {
  idx_bytes::TempDir dir("gpt_text");
  const std::string path = dir.prefix("corpus.txt");
  write_file(path, "Hello world.\nSecond line.\n\n\n  \t\nNew para\r\n  indented\n\r\nlast");
  const ptdp::TextTokenSource src(path, 256);
  REQUIRE(src.num_documents() == 3);
  const std::vector<std::string> want{"Hello world.\nSecond line.\n\n", "New para\r\n  indented\n\n", "last\n\n"};
  for (int64_t d = 0; d < 3; ++d) {
    const std::string& w = want[static_cast<std::size_t>(d)];
    REQUIRE(src.document_length(d) == static_cast<int64_t>(w.size()));
    std::vector<int32_t> got(w.size());
    src.read(d, 0, static_cast<int64_t>(w.size()), got.data());
    CHECK(got == ptdp::byte_encode(w));
    CHECK(ptdp::byte_decode(got) == w);
  }
  std::vector<int32_t> part(3);
  src.read(0, 6, 3, part.data());
  CHECK(part == std::vector<int32_t>{'w', 'o', 'r'});
  CHECK(src.describe() == "text file " + path);

  CHECK(ptdp::text_documents("").empty());
  CHECK(ptdp::text_documents("\n \n\t\n").empty());
  CHECK(ptdp::text_documents("a\n\nb\n") == std::vector<std::string>{"a\n\n", "b\n\n"});

  // The byte tokenizer round-trips every byte value.
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  all += "plain text \xc3\xa9";
  const std::vector<int32_t> ids = ptdp::byte_encode(all);
  CHECK(ids[200] == 200);
  CHECK(ids[0] == 0);
  CHECK(ids.back() == 0xa9);
  CHECK(ptdp::byte_decode(ids) == all);
  CHECK_THAT(error_of([] { ptdp::byte_decode(std::vector<int32_t>{65, 256}); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("position 1"));

  // Samples from a text source are windows of its documents.
  GptDatasetOptions o;
  o.split = "1";
  o.seq_length = 8;
  const GptDataset ds(std::make_shared<ptdp::TextTokenSource>(path, 256), o);
  const GptSplit& sp = ds.split(DataSplit::Train);
  std::string concat;
  for (int32_t d : sp.document_index()) concat += want[static_cast<std::size_t>(d)];
  CHECK(sp.num_samples() == static_cast<int64_t>((concat.size() - 1) / 8));
  CHECK(ptdp::byte_decode(sample(sp, 2)) == concat.substr(16, 9));
}

TEST_CASE("gpt dataset: mock data is a pure function of the seed and stays in the vocabulary", "[data]") {
  const ptdp::MockTokenSource a(42, 16, 50), b(42, 16, 50), c(43, 16, 50);
  CHECK(a.num_documents() == 1000);
  int64_t differs = 0;
  std::set<int32_t> seen;
  for (int64_t d = 0; d < 1000; ++d) {
    const int64_t len = a.document_length(d);
    CHECK(len >= 8);
    CHECK(len <= 64);
    REQUIRE(len == b.document_length(d));
    std::vector<int32_t> ta(static_cast<std::size_t>(len)), tb(ta.size());
    a.read(d, 0, len, ta.data());
    b.read(d, 0, len, tb.data());
    CHECK(ta == tb);
    for (int32_t t : ta) {
      CHECK(t >= 0);
      CHECK(t < 50);
      seen.insert(t);
    }
    // A part reads as the same tokens as the whole.
    std::vector<int32_t> mid(3);
    a.read(d, len - 3, 3, mid.data());
    CHECK(mid == std::vector<int32_t>(ta.end() - 3, ta.end()));
    if (c.document_length(d) != len) ++differs;
  }
  CHECK(seen.size() == 50);  // all 50 ids occur among ~36k tokens
  CHECK(differs > 900);
  // Lengths cover their range.
  int64_t lo = 1 << 30, hi = 0;
  for (int64_t d = 0; d < 1000; ++d) {
    lo = std::min(lo, a.document_length(d));
    hi = std::max(hi, a.document_length(d));
  }
  CHECK(lo == 8);
  CHECK(hi == 64);
  CHECK(ptdp::MockTokenSource(1, 1, 10).document_length(0) <= 4);
}

TEST_CASE("gpt dataset: missing files, tokens outside the vocabulary and too small splits are named", "[data]") {
  idx_bytes::TempDir dir("gpt_errors");
  const std::string missing = dir.prefix("nope");
  CHECK_THAT(error_of([&] { ptdp::TextTokenSource(missing + ".txt", 256); }, ptdp::ErrorCode::Io),
             Catch::Contains("nope.txt"));
  CHECK_THAT(error_of([&] { ptdp::IndexedTokenSource(missing, 256); }, ptdp::ErrorCode::Io),
             Catch::Contains("nope"));
  CHECK_THAT(error_of([&] { ptdp::TextTokenSource(dir.path.string(), 256); }, ptdp::ErrorCode::Io),
             Catch::Contains("directory"));

  // Indexed: found when the sample holding the token is read (document 1, position 2: 77).
  const Docs docs{{{1, 2, 3, 4}}, {{5, 6, 77, 8}}, {{9, 10}}};
  const auto src = indexed(dir.prefix("vocab"), docs, 50);
  const GptSplit sp(src, DataSplit::Train, 0, 3, 3, 1, 0);
  std::string all_errors;
  for (int64_t i = 0; i < sp.num_samples(); ++i) {
    try {
      sample(sp, i);
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      all_errors = e.what();
    }
  }
  CHECK_THAT(all_errors, Catch::Contains("vocab.bin") && Catch::Contains("document 1") &&
                             Catch::Contains("position 2") && Catch::Contains("77") && Catch::Contains("50"));

  // Text: checked at open (the 'x' = 120 of document 1, position 3).
  const std::string text = dir.prefix("t.txt");
  write_file(text, "abc\n\nabcx\n");
  CHECK_THAT(error_of([&] { ptdp::TextTokenSource(text, 120); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("t.txt") && Catch::Contains("document 1") && Catch::Contains("position 3") &&
                 Catch::Contains("120"));

  // A split too small for one sample, when samples are wanted from it.
  const auto tiny = indexed(dir.prefix("tiny"), tiny_docs());
  GptDatasetOptions o;
  o.split = "6,1,1";
  o.seq_length = 2;  // valid has 2 tokens, one sample needs 3
  o.num_samples = {1, 1, 1};
  CHECK_THAT(error_of([&] { GptDataset(tiny, o); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("split valid") && Catch::Contains("2 tokens") && Catch::Contains("3 tokens"));
  // Not wanted: simply no samples, and reading them says why.
  o.num_samples = {1, 0, 1};
  const GptDataset ds(tiny, o);
  CHECK(ds.num_samples(DataSplit::Valid) == 0);
  std::vector<int32_t> t(2), l(2);
  CHECK_THAT(error_of([&] { ds.get_batch(DataSplit::Valid, 0, 1, t.data(), l.data()); },
                      ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("split valid has no samples"));
  // An empty split (no documents) that is wanted.
  o.split = "1,0,0";
  o.num_samples = {1, 0, 5};
  CHECK_THAT(error_of([&] { GptDataset(tiny, o); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("split test") && Catch::Contains("0 tokens"));
  o.num_samples = {1, 0, 0};
  CHECK(GptDataset(tiny, o).num_samples(DataSplit::Test) == 0);
  // Bad reads.
  const GptDataset ok(tiny, o);
  CHECK_THAT(error_of([&] { ok.get_batch(DataSplit::Train, -1, 1, t.data(), l.data()); },
                      ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("first"));
  CHECK_THAT(error_of([&] { ok.get_batch(DataSplit::Train, 0, 0, t.data(), l.data()); },
                      ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("count"));
  CHECK_THAT(error_of([&] { ok.split(static_cast<DataSplit>(3)); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("split = 3"));
}

TEST_CASE("gpt dataset: malformed split strings are rejected, quoted", "[data]") {
  for (const char* bad : {"a,b", "-1,2,3", "0,0,0", "1,2,3,4", "", "1,,2", "1,2,", "1;2", "1e3", "+1", "1 2"}) {
    INFO(bad);
    const std::string m = error_of([&] { ptdp::parse_split(bad); }, ptdp::ErrorCode::InvalidArgument);
    CHECK_THAT(m, Catch::Contains(std::string("\"") + bad + "\""));
  }
  CHECK_THAT(error_of([] { ptdp::parse_split("1,2,3,4"); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("more than three"));
  CHECK_THAT(error_of([] { ptdp::parse_split("-1,2,3"); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("negative"));
  CHECK_THAT(error_of([] { ptdp::parse_split("0,0,0"); }, ptdp::ErrorCode::InvalidArgument),
             Catch::Contains("sum to 0"));
}

TEST_CASE("gpt dataset: the Fisher-Yates draw is an exact high 64-bit product", "[data]") {
  const uint64_t cases[][2] = {{0, 5}, {~0ull, ~0ull}, {~0ull, 1}, {0x123456789abcdef0ull, 0xfedcba9876543210ull},
                               {1ull << 63, 3}, {0xffffffffull, 0xffffffffull}};
  for (const auto& c : cases) {
    const auto want = static_cast<uint64_t>((static_cast<unsigned __int128>(c[0]) * c[1]) >> 64);
    CHECK(ptdp::mul_high_u64(c[0], c[1]) == want);
  }
  std::vector<int> v(100);
  std::iota(v.begin(), v.end(), 0);
  ptdp::philox_shuffle(v, ptdp::PhiloxStream{9, 9});
  std::vector<int> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted[99] == 99);
  CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
  CHECK(v != sorted);
}

TEST_CASE("gpt dataset: threads reading one data set at once get the serial batches", "[data]") {
  idx_bytes::TempDir dir("gpt_threads");
  const auto src = indexed(dir.prefix("tiny"), tiny_docs());
  GptDatasetOptions o;
  o.split = "1";
  o.seq_length = 3;
  o.num_samples = {64, 0, 0};
  const GptDataset ds(src, o);
  const std::size_t per = 64 * 3;
  std::vector<int32_t> serial(per), serial_labels(per);
  ds.get_batch(DataSplit::Train, 0, 64, serial.data(), serial_labels.data());
  std::vector<std::vector<int32_t>> got(4, std::vector<int32_t>(per)), got_labels(4, std::vector<int32_t>(per));
  std::vector<std::thread> threads;
  for (std::size_t r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      for (int rep = 0; rep < 20; ++rep) {
        ds.get_batch(DataSplit::Train, 0, 64, got[r].data(), got_labels[r].data());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t r = 0; r < 4; ++r) {
    CHECK(got[r] == serial);
    CHECK(got_labels[r] == serial_labels);
  }
}
