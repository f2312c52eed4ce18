// Tokenizers through the C API: the committed fixtures (tests/data/fixtures, made by
// tokenizer_fixtures.py with Hugging Face tokenizers and sentencepiece) give the reference ids
// of every tokenizer type on a list of texts; Megatron's NullTokenizer semantics; byte-level
// round trips of bytes that are not UTF-8; the count/capacity protocol; every refusal; several
// threads on one handle; the tokenizer a checkpoint was trained with.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "ptdp/ptdp.h"
#include "tests/single_process.h"

namespace {

namespace fs = std::filesystem;

#define OK(call) REQUIRE((call) == PTDP_SUCCESS)

const std::string kFixtures = PTDP_TOKENIZER_FIXTURES;

std::string fixture(const std::string& name) { return kFixtures + "/" + name; }
std::string last_error() { return ptdp_last_error(); }

struct Tok {
  ptdp_tokenizer h = nullptr;
  explicit Tok(ptdp_tokenizer_type type, const char* vocab = nullptr, const char* merges = nullptr,
               const char* model = nullptr, int64_t vocab_size = 0) {
    ptdp_tokenizer_options o;
    OK(ptdp_tokenizer_options_init(&o));
    o.type = type;
    o.vocab_file = vocab;
    o.merge_file = merges;
    o.tokenizer_model = model;
    o.vocab_size = vocab_size;
    const ptdp_status st = ptdp_tokenizer_create(&o, &h);
    INFO(last_error());
    REQUIRE(st == PTDP_SUCCESS);
  }
  explicit Tok(ptdp_tokenizer handle) : h(handle) {}
  ~Tok() { ptdp_tokenizer_destroy(h); }
  Tok(const Tok&) = delete;
  Tok& operator=(const Tok&) = delete;

  std::vector<int32_t> encode(const std::string& text) const {
    std::size_t n = 0;
    ptdp_tokenizer_encode(h, text.data(), text.size(), nullptr, 0, &n);
    std::vector<int32_t> ids(n);
    const ptdp_status st = ptdp_tokenizer_encode(h, text.data(), text.size(), ids.data(), ids.size(), &n);
    INFO(last_error());
    REQUIRE(st == PTDP_SUCCESS);
    REQUIRE(n == ids.size());
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const {
    std::size_t n = 0;
    ptdp_tokenizer_decode(h, ids.data(), ids.size(), nullptr, 0, &n);
    std::string text(n + 1, '\0');
    const ptdp_status st = ptdp_tokenizer_decode(h, ids.data(), ids.size(), text.data(), text.size(), &n);
    INFO(last_error());
    REQUIRE(st == PTDP_SUCCESS);
    text.resize(n);
    return text;
  }
  int64_t vocab_size() const {
    int64_t v = 0;
    OK(ptdp_tokenizer_vocab_size(h, &v));
    return v;
  }
  int32_t eod() const {
    int32_t v = 0;
    OK(ptdp_tokenizer_eod(h, &v));
    return v;
  }
  int32_t bos() const {
    int32_t v = 0;
    OK(ptdp_tokenizer_bos(h, &v));
    return v;
  }
  int32_t id(const std::string& token) const {
    int32_t v = 0;
    OK(ptdp_tokenizer_token_to_id(h, token.data(), token.size(), &v));
    return v;
  }
  std::string token(int32_t id) const {
    char buf[256];
    std::size_t n = 0;
    OK(ptdp_tokenizer_id_to_token(h, id, buf, sizeof buf, &n));
    return std::string(buf, n);
  }
};

nlohmann::json expected() {
  std::ifstream in(fixture("tokenizer_expected.json"));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

// Every text of the fixture: the reference's ids, its decoded text, vocabulary size, eod, bos.
void check_fixture(const Tok& tok, const nlohmann::json& e) {
  CHECK(tok.vocab_size() == e.at("vocab_size").get<int64_t>());
  CHECK(tok.eod() == e.at("eod").get<int32_t>());
  CHECK(tok.bos() == e.at("bos").get<int32_t>());
  for (const auto& c : e.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    INFO("text: " << text);
    const std::vector<int32_t> ids = tok.encode(text);
    CHECK(ids == c.at("ids").get<std::vector<int32_t>>());
    CHECK(tok.decode(ids) == c.at("decoded").get<std::string>());
  }
}

}  // namespace

TEST_CASE("GPT2BPETokenizer gives the reference ids of vocab.json + merges.txt", "[tokenizer][data]") {
  const std::string vocab = fixture("tokenizer_gpt2_vocab.json"), merges = fixture("tokenizer_gpt2_merges.txt");
  Tok tok(PTDP_TOKENIZER_GPT2_BPE, vocab.c_str(), merges.c_str());
  check_fixture(tok, expected().at("gpt2"));
  ptdp_tokenizer_type type;
  OK(ptdp_tokenizer_get_type(tok.h, &type));
  CHECK(type == PTDP_TOKENIZER_GPT2_BPE);
  // Megatron's GPT2BPETokenizer has no special tokens: "<|endoftext|>" in the text is text.
  const std::vector<int32_t> ids = tok.encode("a<|endoftext|>");
  CHECK(std::find(ids.begin(), ids.end(), tok.eod()) == ids.end());
  CHECK(tok.id("<|endoftext|>") == tok.eod());
  // Vocabulary entries are spelled with GPT-2's byte characters: "Ġ" is the space.
  CHECK(tok.token(tok.id("\xC4\xA0")) == "\xC4\xA0");
  CHECK(tok.decode({tok.id("\xC4\xA0")}) == " ");
  CHECK(tok.id("not a token") == -1);
}

TEST_CASE("byte-level BPE gives back any bytes UTF-8 or not", "[tokenizer][data]") {
  const std::string vocab = fixture("tokenizer_gpt2_vocab.json"), merges = fixture("tokenizer_gpt2_merges.txt");
  const std::string model = fixture("tokenizer_llama3.json");
  Tok gpt2(PTDP_TOKENIZER_GPT2_BPE, vocab.c_str(), merges.c_str());
  Tok llama(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, model.c_str());
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (const std::string& s : {std::string("\xff"), std::string("abc\xff\xfe def"), std::string("\xc3\x28 \xe2\x82"),
                               std::string("caf\xe9 \xed\xa0\x80 \xc0\xaf"), std::string("nul\0byte", 8), all_bytes,
                               all_bytes + all_bytes}) {
    INFO("bytes of size " << s.size());
    for (const Tok* t : {&gpt2, &llama}) {
      const std::vector<int32_t> ids = t->encode(s);
      CHECK(t->decode(ids) == s);
    }
  }
  // An invalid byte between words is its own piece: it does not change how the words encode.
  CHECK(gpt2.encode("the\xff the") == [&] {
    std::vector<int32_t> v = gpt2.encode("the");
    const std::vector<int32_t> mid = gpt2.encode("\xff");
    const std::vector<int32_t> end = gpt2.encode(" the");
    v.insert(v.end(), mid.begin(), mid.end());
    v.insert(v.end(), end.begin(), end.end());
    return v;
  }());
}

TEST_CASE("HuggingFaceTokenizer gives the reference ids of Llama 3 and Qwen2 shaped files", "[tokenizer][data]") {
  const nlohmann::json e = expected();
  const std::string llama = fixture("tokenizer_llama3.json"), qwen = fixture("tokenizer_qwen2.json");
  Tok l(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, llama.c_str());
  check_fixture(l, e.at("llama3"));
  Tok q(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, qwen.c_str());
  check_fixture(q, e.at("qwen2"));
  // Special tokens are matched inside words and keep their ids.
  const std::vector<int32_t> ids = l.encode("x<|eot_id|>y");
  REQUIRE(ids.size() == 3);
  CHECK(ids[1] == l.id("<|eot_id|>"));
  CHECK(l.token(ids[1]) == "<|eot_id|>");
}

TEST_CASE("tokenizer_config.json beside tokenizer.json names the end of document", "[tokenizer][data]") {
  const fs::path dir = fs::temp_directory_path() / ("ptdp-tok-config-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fixture("tokenizer_llama3.json"), dir / "tokenizer.json");
  const std::string path = (dir / "tokenizer.json").string();
  {
    Tok plain(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, path.c_str());
    CHECK(plain.eod() == plain.id("<|end_of_text|>"));  // no config: the usual names
    CHECK(plain.bos() == plain.id("<|begin_of_text|>"));
  }
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": "<|eot_id|>", "bos_token": {"content": "<|begin_of_text|>", "special": true}})";
  {
    Tok configured(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, path.c_str());
    CHECK(configured.eod() == configured.id("<|eot_id|>"));
    CHECK(configured.bos() == configured.id("<|begin_of_text|>"));
  }
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": "<|no such token|>", "bos_token": null})";
  ptdp_tokenizer_options o;
  OK(ptdp_tokenizer_options_init(&o));
  o.type = PTDP_TOKENIZER_HUGGING_FACE;
  o.tokenizer_model = path.c_str();
  ptdp_tokenizer h = nullptr;
  CHECK(ptdp_tokenizer_create(&o, &h) == PTDP_ERR_IO);
  CHECK_THAT(last_error(), Catch::Contains("tokenizer_config.json: eos_token '<|no such token|>' is not a token"));
  fs::remove_all(dir);
}

TEST_CASE("SentencePieceTokenizer gives Megatron's ids over libsentencepiece", "[tokenizer][data]") {
  const std::string model = fixture("tokenizer_sp_bpe.model");
  Tok tok(PTDP_TOKENIZER_SENTENCE_PIECE, nullptr, nullptr, model.c_str());
  const nlohmann::json e = expected().at("sp_bpe");
  check_fixture(tok, e);
  // Megatron adds <CLS>, <SEP>, <EOD>, <MASK> and <PAD> after the model's pieces.
  const int64_t pieces = tok.vocab_size() - 5;
  CHECK(tok.id("<CLS>") == pieces);
  CHECK(tok.id("<EOD>") == pieces + 2);
  CHECK(tok.eod() == pieces + 2);
  CHECK(tok.id("<PAD>") == pieces + 4);
  CHECK(tok.token(1) == "<s>");
  CHECK(tok.encode("a<EOD>b")[1] == tok.eod());
  CHECK(tok.decode({tok.eod()}) == " <EOD> ");
}

TEST_CASE("NullTokenizer is Megatron's: the text is the ids and eod is vocab_size", "[tokenizer][data]") {
  Tok tok(PTDP_TOKENIZER_NULL, nullptr, nullptr, nullptr, 100);
  CHECK(tok.vocab_size() == 101);
  CHECK(tok.eod() == 100);
  CHECK(tok.bos() == -1);
  CHECK(tok.encode("1 2 3") == std::vector<int32_t>{1, 2, 3});
  CHECK(tok.encode("7") == std::vector<int32_t>{7});
  CHECK(tok.encode("") == std::vector<int32_t>{});
  CHECK(tok.encode("99 100\n") == std::vector<int32_t>{99, 100});  // int() ignores surrounding whitespace
  CHECK(tok.encode("+5 0_1 007") == std::vector<int32_t>{5, 1, 7});
  CHECK(tok.decode({1, 2, 100}) == "1 2 100");
  CHECK(tok.id("42") == 42);
  CHECK(tok.token(42) == "42");
  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"1  2", "'' at byte 2"}, {"1 x", "'x' at byte 2"}, {"3 101", "101 at byte 2"}, {"-1", "-1 at byte 0"},
           {"1_", "'1_' at byte 0"}, {" 1", "'' at byte 0"}}) {
    std::size_t n = 99;
    int32_t out[8];
    INFO(text);
    CHECK(ptdp_tokenizer_encode(tok.h, text.data(), text.size(), out, 8, &n) == PTDP_ERR_INVALID_ARGUMENT);
    CHECK(n == 0);
    CHECK_THAT(last_error(), Catch::Contains(where));
  }
  int32_t bad[] = {1, 101};
  std::size_t len = 0;
  char buf[16];
  CHECK(ptdp_tokenizer_decode(tok.h, bad, 2, buf, sizeof buf, &len) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("id 101 at position 1"));
}

TEST_CASE("ByteLevel: one token per byte", "[tokenizer][data]") {
  Tok tok(PTDP_TOKENIZER_BYTE_LEVEL);
  CHECK(tok.vocab_size() == 256);
  CHECK(tok.eod() == -1);
  const std::string s("a\0\xff", 3);
  CHECK(tok.encode(s) == std::vector<int32_t>{97, 0, 255});
  CHECK(tok.decode({97, 0, 255}) == s);
  CHECK(tok.id("a") == 97);
  CHECK(tok.id("ab") == -1);
}

TEST_CASE("the count/capacity protocol of encode and decode and id_to_token", "[tokenizer][data][capi]") {
  Tok tok(PTDP_TOKENIZER_BYTE_LEVEL);
  int32_t ids[4] = {-7, -7, -7, -7};
  std::size_t n = 0;
  CHECK(ptdp_tokenizer_encode(tok.h, "hello", 5, ids, 4, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(n == 5);
  CHECK(ids[0] == -7);  // nothing written
  CHECK_THAT(last_error(), Catch::Contains("capacity = 4"));
  OK(ptdp_tokenizer_encode(tok.h, "hell", 4, ids, 4, &n));
  CHECK(n == 4);
  CHECK(ids[3] == 'l');
  OK(ptdp_tokenizer_encode(tok.h, nullptr, 0, nullptr, 0, &n));
  CHECK(n == 0);
  char text[4] = "xyz";
  std::size_t len = 0;
  CHECK(ptdp_tokenizer_decode(tok.h, ids, 4, text, 4, &len) == PTDP_ERR_INVALID_ARGUMENT);  // no room for the NUL
  CHECK(len == 4);
  CHECK(std::string(text) == "xyz");
  char big[5];
  OK(ptdp_tokenizer_decode(tok.h, ids, 4, big, 5, &len));
  CHECK(std::string(big) == "hell");
  CHECK(ptdp_tokenizer_id_to_token(tok.h, 256, big, 5, &len) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("256"));
}

TEST_CASE("bad arguments and bad files are refused naming what is wrong", "[tokenizer][data][capi]") {
  ptdp_tokenizer h = nullptr;
  ptdp_tokenizer_options o;
  OK(ptdp_tokenizer_options_init(&o));
  CHECK(ptdp_tokenizer_options_init(nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_tokenizer_create(nullptr, &h) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_tokenizer_create(&o, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  const auto refused = [&](ptdp_tokenizer_options opts, ptdp_status want, const std::string& words) {
    h = nullptr;
    CHECK(ptdp_tokenizer_create(&opts, &h) == want);
    CHECK(h == nullptr);
    CHECK_THAT(last_error(), Catch::Contains(words));
  };
  ptdp_tokenizer_options x = o;
  x.struct_size = 0;
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "struct_size");
  x = o;
  x.type = static_cast<ptdp_tokenizer_type>(9);
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "options->type = 9");
  x = o;
  x.type = PTDP_TOKENIZER_GPT2_BPE;
  const std::string vocab = fixture("tokenizer_gpt2_vocab.json");
  x.vocab_file = vocab.c_str();
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "options->merge_file is NULL or empty");
  x.merge_file = "/nonexistent/merges.txt";
  refused(x, PTDP_ERR_IO, "/nonexistent/merges.txt");
  x = o;
  x.type = PTDP_TOKENIZER_NULL;
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "options->vocab_size = 0");
  x.vocab_size = 10;
  x.tokenizer_model = "t.json";
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "--tokenizer-model t.json means nothing to --tokenizer-type NullTokenizer");
  x = o;
  x.type = PTDP_TOKENIZER_SENTENCE_PIECE;
  refused(x, PTDP_ERR_INVALID_ARGUMENT, "needs --tokenizer-model");
  x.tokenizer_model = vocab.c_str();  // not a .model
  refused(x, PTDP_ERR_IO, vocab);

  // tokenizer.json files ptdp does not read, or that are broken.
  const fs::path dir = fs::temp_directory_path() / ("ptdp-tok-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto file = [&](const std::string& name, const std::string& body) {
    std::ofstream(dir / name) << body;
    return (dir / name).string();
  };
  const std::string bpe = R"("model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";
  const std::vector<std::tuple<std::string, ptdp_status, std::string>> files = {
      {"{", PTDP_ERR_IO, "is not JSON"},
      {R"({"model": {"type": "WordPiece", "vocab": {}}})", PTDP_ERR_INVALID_ARGUMENT, "'WordPiece' is not supported"},
      {R"({"model": {"type": "Unigram", "vocab": []}})", PTDP_ERR_INVALID_ARGUMENT, "'Unigram' is not supported"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", PTDP_ERR_IO, "'b' is not in the vocabulary"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})", PTDP_ERR_IO, "model.merges[0]"},
      {R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []}})", PTDP_ERR_INVALID_ARGUMENT,
       "dropout"},
      {"{" + bpe + R"(, "normalizer": {"type": "BertNormalizer"}})", PTDP_ERR_INVALID_ARGUMENT,
       "normalizer: the normalizer type 'BertNormalizer' is not supported"},
      {"{" + bpe + R"(, "pre_tokenizer": {"type": "Metaspace"}})", PTDP_ERR_INVALID_ARGUMENT,
       "pre_tokenizer: the pre_tokenizer type 'Metaspace' is not supported"},
      {"{" + bpe + R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated",
          "invert": false}})",
       PTDP_ERR_INVALID_ARGUMENT, "does not compile"},
      {"{" + bpe + R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "ByteLevel"},
          {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false}]}})",
       PTDP_ERR_INVALID_ARGUMENT, "ByteLevel must come last"},
      {"{" + bpe + R"(, "decoder": {"type": "WordPiece"}})", PTDP_ERR_INVALID_ARGUMENT, "'WordPiece' is not supported"},
  };
  int i = 0;
  for (const auto& [body, status, words] : files) {
    std::string name = "t";  // built piecewise: GCC 12 warns falsely on "t" + std::string + ".json"
    name += std::to_string(i++);
    name += ".json";
    const std::string path = file(name, body);
    INFO(body);
    x = o;
    x.type = PTDP_TOKENIZER_HUGGING_FACE;
    x.tokenizer_model = path.c_str();
    refused(x, status, words);
  }
  // A minimal BPE file without pre-tokenizer or decoder works: "ab" merges, tokens join with spaces.
  const std::string ok = file("ok.json", "{" + bpe + "}");
  Tok t(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, ok.c_str());
  CHECK(t.encode("abab") == std::vector<int32_t>{2, 2});
  CHECK(t.encode("bac") == std::vector<int32_t>{1, 0});  // 'c' is not in the vocabulary and there is no unk
  CHECK(t.decode({2, 0}) == "ab a");
  fs::remove_all(dir);

  // Dead and NULL handles.
  std::size_t n = 0;
  int64_t v = 0;
  CHECK(ptdp_tokenizer_encode(nullptr, "a", 1, nullptr, 0, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_tokenizer_vocab_size(nullptr, &v) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("tokenizer is NULL"));
  OK(ptdp_tokenizer_destroy(nullptr));
  Tok b(PTDP_TOKENIZER_BYTE_LEVEL);
  CHECK(ptdp_tokenizer_encode(b.h, nullptr, 3, nullptr, 0, &n) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK_THAT(last_error(), Catch::Contains("text is NULL but length = 3"));
  CHECK(ptdp_tokenizer_encode(b.h, "a", 1, nullptr, 0, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(ptdp_tokenizer_vocab_size(b.h, nullptr) == PTDP_ERR_INVALID_ARGUMENT);
}

TEST_CASE("one tokenizer encodes from several threads at once", "[tokenizer][data]") {
  const std::string model = fixture("tokenizer_qwen2.json");
  Tok tok(PTDP_TOKENIZER_HUGGING_FACE, nullptr, nullptr, model.c_str());
  std::string text;
  for (int i = 0; i < 200; ++i) text += "The program's " + std::to_string(i * 7919) + " caf\u00e9s <|im_end|> \u65e5\u672c\n";
  const std::vector<int32_t> want = tok.encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 5; ++r) {
        std::size_t n = 0;
        std::vector<int32_t> ids(want.size());
        if (ptdp_tokenizer_encode(tok.h, text.data(), text.size(), ids.data(), ids.size(), &n) == PTDP_SUCCESS) {
          got[t] = ids;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) CHECK(g == want);
}

TEST_CASE("the tokenizer a checkpoint was trained with", "[tokenizer][data][checkpoint]") {
  const fs::path dir = fs::temp_directory_path() / ("ptdp-tok-ckpt-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string vocab = fixture("tokenizer_gpt2_vocab.json"), merges = fixture("tokenizer_gpt2_merges.txt");
  sp::World w;
  const auto save = [&](std::vector<const char*> args) {
    ptdp_train_config cfg = nullptr;
    const ptdp_status st = ptdp_train_config_parse(static_cast<int32_t>(args.size()), args.data(), &cfg);
    INFO(last_error());
    REQUIRE(st == PTDP_SUCCESS);
    ptdp_gpt_options g;
    OK(ptdp_train_config_gpt_options(cfg, &g));
    ptdp_model m = nullptr;
    OK(ptdp_model_create(w.groups, &g, &m));
    ptdp_checkpoint_state s;
    OK(ptdp_checkpoint_state_init(&s));
    fs::remove_all(dir);
    OK(ptdp_checkpoint_save(dir.string().c_str(), m, nullptr, cfg, &s));
    OK(ptdp_model_destroy(m));
    OK(ptdp_train_config_destroy(cfg));
  };
  // GPT2BPETokenizer: the files are recorded, and --vocab-size is the tokenizer's.
  save({"ptdp-train", "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "4",
        "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab.c_str(), "--merge-file", merges.c_str(),
        "--mock-data"});
  ptdp_tokenizer h = nullptr;
  OK(ptdp_tokenizer_create_from_checkpoint(dir.string().c_str(), &h));
  {
    Tok t(h);
    Tok ref(PTDP_TOKENIZER_GPT2_BPE, vocab.c_str(), merges.c_str());
    CHECK(t.encode("the program") == ref.encode("the program"));
    ptdp_gpt_options g;
    OK(ptdp_checkpoint_read_options(dir.string().c_str(), &g, nullptr));
    CHECK(g.vocab_size == ref.vocab_size());
  }
  // --text-file without a tokenizer type: bytes.
  const fs::path text = dir.string() + "-corpus.txt";
  std::ofstream(text) << "some text\n";
  save({"ptdp-train", "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "4", "--text-file",
        text.c_str()});
  OK(ptdp_tokenizer_create_from_checkpoint(dir.string().c_str(), &h));
  {
    Tok t(h);
    ptdp_tokenizer_type type;
    OK(ptdp_tokenizer_get_type(t.h, &type));
    CHECK(type == PTDP_TOKENIZER_BYTE_LEVEL);
  }
  // Mock data and no tokenizer: nothing says how text becomes ids.
  save({"ptdp-train", "--num-layers", "1", "--hidden-size", "16", "--num-attention-heads", "2", "--seq-length", "4"});
  h = nullptr;
  CHECK(ptdp_tokenizer_create_from_checkpoint(dir.string().c_str(), &h) == PTDP_ERR_INVALID_ARGUMENT);
  CHECK(h == nullptr);
  CHECK_THAT(last_error(), Catch::Contains("records no --tokenizer-type"));
  CHECK(ptdp_tokenizer_create_from_checkpoint((dir / "missing").string().c_str(), &h) == PTDP_ERR_IO);
  CHECK_THAT(last_error(), Catch::Contains("latest_checkpointed_iteration.txt"));
  fs::remove_all(dir);
  fs::remove(text);
}
