// Bad-input rows: indexed data sets, tokenizers, GPT samples, preprocessing and merging.
#include "bad_input_table.h"

using bad::handle_rows;
using bad::null_row;
using bad::options_rows;
using bad::Row;

PTDP_BAD_INPUTS(dataset) {
  std::vector<Row> r;
  const char* op = "ptdp_dataset_open";
  r.push_back(null_row(op, "prefix", [&] { return ptdp_dataset_open(nullptr, &o.dataset); }));
  r.push_back(null_row(op, "out", [&] { return ptdp_dataset_open(f.dataset_prefix.c_str(), nullptr); }));
  r.push_back({op, "empty prefix", [&] { return ptdp_dataset_open("", &o.dataset); }, PTDP_ERR_INVALID_ARGUMENT,
               {"prefix is empty"}});
  r.push_back({op, "missing files", [&] {
                 const std::string p = f.dir + "/none";
                 return ptdp_dataset_open(p.c_str(), &o.dataset);
               }, PTDP_ERR_IO, {"none.idx"}});
  r.push_back({"ptdp_dataset_destroy", "destroyed", [&] { return ptdp_dataset_destroy(f.dead_dataset); },
               PTDP_ERR_INVALID_ARGUMENT, {"dataset is not a live ptdp_dataset"}});
  handle_rows(r, "ptdp_dataset_num_sequences", "dataset", "ptdp_dataset", f.dead_dataset,
              [&](ptdp_dataset d) { return ptdp_dataset_num_sequences(d, &o.i64[0]); });
  r.push_back(null_row("ptdp_dataset_num_sequences", "count", [&] { return ptdp_dataset_num_sequences(f.dataset, nullptr); }));
  handle_rows(r, "ptdp_dataset_num_documents", "dataset", "ptdp_dataset", f.dead_dataset,
              [&](ptdp_dataset d) { return ptdp_dataset_num_documents(d, &o.i64[0]); });
  r.push_back(null_row("ptdp_dataset_num_documents", "count", [&] { return ptdp_dataset_num_documents(f.dataset, nullptr); }));
  const char* dd = "ptdp_dataset_document";
  // Documented exception to "no side effects": count is always written, 0 on a bad argument. It
  // is checked here instead of being a sentinel slot (a count left alone gives PTDP_ERR_INTERNAL).
  const auto document = [](ptdp_dataset d, int64_t index, int32_t* tokens, int64_t capacity) {
    int64_t count = -1;
    const ptdp_status st = ptdp_dataset_document(d, index, tokens, capacity, &count);
    return count == 0 ? st : PTDP_ERR_INTERNAL;
  };
  handle_rows(r, dd, "dataset", "ptdp_dataset", f.dead_dataset,
              [&, document](ptdp_dataset d) { return document(d, 0, o.ids, 64); });
  r.push_back({dd, "negative index", [&, document] { return document(f.dataset, -1, o.ids, 64); },
               PTDP_ERR_INVALID_ARGUMENT, {"index = -1"}});
  r.push_back({dd, "index past the end", [&, document] { return document(f.dataset, 2, o.ids, 64); },
               PTDP_ERR_INVALID_ARGUMENT, {"index = 2"}});
  r.push_back({dd, "negative capacity", [&, document] { return document(f.dataset, 0, o.ids, -1); },
               PTDP_ERR_INVALID_ARGUMENT, {"capacity = -1"}});
  r.push_back(null_row(dd, "count", [&] { return ptdp_dataset_document(f.dataset, 0, o.ids, 64, nullptr); }));
  return r;
}

PTDP_BAD_INPUTS(tokenizer) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_tokenizer_options_init", "options", [] { return ptdp_tokenizer_options_init(nullptr); }));
  const char* tc = "ptdp_tokenizer_create";
  r.push_back(null_row(tc, "options", [&] { return ptdp_tokenizer_create(nullptr, &o.tokenizer); }));
  r.push_back(null_row(tc, "out", [] {
    ptdp_tokenizer_options x;
    ptdp_tokenizer_options_init(&x);
    return ptdp_tokenizer_create(&x, nullptr);
  }));
  options_rows(r, tc, "options", ptdp_tokenizer_options_init,
               [&](const ptdp_tokenizer_options* x) { return ptdp_tokenizer_create(x, &o.tokenizer); });
  r.push_back(bad::field_row<ptdp_tokenizer_options>(
      tc, "type out of range", ptdp_tokenizer_options_init,
      [](ptdp_tokenizer_options& x) { x.type = static_cast<ptdp_tokenizer_type>(99); },
      [&](const ptdp_tokenizer_options* x) { return ptdp_tokenizer_create(x, &o.tokenizer); }, {"options->type = 99"}));
  r.push_back(bad::field_row<ptdp_tokenizer_options>(
      tc, "GPT-2 BPE without files", ptdp_tokenizer_options_init,
      [](ptdp_tokenizer_options& x) { x.type = PTDP_TOKENIZER_GPT2_BPE; },
      [&](const ptdp_tokenizer_options* x) { return ptdp_tokenizer_create(x, &o.tokenizer); }, {"options->vocab_file is NULL"}));
  r.push_back(bad::field_row<ptdp_tokenizer_options>(
      tc, "negative vocab_size", ptdp_tokenizer_options_init,
      [](ptdp_tokenizer_options& x) {
        x.type = PTDP_TOKENIZER_NULL;
        x.vocab_size = -5;
      },
      [&](const ptdp_tokenizer_options* x) { return ptdp_tokenizer_create(x, &o.tokenizer); }, {"options->vocab_size = -5"}));
  const char* cf = "ptdp_tokenizer_create_from_checkpoint";
  r.push_back(null_row(cf, "directory", [&] { return ptdp_tokenizer_create_from_checkpoint(nullptr, &o.tokenizer); }));
  r.push_back(null_row(cf, "out", [&] { return ptdp_tokenizer_create_from_checkpoint(f.dir.c_str(), nullptr); }));
  r.push_back({cf, "empty directory name", [&] { return ptdp_tokenizer_create_from_checkpoint("", &o.tokenizer); },
               PTDP_ERR_INVALID_ARGUMENT, {"directory is empty"}});
  r.push_back({cf, "missing directory", [&] {
                 const std::string p = f.dir + "/no-ckpt";
                 return ptdp_tokenizer_create_from_checkpoint(p.c_str(), &o.tokenizer);
               }, PTDP_ERR_IO, {"no-ckpt"}});
  r.push_back({"ptdp_tokenizer_destroy", "destroyed", [&] { return ptdp_tokenizer_destroy(f.dead_tokenizer); },
               PTDP_ERR_INVALID_ARGUMENT, {"tokenizer is not a live ptdp_tokenizer"}});
  handle_rows(r, "ptdp_tokenizer_get_type", "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_get_type(t, &o.tokenizer_type); });
  r.push_back(null_row("ptdp_tokenizer_get_type", "type", [&] { return ptdp_tokenizer_get_type(f.tokenizer, nullptr); }));
  const char* en = "ptdp_tokenizer_encode";
  // Documented exception: count is always written, 0 on a bad argument (checked, not a sentinel).
  const auto encode = [](ptdp_tokenizer t, const char* text, size_t length, int32_t* ids, size_t capacity) {
    size_t count = 99;
    const ptdp_status st = ptdp_tokenizer_encode(t, text, length, ids, capacity, &count);
    return count == 0 ? st : PTDP_ERR_INTERNAL;
  };
  handle_rows(r, en, "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&, encode](ptdp_tokenizer t) { return encode(t, "ab", 2, o.ids, 64); });
  r.push_back({en, "text NULL with a length", [&, encode] { return encode(f.tokenizer, nullptr, 2, o.ids, 64); },
               PTDP_ERR_INVALID_ARGUMENT, {"text is NULL"}});
  r.push_back(null_row(en, "count", [&] { return ptdp_tokenizer_encode(f.tokenizer, "ab", 2, o.ids, 64, nullptr); }));
  r.push_back({en, "ids NULL with a capacity", [&, encode] { return encode(f.tokenizer, "ab", 2, nullptr, 64); },
               PTDP_ERR_INVALID_ARGUMENT, {"ids is NULL"}});
  const char* de = "ptdp_tokenizer_decode";
  handle_rows(r, de, "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_decode(t, f.tokens.data(), 2, o.text, 64, &o.sz[0]); });
  r.push_back({de, "ids NULL with a count", [&] { return ptdp_tokenizer_decode(f.tokenizer, nullptr, 2, o.text, 64, &o.sz[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"ids is NULL"}});
  r.push_back(null_row(de, "length", [&] { return ptdp_tokenizer_decode(f.tokenizer, f.tokens.data(), 2, o.text, 64, nullptr); }));
  r.push_back({de, "id out of range", [&] {
                 static const int32_t ids[1] = {-7};
                 return ptdp_tokenizer_decode(f.tokenizer, ids, 1, o.text, 64, &o.sz[0]);
               }, PTDP_ERR_INVALID_ARGUMENT, {"-7"}});
  handle_rows(r, "ptdp_tokenizer_vocab_size", "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_vocab_size(t, &o.i64[0]); });
  r.push_back(null_row("ptdp_tokenizer_vocab_size", "size", [&] { return ptdp_tokenizer_vocab_size(f.tokenizer, nullptr); }));
  handle_rows(r, "ptdp_tokenizer_eod", "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_eod(t, &o.i32[0]); });
  r.push_back(null_row("ptdp_tokenizer_eod", "id", [&] { return ptdp_tokenizer_eod(f.tokenizer, nullptr); }));
  handle_rows(r, "ptdp_tokenizer_bos", "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_bos(t, &o.i32[0]); });
  r.push_back(null_row("ptdp_tokenizer_bos", "id", [&] { return ptdp_tokenizer_bos(f.tokenizer, nullptr); }));
  const char* ti = "ptdp_tokenizer_token_to_id";
  handle_rows(r, ti, "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_token_to_id(t, "a", 1, &o.i32[0]); });
  r.push_back({ti, "token NULL with a length", [&] { return ptdp_tokenizer_token_to_id(f.tokenizer, nullptr, 1, &o.i32[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"token is NULL"}});
  r.push_back(null_row(ti, "id", [&] { return ptdp_tokenizer_token_to_id(f.tokenizer, "a", 1, nullptr); }));
  const char* it = "ptdp_tokenizer_id_to_token";
  handle_rows(r, it, "tokenizer", "ptdp_tokenizer", f.dead_tokenizer,
              [&](ptdp_tokenizer t) { return ptdp_tokenizer_id_to_token(t, 65, o.text, 64, &o.sz[0]); });
  r.push_back({it, "negative id", [&] { return ptdp_tokenizer_id_to_token(f.tokenizer, -1, o.text, 64, &o.sz[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"id -1"}});
  r.push_back(null_row(it, "length", [&] { return ptdp_tokenizer_id_to_token(f.tokenizer, 65, o.text, 64, nullptr); }));
  return r;
}

PTDP_BAD_INPUTS(gpt_data) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_gpt_data_options_init", "options", [] { return ptdp_gpt_data_options_init(nullptr); }));
  const char* dc = "ptdp_gpt_data_create";
  r.push_back(null_row(dc, "out", [] { return ptdp_gpt_data_create(nullptr, nullptr); }));
  options_rows(r, dc, "options", ptdp_gpt_data_options_init,
               [&](const ptdp_gpt_data_options* x) { return ptdp_gpt_data_create(x, &o.data); });
  auto field = [&](const std::string& what, std::function<void(ptdp_gpt_data_options&)> edit, std::vector<std::string> m,
                   ptdp_status st = PTDP_ERR_INVALID_ARGUMENT) {
    r.push_back(bad::field_row<ptdp_gpt_data_options>(
        dc, what, ptdp_gpt_data_options_init, std::move(edit),
        [&](const ptdp_gpt_data_options* x) { return ptdp_gpt_data_create(x, &o.data); }, std::move(m), st));
  };
  field("source out of range", [](ptdp_gpt_data_options& x) { x.source = static_cast<ptdp_data_source>(9); }, {"options->source = 9"});
  field("seq_length 0", [](ptdp_gpt_data_options& x) { x.seq_length = 0; }, {"options->seq_length = 0"});
  field("negative vocab_size", [](ptdp_gpt_data_options& x) { x.vocab_size = -1; }, {"options->vocab_size = -1"});
  field("negative num_samples", [](ptdp_gpt_data_options& x) { x.num_samples[1] = -3; }, {"options->num_samples[1] = -3"});
  field("indexed without a path", [](ptdp_gpt_data_options& x) { x.source = PTDP_DATA_INDEXED; }, {"options->path is NULL"});
  field("empty path", [](ptdp_gpt_data_options& x) {
    x.source = PTDP_DATA_INDEXED;
    x.path = "";
  }, {"options->path is empty"});
  r.push_back({"ptdp_gpt_data_destroy", "destroyed", [&] { return ptdp_gpt_data_destroy(f.dead_data); },
               PTDP_ERR_INVALID_ARGUMENT, {"data is not a live ptdp_gpt_data"}});
  const char* ns = "ptdp_gpt_data_num_samples";
  handle_rows(r, ns, "data", "ptdp_gpt_data", f.dead_data,
              [&](ptdp_gpt_data d) { return ptdp_gpt_data_num_samples(d, PTDP_SPLIT_TRAIN, &o.i64[0]); });
  r.push_back({ns, "split out of range",
               [&] { return ptdp_gpt_data_num_samples(f.data, static_cast<ptdp_data_split>(9), &o.i64[0]); },
               PTDP_ERR_INVALID_ARGUMENT, {"split = 9"}});
  r.push_back(null_row(ns, "count", [&] { return ptdp_gpt_data_num_samples(f.data, PTDP_SPLIT_TRAIN, nullptr); }));
  const char* db = "ptdp_gpt_data_batch";
  handle_rows(r, db, "data", "ptdp_gpt_data", f.dead_data,
              [&](ptdp_gpt_data d) { return ptdp_gpt_data_batch(d, PTDP_SPLIT_TRAIN, 0, 1, o.ids, o.ids + 32); });
  r.push_back({db, "split out of range",
               [&] { return ptdp_gpt_data_batch(f.data, static_cast<ptdp_data_split>(-1), 0, 1, o.ids, o.ids + 32); },
               PTDP_ERR_INVALID_ARGUMENT, {"split = -1"}});
  r.push_back({db, "negative first", [&] { return ptdp_gpt_data_batch(f.data, PTDP_SPLIT_TRAIN, -1, 1, o.ids, o.ids + 32); },
               PTDP_ERR_INVALID_ARGUMENT, {"first = -1"}});
  r.push_back({db, "count 0", [&] { return ptdp_gpt_data_batch(f.data, PTDP_SPLIT_TRAIN, 0, 0, o.ids, o.ids + 32); },
               PTDP_ERR_INVALID_ARGUMENT, {"count = 0"}});
  r.push_back(null_row(db, "tokens", [&] { return ptdp_gpt_data_batch(f.data, PTDP_SPLIT_TRAIN, 0, 1, nullptr, o.ids + 32); }));
  r.push_back(null_row(db, "labels", [&] { return ptdp_gpt_data_batch(f.data, PTDP_SPLIT_TRAIN, 0, 1, o.ids, nullptr); }));
  r.push_back({db, "first + count past the end", [&] {
                 return ptdp_gpt_data_batch(f.data, PTDP_SPLIT_TRAIN, INT64_MAX, 1, o.ids, o.ids + 32);
               }, PTDP_ERR_INVALID_ARGUMENT, {"first"}});
  return r;
}

PTDP_BAD_INPUTS(preprocess) {
  std::vector<Row> r;
  r.push_back(null_row("ptdp_preprocess_options_init", "options", [] { return ptdp_preprocess_options_init(nullptr); }));
  const char* pp = "ptdp_preprocess";
  r.push_back(null_row(pp, "options", [&] { return ptdp_preprocess(nullptr, &o.preprocess); }));
  options_rows(r, pp, "options", ptdp_preprocess_options_init,
               [&](const ptdp_preprocess_options* x) { return ptdp_preprocess(x, &o.preprocess); });
  auto field = [&](const std::string& what, std::function<void(ptdp_preprocess_options&)> edit, std::vector<std::string> m) {
    r.push_back(bad::field_row<ptdp_preprocess_options>(
        pp, what, ptdp_preprocess_options_init, std::move(edit),
        [&](const ptdp_preprocess_options* x) { return ptdp_preprocess(x, &o.preprocess); }, std::move(m)));
  };
  field("num_inputs 0", [](ptdp_preprocess_options& x) { x.num_inputs = 0; }, {"options->num_inputs = 0"});
  field("inputs NULL", [](ptdp_preprocess_options& x) {
    x.num_inputs = 1;
    x.output_prefix = "/nonexistent/out";
  }, {"options->inputs is NULL"});
  field("negative workers", [](ptdp_preprocess_options& x) {
    static const char* in[1] = {"/nonexistent/in.jsonl"};
    x.inputs = in;
    x.num_inputs = 1;
    x.output_prefix = "/nonexistent/out";
    x.workers = -1;
  }, {"options->workers = -1"});
  field("negative num_json_keys", [](ptdp_preprocess_options& x) {
    static const char* in[1] = {"/nonexistent/in.jsonl"};
    x.inputs = in;
    x.num_inputs = 1;
    x.num_json_keys = -2;
  }, {"options->num_json_keys = -2"});
  r.push_back({pp, "result->struct_size 0", [&] {
                 ptdp_preprocess_options x;
                 ptdp_preprocess_options_init(&x);
                 ptdp_preprocess_result res{};
                 res.struct_size = 0;
                 return ptdp_preprocess(&x, &res);
               }, PTDP_ERR_INVALID_ARGUMENT, {"result->struct_size = 0"}});
  for (const char* fn : {"ptdp_preprocess_main", "ptdp_merge_datasets_main", "ptdp_train_main"}) {
    const std::string name = fn;
    auto call = [name](int32_t argc, const char* const* argv, int32_t* code) {
      if (name == "ptdp_preprocess_main") return ptdp_preprocess_main(argc, argv, code);
      if (name == "ptdp_merge_datasets_main") return ptdp_merge_datasets_main(argc, argv, code);
      return ptdp_train_main(argc, argv, code);
    };
    static const char* const argv1[] = {"prog", nullptr};
    r.push_back({fn, "negative argc", [=, &o] { return call(-1, argv1, &o.i32[0]); }, PTDP_ERR_INVALID_ARGUMENT, {"argc = -1"}});
    r.push_back(null_row(fn, "argv", [=, &o] { return call(1, nullptr, &o.i32[0]); }));
    r.push_back(null_row(fn, "exit_code", [=] { return call(1, argv1, nullptr); }));
    r.push_back({fn, "NULL argument", [=, &o] {
                   static const char* const holes[] = {"prog", nullptr, "x"};
                   return call(3, holes, &o.i32[0]);
                 }, PTDP_ERR_INVALID_ARGUMENT, {"argv[1] is NULL"}});
  }
  const char* md = "ptdp_merge_datasets";
  r.push_back(null_row(md, "prefixes", [&] {
    const std::string out = f.dir + "/merged";
    return ptdp_merge_datasets(nullptr, 1, out.c_str());
  }));
  r.push_back({md, "count 0", [&] {
                 const char* in[1] = {f.dataset_prefix.c_str()};
                 const std::string out = f.dir + "/merged";
                 return ptdp_merge_datasets(in, 0, out.c_str());
               }, PTDP_ERR_INVALID_ARGUMENT, {"count = 0"}});
  r.push_back(null_row(md, "output_prefix", [&] {
    const char* in[1] = {f.dataset_prefix.c_str()};
    return ptdp_merge_datasets(in, 1, nullptr);
  }));
  r.push_back({md, "empty output_prefix", [&] {
                 const char* in[1] = {f.dataset_prefix.c_str()};
                 return ptdp_merge_datasets(in, 1, "");
               }, PTDP_ERR_INVALID_ARGUMENT, {"output_prefix is empty"}});
  r.push_back({md, "a NULL prefix", [&] {
                 const char* in[2] = {f.dataset_prefix.c_str(), nullptr};
                 const std::string out = f.dir + "/merged";
                 return ptdp_merge_datasets(in, 2, out.c_str());
               }, PTDP_ERR_INVALID_ARGUMENT, {"prefixes[1] is NULL"}});
  return r;
}
