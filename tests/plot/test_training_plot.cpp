// Training plots in the core: the SVG is a well-formed document with one path per series and
// run, a legend naming every run, round ticks enclosing the data and points where the values
// put them; gaps for missing values; bounded size for long runs; JSON-lines logs read back with
// resumes, unknown keys and printf's nan, and bad logs refused naming the file and the line;
// the picture replaced atomically.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/train/plot.h"
#include "plot_files.h"
#include "tests/pipeline/xml_check.h"

namespace fs = std::filesystem;
using ptdp::PlotRun;
using ptdp::TrainPoint;
using ptdp::ValidPoint;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const char* const kSeries[] = {"lm_loss", "validation_lm_loss", "learning_rate", "grad_norm", "loss_scale",
                               "tokens_per_second"};

using plot_test::count;
using plot_test::read_text;
using plot_test::scratch;
using plot_test::write_text;

// 50 iterations: loss 10 -> 2.5 linearly, learning rate warming up to 1e-4 over 10 iterations,
// grad norm, loss scale halving from 65536 to 1 (17 values), tokens/s; validation every 10.
PlotRun sample_run(const std::string& label, double loss_offset = 0) {
  PlotRun r;
  r.label = label;
  for (int i = 1; i <= 50; ++i) {
    TrainPoint p;
    p.iteration = i;
    p.lm_loss = 10 - 7.5 * (i - 1) / 49.0 + loss_offset;
    p.learning_rate = 1e-4 * std::min(1.0, i / 10.0);
    p.grad_norm = 1 + 0.01 * i;
    p.loss_scale = std::ldexp(1.0, std::max(0, 16 - (i - 1)));
    p.tokens_per_second = 1000 + 10 * i;
    r.train.push_back(p);
  }
  for (int i = 10; i <= 50; i += 10) r.valid.push_back({i, 9.0 - i / 10.0 + loss_offset});
  return r;
}

// The d attribute of the series path of `run` and `series`; fails unless there is exactly one.
std::string series_d(const std::string& svg, int run, const std::string& series) {
  const std::string head = "<path class=\"series\" data-run=\"" + std::to_string(run) + "\" data-series=\"" + series + "\"";
  REQUIRE(count(svg, head) == 1);
  const std::size_t at = svg.find(head);
  const std::size_t d = svg.find(" d=\"", at);
  REQUIRE(d != std::string::npos);
  return svg.substr(d + 4, svg.find('"', d + 4) - d - 4);
}

struct Pt {
  double x, y;
};

// The points of path data ("M x y L x y ... M ..."), each subpath one vector.
std::vector<std::vector<Pt>> subpaths(const std::string& d) {
  std::vector<std::vector<Pt>> out;
  std::istringstream in(d);
  std::string cmd;
  while (in >> cmd) {
    if (cmd == "h0.01") continue;
    const char c = cmd[0];
    Pt p{};
    p.x = std::stod(cmd.substr(1));
    in >> p.y;
    if (c == 'M') out.emplace_back();
    REQUIRE(!out.empty());
    out.back().push_back(p);
  }
  return out;
}

// The data-value numbers of a panel's ticks on one axis.
std::vector<double> ticks(const std::string& svg, const std::string& panel, const std::string& axis) {
  const std::string head = "<g class=\"ticks\" data-panel=\"" + panel + "\" data-axis=\"" + axis + "\"";
  const std::size_t at = svg.find(head);
  if (at == std::string::npos) return {};
  const std::string group = svg.substr(at, svg.find("</g>", at) - at);
  std::vector<double> out;
  const std::regex value("data-value=\"([^\"]+)\"");
  for (auto it = std::sregex_iterator(group.begin(), group.end(), value); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

// The text of a panel's tick labels on one axis.
std::vector<std::string> tick_labels(const std::string& svg, const std::string& panel, const std::string& axis) {
  const std::string head = "<g class=\"ticks\" data-panel=\"" + panel + "\" data-axis=\"" + axis + "\"";
  const std::size_t at = svg.find(head);
  const std::string group = svg.substr(at, svg.find("</g>", at) - at);
  std::vector<std::string> out;
  const std::regex label(">([^<]+)</text>");
  for (auto it = std::sregex_iterator(group.begin(), group.end(), label); it != std::sregex_iterator(); ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

void require_error(const std::function<void()>& call, ptdp::ErrorCode code, const std::vector<std::string>& mentions) {
  try {
    call();
    FAIL("no error thrown");
  } catch (const ptdp::Error& e) {
    INFO(e.what());
    CHECK(e.code() == code);
    for (const std::string& m : mentions) CHECK(std::string(e.what()).find(m) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("training plot: well-formed SVG, one path per series and run, legend for every run", "[plot]") {
  const std::vector<PlotRun> runs = {sample_run("baseline"), sample_run("t=2 <p=2> & more", 0.5),
                                     sample_run("third", 1.0)};
  const std::string svg = ptdp::training_plot_svg(runs, "GPT 345M \"ablation\"");
  const ptdp_test::XmlSummary x = ptdp_test::parse_xml(svg);
  INFO(x.error);
  REQUIRE(x.ok);
  CHECK(x.root == "svg");
  CHECK(count(svg, "class=\"series\"") == runs.size() * 6);
  for (int r = 0; r < 3; ++r) {
    for (const char* s : kSeries) CHECK(!series_d(svg, r, s).empty());
  }
  // The legend names every run in the run's colour, escaped.
  CHECK(svg.find("data-run=\"0\" x=") != std::string::npos);
  CHECK(count(svg, "class=\"run-label\"") == 3);
  CHECK(svg.find(">baseline</text>") != std::string::npos);
  CHECK(svg.find(">t=2 &lt;p=2&gt; &amp; more</text>") != std::string::npos);
  CHECK(svg.find(">third</text>") != std::string::npos);
  CHECK(svg.find("<title>GPT 345M &quot;ablation&quot;</title>") != std::string::npos);
  // Each run's colour is its own: the colours of the three training-loss paths differ.
  std::vector<std::string> colours;
  for (int r = 0; r < 3; ++r) {
    const std::string head = "data-run=\"" + std::to_string(r) + "\" data-series=\"lm_loss\"";
    const std::size_t at = svg.find(head);
    const std::size_t s = svg.find("stroke=\"", at);
    colours.push_back(svg.substr(s + 8, 7));
  }
  CHECK(colours[0] != colours[1]);
  CHECK(colours[1] != colours[2]);
  CHECK(colours[0] != colours[2]);
  // The last values are summarised in the legend; validation has a marker per point.
  CHECK(svg.find("iteration 50: loss 2.5, validation 4 at 50") != std::string::npos);
  CHECK(count(svg, "<circle ") == 3 * 5);
  // Panels and their titles.
  for (const char* t : {">loss<", ">learning rate<", ">grad norm<", ">tokens per second<"}) {
    CHECK(svg.find(t) != std::string::npos);
  }
  CHECK(svg.find(">loss scale (log scale)<") != std::string::npos);

  // A label of any bytes (a file name, say) still gives valid XML in UTF-8: a byte that is not
  // UTF-8 becomes U+FFFD, control characters are dropped, valid multi-byte characters kept.
  const std::string odd = ptdp::training_plot_svg({sample_run("run\xff\x01-\xc3\xa9t\xc3")}, "");
  CHECK(ptdp_test::parse_xml(odd).ok);
  CHECK(odd.find(">run\xef\xbf\xbd-\xc3\xa9t\xef\xbf\xbd</text>") != std::string::npos);
}

TEST_CASE("training plot: round ticks enclose the data, points sit where the values put them", "[plot]") {
  const std::vector<PlotRun> runs = {sample_run("a"), sample_run("b", 0.5)};
  const std::string svg = ptdp::training_plot_svg(runs, "ticks");
  // Iterations 1..50 (step 10 for about eight ticks).
  CHECK(ticks(svg, "lm_loss", "x") == std::vector<double>{0, 10, 20, 30, 40, 50});
  CHECK(tick_labels(svg, "lm_loss", "x") == std::vector<std::string>{"0", "10", "20", "30", "40", "50"});
  // Loss 2.5 .. 10.5 (run b is 0.5 higher): step 2 from 2 to 12.
  CHECK(ticks(svg, "lm_loss", "y") == std::vector<double>{2, 4, 6, 8, 10, 12});
  // Learning rate 1e-5 .. 1e-4: step 2e-5 from 0 to 1e-4.
  const std::vector<double> lr = ticks(svg, "learning_rate", "y");
  REQUIRE(lr.size() == 6);
  for (std::size_t i = 0; i < lr.size(); ++i) CHECK(lr[i] == Approx(2e-5 * static_cast<double>(i)).margin(1e-15));
  CHECK(tick_labels(svg, "learning_rate", "y").back() == "0.00010");
  // Tokens/s 1010 .. 1500.
  const std::vector<double> tps = ticks(svg, "tokens_per_second", "y");
  REQUIRE(!tps.empty());
  CHECK(tps.front() <= 1010);
  CHECK(tps.back() >= 1500);
  CHECK(tps.front() == 1000);
  CHECK(tps.back() == 1500);
  // Loss scale 1 .. 65536 spans four decades: a log axis with one tick per decade, 1 .. 1e5.
  CHECK(ticks(svg, "loss_scale", "y") == std::vector<double>{1, 10, 100, 1000, 1e4, 1e5});
  CHECK(tick_labels(svg, "loss_scale", "y") == std::vector<std::string>{"1", "10", "100", "1000", "10k", "100k"});
  // Grad norm 1.01 .. 1.5 stays linear.
  CHECK(svg.find(">grad norm (log scale)<") == std::string::npos);
  for (const std::string panel : {"lm_loss", "learning_rate", "grad_norm", "tokens_per_second"}) {
    const std::vector<double> t = ticks(svg, panel, "y");
    REQUIRE(t.size() >= 3);
    const double step = t[1] - t[0];
    for (std::size_t i = 1; i < t.size(); ++i) CHECK(t[i] - t[i - 1] == Approx(step));
    const double mantissa = step / std::pow(10.0, std::floor(std::log10(step) + 1e-9));
    CHECK((mantissa == Approx(1) || mantissa == Approx(2) || mantissa == Approx(5)));
  }

  // Run a's training loss: iteration 1 at x = 70 + 910 * 1/50, iteration 50 at the right edge;
  // loss 10 at y0 + 240 * (12 - 10) / 10, loss 2.5 at y0 + 240 * (12 - 2.5) / 10.
  const auto paths = subpaths(series_d(svg, 0, "lm_loss"));
  REQUIRE(paths.size() == 1);
  const std::vector<Pt>& p = paths[0];
  CHECK(p.front().x == Approx(70 + 910.0 / 50).margin(0.006));
  CHECK(p.back().x == Approx(980).margin(0.006));
  CHECK(p.back().y - p.front().y == Approx(240 * 7.5 / 10).margin(0.011));
  for (std::size_t i = 1; i < p.size(); ++i) CHECK(p[i].x > p[i - 1].x);
  // The validation markers of run b: loss 8.5 .. 4.5 at iterations 10 .. 50.
  const auto v = subpaths(series_d(svg, 1, "validation_lm_loss"));
  REQUIRE(v.size() == 1);
  REQUIRE(v[0].size() == 5);
  CHECK(v[0][0].x == Approx(70 + 910.0 * 10 / 50).margin(0.006));
  CHECK(v[0][4].y - v[0][0].y == Approx(240 * 4.0 / 10).margin(0.011));
  // Log axis: loss scale 65536 to 1 covers log10(65536)/5 of the panel's 170 px.
  const auto ls = subpaths(series_d(svg, 0, "loss_scale"));
  REQUIRE(ls.size() == 1);
  CHECK(ls[0].back().y - ls[0].front().y == Approx(170 * std::log10(65536.0) / 5).margin(0.011));
}

TEST_CASE("training plot: missing and non-finite values leave gaps, never a crash", "[plot]") {
  PlotRun r = sample_run("gappy");
  r.train[10].lm_loss = kNaN;
  r.train[20].lm_loss = std::numeric_limits<double>::infinity();
  r.train[22].lm_loss = -std::numeric_limits<double>::infinity();  // leaves iteration 22 alone
  for (TrainPoint& p : r.train) p.grad_norm = kNaN;                    // never known
  r.valid[2].lm_loss = kNaN;
  const std::string svg = ptdp::training_plot_svg({r}, "");
  REQUIRE(ptdp_test::parse_xml(svg).ok);
  CHECK(svg.find("<title>training</title>") != std::string::npos);
  const auto loss = subpaths(series_d(svg, 0, "lm_loss"));
  REQUIRE(loss.size() == 4);  // 1-10, 12-20, 22, 24-50
  CHECK(loss[0].size() == 10);
  CHECK(loss[2].size() == 1);
  CHECK(series_d(svg, 0, "lm_loss").find(" h0.01") != std::string::npos);  // the lone point is a dot
  CHECK(series_d(svg, 0, "grad_norm").empty());
  CHECK(ticks(svg, "grad_norm", "y").empty());
  CHECK(count(svg, ">no data</text>") == 1);
  CHECK(subpaths(series_d(svg, 0, "validation_lm_loss")).size() == 2);
  CHECK(count(svg, "<circle ") == 4);
  CHECK(svg.find("nan") == std::string::npos);
  CHECK(svg.find("inf") == std::string::npos);

  // No runs, and a run with no records: still a picture.
  for (const std::vector<PlotRun>& runs : {std::vector<PlotRun>{}, std::vector<PlotRun>{PlotRun{"empty", {}, {}}}}) {
    const std::string empty = ptdp::training_plot_svg(runs, "nothing yet");
    const ptdp_test::XmlSummary x = ptdp_test::parse_xml(empty);
    INFO(x.error);
    CHECK(x.ok);
    CHECK(count(empty, "class=\"series\"") == runs.size() * 6);
    CHECK(count(empty, ">no data</text>") == 5);
  }
  // One point: axes around it.
  PlotRun one;
  one.label = "one";
  one.train.push_back({0, 3.0, 1e-4, 1.0, 1.0, 500});
  const std::string single = ptdp::training_plot_svg({one}, "one");
  CHECK(ptdp_test::parse_xml(single).ok);
  const std::vector<double> xt = ticks(single, "lm_loss", "x");
  REQUIRE(!xt.empty());
  CHECK(xt.front() == 0);
  CHECK(xt.back() >= 1);
  const std::vector<double> yt = ticks(single, "lm_loss", "y");
  CHECK(yt.front() < 3.0);
  CHECK(yt.back() > 3.0);
}

TEST_CASE("training plot: long runs are thinned per pixel column, spikes and order kept", "[plot]") {
  PlotRun r;
  r.label = "long";
  for (int i = 200000; i >= 1; --i) {  // given backwards: drawn by iteration
    TrainPoint p{i, 3.0 + std::sin(i * 0.01), 1e-4, 1.0 + 0.1 * std::sin(i * 0.1), 1.0, 1e5};
    if (i == 123457) p.grad_norm = 1000;  // one spike
    r.train.push_back(p);
  }
  const std::string svg = ptdp::training_plot_svg({r}, "long");
  REQUIRE(ptdp_test::parse_xml(svg).ok);
  CHECK(svg.size() < 400 * 1024);
  CHECK(svg.find(">grad norm (log scale)<") != std::string::npos);
  const auto gn = subpaths(series_d(svg, 0, "grad_norm"));
  REQUIRE(gn.size() == 1);
  CHECK(gn[0].size() <= 4 * 411);  // at most four points per pixel column of the 410 px panel
  CHECK(gn[0].size() >= 410);
  for (std::size_t i = 1; i < gn[0].size(); ++i) CHECK(gn[0][i].x >= gn[0][i - 1].x);
  // The spike survives the thinning: the log axis runs from 0.1 to 1000, the spike at its top
  // and the lowest value (0.9) log10(1000 / 0.9) decades below it.
  CHECK(ticks(svg, "grad_norm", "y") == std::vector<double>{0.1, 1, 10, 100, 1000});
  double top = 1e9, bottom = -1e9;
  for (const Pt& p : gn[0]) top = std::min(top, p.y), bottom = std::max(bottom, p.y);
  CHECK(bottom - top == Approx(170 * std::log10(1000 / 0.9) / 4).margin(0.02));
  CHECK(ticks(svg, "lm_loss", "x").back() == 200000);
  CHECK(tick_labels(svg, "lm_loss", "x").back() == "200k");
}

TEST_CASE("training log: JSON lines read back with resumes, unknown keys and printf's nan", "[plot]") {
  const fs::path dir = scratch("read");
  const fs::path log = dir / "run.jsonl";
  write_text(log,
             "{\"iteration\": 1, \"consumed_samples\": 16, \"lm_loss\": 10.5, \"learning_rate\": 1e-05, "
             "\"grad_norm\": 3.25, \"loss_scale\": 65536, \"skipped\": 0, \"skipped_iterations\": 0, "
             "\"elapsed_ms\": 185.9, \"tokens_per_second\": 11018.9, \"tflops_per_device\": 0.016, "
             "\"global_batch_size\": 16, \"mem_high_water_mib\": 41.3, \"mfu\": 0.31}\n"
             "\n"
             "{\"iteration\": 2, \"lm_loss\": nan, \"learning_rate\": 2e-05, \"grad_norm\": -1, \"loss_scale\": 32768, "
             "\"tokens_per_second\": 12000.5, \"note\": \"nan inf stays a string\"}\n"
             "{\"event\": \"checkpoint\", \"iteration_saved\": 2}\n"
             "{\"iteration\": 3, \"lm_loss\": 9.0, \"learning_rate\": 3e-05, \"grad_norm\": -inf, \"loss_scale\": null}\n"
             "{\"validation_iteration\": 3, \"lm_loss\": 9.25, \"lm_loss_ppl\": 10404.6}\n"
             "{\"iteration\": 4, \"lm_loss\": 8.5, \"learning_rate\": \"high\", \"grad_norm\": 2.0}\r\n"
             "{\"validation_iteration\": 4, \"lm_loss\": 8.75}\n"
             // Resumed from the checkpoint of iteration 3: iteration 4 and its validation again.
             "{\"iteration\": 4, \"lm_loss\": 8.4, \"learning_rate\": 4e-05, \"grad_norm\": 1.5, \"loss_scale\": 1, "
             "\"tokens_per_second\": 13000}\n"
             "{\"iteration\": 5.0, \"lm_loss\": 8.0}\n"
             "{\"iteration\": 6, \"lm_loss\": 7");  // the writer's line in progress
  const PlotRun r = ptdp::read_training_log(log.string());
  CHECK(r.label == "run.jsonl");
  REQUIRE(r.train.size() == 5);
  CHECK(r.train[0].iteration == 1);
  CHECK(r.train[0].lm_loss == 10.5);
  CHECK(r.train[0].learning_rate == 1e-05);
  CHECK(r.train[0].grad_norm == 3.25);
  CHECK(r.train[0].loss_scale == 65536);
  CHECK(r.train[0].tokens_per_second == 11018.9);
  CHECK(r.train[1].iteration == 2);
  CHECK(std::isnan(r.train[1].lm_loss));
  CHECK(std::isnan(r.train[1].grad_norm));  // -1: not finite
  CHECK(r.train[1].tokens_per_second == 12000.5);
  CHECK(r.train[2].iteration == 3);
  CHECK(std::isnan(r.train[2].grad_norm));
  CHECK(std::isnan(r.train[2].loss_scale));
  CHECK(std::isnan(r.train[2].tokens_per_second));  // absent
  CHECK(r.train[3].iteration == 4);                 // the resumed run's record
  CHECK(r.train[3].lm_loss == 8.4);
  CHECK(r.train[3].learning_rate == 4e-05);
  CHECK(r.train[4].iteration == 5);
  CHECK(r.train[4].lm_loss == 8.0);
  CHECK(std::isnan(r.train[4].learning_rate));
  REQUIRE(r.valid.size() == 1);  // iteration 4's validation belonged to the interrupted run
  CHECK(r.valid[0].iteration == 3);
  CHECK(r.valid[0].lm_loss == 9.25);

  // What the reader gives, the plot draws.
  const std::string svg = ptdp::training_plot_svg({r}, "read back");
  CHECK(ptdp_test::parse_xml(svg).ok);
  CHECK(subpaths(series_d(svg, 0, "lm_loss")).size() == 2);  // 1, then 3-5
}

TEST_CASE("training log: bad files and bad lines are refused naming the path and the line", "[plot]") {
  using ptdp::ErrorCode;
  const fs::path dir = scratch("bad");
  const std::string missing = (dir / "missing.jsonl").string();
  require_error([&] { ptdp::read_training_log(missing); }, ErrorCode::Io, {missing, "no such file"});
  require_error([&] { ptdp::read_training_log(dir.string()); }, ErrorCode::Io,
                {dir.string(), "is a directory", "only regular files"});
  const std::string fifo = (dir / "pipe.jsonl").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  require_error([&] { ptdp::read_training_log(fifo); }, ErrorCode::Io, {fifo, "is a FIFO", "only regular files"});
  require_error([&] { ptdp::read_training_log(""); }, ErrorCode::InvalidArgument, {"empty"});

  const std::string good = "{\"iteration\": 1, \"lm_loss\": 2.0}\n";
  const struct {
    const char* name;
    std::string text;
    std::vector<std::string> mentions;
  } cases[] = {
      {"garbage.jsonl", good + "{\"iteration\": 2, \"lm_loss\": 2.0}\nthis is not json\n" + good,
       {"line 3 is not JSON", "this is not json"}},
      {"truncated.jsonl", good + "{\"iteration\": 2, \"lm_loss\": \n" + good, {"line 2 is not JSON"}},
      {"array.jsonl", good + "[1, 2, 3]\n", {"line 2 is not a JSON object"}},
      {"text_iteration.jsonl", good + good + "{\"iteration\": \"three\", \"lm_loss\": 2.0}\n",
       {"line 3", "\"iteration\" is \"three\", not a non-negative integer"}},
      {"negative.jsonl", "{\"validation_iteration\": -5, \"lm_loss\": 2.0}\n",
       {"line 1", "\"validation_iteration\" is -5"}},
      {"fraction.jsonl", "{\"iteration\": 1.5}\n", {"line 1", "\"iteration\" is 1.5"}},
  };
  for (const auto& c : cases) {
    const std::string path = (dir / c.name).string();
    write_text(path, c.text);
    INFO(c.name);
    std::vector<std::string> mentions = c.mentions;
    mentions.push_back(path);
    require_error([&] { ptdp::read_training_log(path); }, ErrorCode::Io, mentions);
  }
  // An empty log is no error: a run that has not logged yet.
  write_text(dir / "empty.jsonl", "");
  const PlotRun empty = ptdp::read_training_log((dir / "empty.jsonl").string());
  CHECK(empty.train.empty());
  CHECK(empty.valid.empty());
}

TEST_CASE("training plot file: replaced atomically, labels from file names, logs never overwritten", "[plot]") {
  using ptdp::ErrorCode;
  const fs::path dir = scratch("write");
  const fs::path svg = dir / "plot.svg";
  write_text(svg, "the old picture");
  // A reader that opened the old file keeps reading the old file whole: the new picture is a
  // new file renamed over the path, never the old one truncated and rewritten.
  std::ifstream old_reader(svg, std::ios::binary);
  REQUIRE(old_reader);
  const std::vector<PlotRun> runs = {sample_run("a")};
  ptdp::write_training_plot(runs, "atomic", svg.string());
  std::ostringstream old_text;
  old_text << old_reader.rdbuf();
  CHECK(old_text.str() == "the old picture");
  CHECK(read_text(svg) == ptdp::training_plot_svg(runs, "atomic"));
  CHECK(!fs::exists(dir / "plot.svg.tmp"));
  require_error([&] { ptdp::write_training_plot(runs, "x", (dir / "no-such-dir" / "p.svg").string()); }, ErrorCode::Io,
                {(dir / "no-such-dir" / "p.svg").string()});
  require_error([&] { ptdp::write_training_plot(runs, "x", ""); }, ErrorCode::InvalidArgument, {"empty"});

  // Two logs with the same file name are told apart by their paths; a third by its own name.
  fs::create_directories(dir / "run1");
  fs::create_directories(dir / "run2");
  const std::string line = "{\"iteration\": 1, \"lm_loss\": 2.0}\n{\"iteration\": 2, \"lm_loss\": 1.5}\n";
  write_text(dir / "run1" / "log.jsonl", line);
  write_text(dir / "run2" / "log.jsonl", line);
  write_text(dir / "other.jsonl", line);
  const std::vector<std::string> logs = {(dir / "run1" / "log.jsonl").string(), (dir / "run2" / "log.jsonl").string(),
                                         (dir / "other.jsonl").string()};
  ptdp::plot_training_logs(logs, {}, "", svg.string());
  std::string text = read_text(svg);
  CHECK(ptdp_test::parse_xml(text).ok);
  CHECK(text.find(">" + logs[0] + "</text>") != std::string::npos);
  CHECK(text.find(">" + logs[1] + "</text>") != std::string::npos);
  CHECK(text.find(">other.jsonl</text>") != std::string::npos);
  ptdp::plot_training_logs(logs, {"first", "", "third"}, "named", svg.string());
  text = read_text(svg);
  CHECK(text.find(">first</text>") != std::string::npos);
  CHECK(text.find(">" + logs[1] + "</text>") != std::string::npos);
  CHECK(text.find(">third</text>") != std::string::npos);

  require_error([&] { ptdp::plot_training_logs({}, {}, "", svg.string()); }, ErrorCode::InvalidArgument, {"no training log"});
  require_error([&] { ptdp::plot_training_logs(logs, {"one"}, "", svg.string()); }, ErrorCode::InvalidArgument,
                {"1 labels for 3 logs"});
  // The SVG path naming a log (also through another spelling of it) is refused before anything
  // is touched.
  const std::string other = (dir / "run1" / ".." / "other.jsonl").string();
  require_error([&] { ptdp::plot_training_logs(logs, {}, "", other); }, ErrorCode::InvalidArgument,
                {other, "would overwrite"});
  CHECK(read_text(dir / "other.jsonl") == line);
  // A bad log leaves the old picture in place.
  const std::string before = read_text(svg);
  write_text(dir / "bad.jsonl", "oops\n");
  require_error([&] { ptdp::plot_training_logs({logs[0], (dir / "bad.jsonl").string()}, {}, "", svg.string()); },
                ErrorCode::Io, {"bad.jsonl", "line 1"});
  CHECK(read_text(svg) == before);
}

TEST_CASE("training plot: MoE runs get the losses and every layer's expert load, dense runs keep four panels",
          "[plot][moe]") {
  const fs::path dir = scratch("moe");
  const fs::path log = dir / "moe.jsonl";
  // What ptdp-train writes for a model with MoE layers 0 and 2 (the second line without z_loss
  // and layer 2, a reader must take both).
  write_text(log,
             "{\"iteration\": 1, \"lm_loss\": 4.5, \"learning_rate\": 1e-4, \"grad_norm\": 2.0, \"loss_scale\": 1, "
             "\"tokens_per_second\": 1000, \"load_balancing_loss\": 1.25, \"z_loss\": 3.5, \"moe_expert_load\": "
             "[{\"layer\": 0, \"min\": 10, \"max\": 54}, {\"layer\": 2, \"min\": 20, \"max\": 44}]}\n"
             "{\"iteration\": 2, \"lm_loss\": 4.25, \"learning_rate\": 1e-4, \"grad_norm\": 1.5, \"loss_scale\": 1, "
             "\"tokens_per_second\": 1000, \"load_balancing_loss\": 1.125, \"moe_expert_load\": "
             "[{\"layer\": 0, \"min\": 16, \"max\": 48}, {\"layer\": \"two\", \"min\": 1, \"max\": 2}]}\n");
  const PlotRun r = ptdp::read_training_log(log.string());
  REQUIRE(r.train.size() == 2);
  CHECK(r.train[0].load_balancing_loss == 1.25);
  CHECK(r.train[0].z_loss == 3.5);
  REQUIRE(r.train[0].expert_load.size() == 2);
  CHECK(r.train[0].expert_load[1].layer == 2);
  CHECK(r.train[0].expert_load[1].min_tokens == 20);
  CHECK(r.train[0].expert_load[1].max_tokens == 44);
  CHECK(std::isnan(r.train[1].z_loss));
  REQUIRE(r.train[1].expert_load.size() == 1);  // the entry without an integer layer is skipped
  CHECK(r.train[1].expert_load[0].max_tokens == 48);

  // Overlaid with a dense run: the two MoE panels, each run with its series (the dense one's
  // empty), one path per (run, layer, most/fewest).
  const std::vector<PlotRun> runs = {r, sample_run("dense")};
  const std::string svg = ptdp::training_plot_svg(runs, "moe");
  CHECK(ptdp_test::parse_xml(svg).ok);
  CHECK(count(svg, "class=\"series\"") == runs.size() * (6 + 2 + 4));
  CHECK(svg.find(">MoE losses (z_loss dashed)<") != std::string::npos);
  CHECK(svg.find(">tokens per expert, each MoE layer (fewest dashed)<") != std::string::npos);
  CHECK(subpaths(series_d(svg, 0, "load_balancing_loss")).size() == 1);
  CHECK(subpaths(series_d(svg, 0, "z_loss")).size() == 1);  // one point: a dot
  CHECK(subpaths(series_d(svg, 0, "expert_load_max_layer_0"))[0].size() == 2);
  CHECK(subpaths(series_d(svg, 0, "expert_load_min_layer_2"))[0].size() == 1);  // layer 2 at iteration 1 only
  CHECK(series_d(svg, 1, "expert_load_max_layer_0").empty());
  CHECK(series_d(svg, 1, "load_balancing_loss").empty());
  // The most loaded expert's curve lies above the least loaded one's (SVG y grows downwards).
  CHECK(subpaths(series_d(svg, 0, "expert_load_max_layer_0"))[0][0].y <
        subpaths(series_d(svg, 0, "expert_load_min_layer_0"))[0][0].y);

  // A dense picture is what it was: four small panels, no MoE series.
  const std::string dense = ptdp::training_plot_svg({sample_run("dense")}, "");
  CHECK(count(dense, "class=\"series\"") == 6);
  CHECK(dense.find("MoE losses") == std::string::npos);
  CHECK(dense.find("expert_load") == std::string::npos);
}
