// ptdp_plot_training_logs through the public C ABI only: two logs drawn into one SVG; every bad
// argument is PTDP_ERR_INVALID_ARGUMENT naming it, with nothing written; unreadable logs and
// unwritable pictures are PTDP_ERR_IO naming the file (and the line).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "plot_files.h"
#include "ptdp/ptdp.h"

namespace fs = std::filesystem;

namespace {

using plot_test::count;
using plot_test::read_text;
using plot_test::scratch;
using plot_test::write_text;

std::string log_text(double start_loss) {
  std::string out;
  for (int i = 1; i <= 20; ++i) {
    out += "{\"iteration\": " + std::to_string(i) + ", \"lm_loss\": " + std::to_string(start_loss - 0.1 * i) +
           ", \"learning_rate\": 0.0001, \"grad_norm\": 1.5, \"loss_scale\": 1, \"tokens_per_second\": 5000}\n";
    if (i % 5 == 0) {
      out += "{\"validation_iteration\": " + std::to_string(i) + ", \"lm_loss\": " +
             std::to_string(start_loss - 0.1 * i + 0.2) + ", \"lm_loss_ppl\": 20.0}\n";
    }
  }
  return out;
}

void check_status(ptdp_status got, ptdp_status expected, const std::vector<std::string>& mentions) {
  const std::string message = ptdp_last_error();
  INFO(message);
  CHECK(got == expected);
  CHECK(message.find("ptdp_plot_training_logs") != std::string::npos);
  for (const std::string& m : mentions) CHECK(message.find(m) != std::string::npos);
}

}  // namespace

TEST_CASE("C API: two training logs drawn into one SVG with their labels", "[plot][capi]") {
  const fs::path dir = scratch("ok");
  write_text(dir / "a.jsonl", log_text(9));
  write_text(dir / "b.jsonl", log_text(8));
  const std::string a = (dir / "a.jsonl").string(), b = (dir / "b.jsonl").string();
  const std::string svg = (dir / "runs.svg").string();
  const char* paths[] = {a.c_str(), b.c_str()};
  REQUIRE(ptdp_plot_training_logs(paths, nullptr, 2, nullptr, svg.c_str()) == PTDP_SUCCESS);
  std::string text = read_text(svg);
  CHECK(text.rfind("<?xml version=\"1.0\"", 0) == 0);
  CHECK(text.find("</svg>") != std::string::npos);
  CHECK(count(text, "class=\"series\"") == 12);
  CHECK(text.find(">a.jsonl</text>") != std::string::npos);
  CHECK(text.find(">b.jsonl</text>") != std::string::npos);
  CHECK(text.find("<title>training</title>") != std::string::npos);
  CHECK(text.find("iteration 20: loss 7, validation 7.2 at 20") != std::string::npos);
  CHECK(count(text, "<circle ") == 8);

  const char* labels[] = {"baseline", nullptr};
  REQUIRE(ptdp_plot_training_logs(paths, labels, 2, "two runs", svg.c_str()) == PTDP_SUCCESS);
  text = read_text(svg);
  CHECK(text.find(">baseline</text>") != std::string::npos);
  CHECK(text.find(">b.jsonl</text>") != std::string::npos);
  CHECK(text.find("<title>two runs</title>") != std::string::npos);
  CHECK(!fs::exists(svg + ".tmp"));
}

TEST_CASE("C API: bad arguments are named and write nothing", "[plot][capi]") {
  const fs::path dir = scratch("bad");
  write_text(dir / "a.jsonl", log_text(9));
  const std::string a = (dir / "a.jsonl").string();
  const std::string svg = (dir / "out.svg").string();
  const char* one[] = {a.c_str()};
  const char* with_null[] = {a.c_str(), nullptr};
  const char* with_empty[] = {a.c_str(), ""};
  const char* empty_label[] = {""};

  check_status(ptdp_plot_training_logs(nullptr, nullptr, 1, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"jsonl_paths is NULL"});
  check_status(ptdp_plot_training_logs(one, nullptr, 0, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"count = 0"});
  check_status(ptdp_plot_training_logs(one, nullptr, -3, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"count = -3"});
  check_status(ptdp_plot_training_logs(with_null, nullptr, 2, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"jsonl_paths[1] is NULL"});
  check_status(ptdp_plot_training_logs(with_empty, nullptr, 2, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"jsonl_paths[1] is empty"});
  check_status(ptdp_plot_training_logs(one, empty_label, 1, nullptr, svg.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {"labels[0] is empty"});
  check_status(ptdp_plot_training_logs(one, nullptr, 1, nullptr, nullptr), PTDP_ERR_INVALID_ARGUMENT,
               {"svg_path is NULL"});
  check_status(ptdp_plot_training_logs(one, nullptr, 1, nullptr, ""), PTDP_ERR_INVALID_ARGUMENT, {"svg_path is empty"});
  CHECK(!fs::exists(svg));
  // The picture may not replace a log.
  check_status(ptdp_plot_training_logs(one, nullptr, 1, nullptr, a.c_str()), PTDP_ERR_INVALID_ARGUMENT,
               {a, "would overwrite"});
  CHECK(read_text(a) == log_text(9));
}

TEST_CASE("C API: unreadable logs and unwritable pictures are I/O errors naming the file", "[plot][capi]") {
  const fs::path dir = scratch("io");
  write_text(dir / "a.jsonl", log_text(9));
  write_text(dir / "bad.jsonl", log_text(9) + "{\"iteration\": 21, \"lm_loss\": oops}\n");
  const std::string a = (dir / "a.jsonl").string(), bad = (dir / "bad.jsonl").string();
  const std::string missing = (dir / "missing.jsonl").string();
  const std::string svg = (dir / "out.svg").string();
  const char* with_missing[] = {a.c_str(), missing.c_str()};
  check_status(ptdp_plot_training_logs(with_missing, nullptr, 2, nullptr, svg.c_str()), PTDP_ERR_IO,
               {missing, "no such file"});
  const char* with_bad[] = {bad.c_str()};
  check_status(ptdp_plot_training_logs(with_bad, nullptr, 1, nullptr, svg.c_str()), PTDP_ERR_IO,
               {bad, "line 25 is not JSON"});
  const std::string d = dir.string();
  const char* a_dir[] = {d.c_str()};
  check_status(ptdp_plot_training_logs(a_dir, nullptr, 1, nullptr, svg.c_str()), PTDP_ERR_IO,
               {d, "is a directory"});
  CHECK(!fs::exists(svg));
  const char* one[] = {a.c_str()};
  const std::string nowhere = (dir / "no-such-dir" / "out.svg").string();
  check_status(ptdp_plot_training_logs(one, nullptr, 1, nullptr, nowhere.c_str()), PTDP_ERR_IO, {nowhere});
}
