#include "core/train/fault_injection.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <utility>

#include "base/error.h"

namespace ptdp {

namespace {

[[noreturn]] void bad_spec(const std::string& spec, const std::string& what) {
  throw_error(ErrorCode::InvalidArgument, "PTDP_FAULT spec '" + spec + "': " + what);
}

int64_t parse_int(const std::string& spec, const std::string& key, const std::string& v, int64_t lo) {
  if (v.empty()) bad_spec(spec, key + "= has no value");
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;  // reported below, naming the spec and the value
  }
  if (used != v.size()) bad_spec(spec, key + "=" + v + " is not an integer");
  if (n < lo) bad_spec(spec, key + "=" + v + " is not >= " + std::to_string(lo));
  return n;
}

std::vector<std::string> split_any(const std::string& s, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (seps.find(c) != std::string::npos) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\n") - b + 1);
}

const char* point_name(FaultPoint p) {
  switch (p) {
    case FaultPoint::BeforeForward: return "before-forward";
    case FaultPoint::AfterBackward: return "after-backward";
    case FaultPoint::Save: return "save";
  }
  return "?";
}

}  // namespace

std::vector<FaultSpec> parse_fault_specs(const std::string& value) {
  std::vector<FaultSpec> out;
  for (const std::string& raw : split_any(value, ",;")) {
    const std::string text = trim(raw);
    if (text.empty()) continue;
    const std::vector<std::string> parts = split_any(text, ":");
    FaultSpec s;
    s.text = text;
    const std::string& kind = parts[0];
    if (kind == "kill") s.kind = FaultKind::Kill;
    else if (kind == "hang") s.kind = FaultKind::Hang;
    else if (kind == "nan") s.kind = FaultKind::Nan;
    else if (kind == "slow") s.kind = FaultKind::Slow;
    else if (kind == "io-error") s.kind = FaultKind::IoError;
    else bad_spec(text, "unknown kind '" + kind + "' (kill, hang, nan, slow, io-error)");
    bool have_ms = false, have_at = false;
    for (std::size_t i = 1; i < parts.size(); ++i) {
      const std::string& kv = parts[i];
      const auto eq = kv.find('=');
      if (eq == std::string::npos) bad_spec(text, "'" + kv + "' is not KEY=VALUE");
      const std::string key = kv.substr(0, eq), v = kv.substr(eq + 1);
      if (key == "rank") {
        s.rank = static_cast<int>(parse_int(text, key, v, 0));
      } else if (key == "iter") {
        s.iteration = parse_int(text, key, v, 1);
      } else if (key == "attempt") {
        s.attempt = static_cast<int>(parse_int(text, key, v, 0));
      } else if (key == "at") {
        if (v == "before-forward") s.at = FaultPoint::BeforeForward;
        else if (v == "after-backward") s.at = FaultPoint::AfterBackward;
        else if (v == "save") s.at = FaultPoint::Save;
        else bad_spec(text, "at=" + v + " is not one of before-forward, after-backward, save");
        have_at = true;
      } else if (key == "param") {
        if (s.kind != FaultKind::Nan) bad_spec(text, "param= applies to nan only");
        if (v.empty()) bad_spec(text, "param= has no value");
        s.param = v;
      } else if (key == "ms") {
        if (s.kind != FaultKind::Slow) bad_spec(text, "ms= applies to slow only");
        s.ms = static_cast<double>(parse_int(text, key, v, 0));
        have_ms = true;
      } else {
        bad_spec(text, "unknown key '" + key + "' (rank, iter, at, attempt, param, ms)");
      }
    }
    if (s.kind == FaultKind::Slow && !have_ms) bad_spec(text, "slow needs ms=MILLISECONDS");
    if (have_at && (s.kind == FaultKind::Nan || s.kind == FaultKind::IoError)) {
      bad_spec(text, "at= applies to kill, hang and slow (nan strikes after the backward, io-error at the save)");
    }
    out.push_back(std::move(s));
  }
  if (out.empty()) bad_spec(value, "no spec (KIND[:KEY=VALUE...], e.g. kill:rank=3:iter=5)");
  return out;
}

FaultInjector::FaultInjector(std::vector<FaultSpec> specs, int world_rank, int attempt) : rank_(world_rank) {
  for (FaultSpec& s : specs) {
    if (s.rank >= 0 && s.rank != world_rank) continue;
    if (s.attempt >= 0 && s.attempt != attempt) continue;
    specs_.push_back(std::move(s));
  }
  used_.assign(specs_.size(), false);
  announced_.assign(specs_.size(), false);
}

FaultInjector FaultInjector::from_environment(int world_rank) {
  const char* v = std::getenv("PTDP_FAULT");
  if (v == nullptr || *v == '\0') return FaultInjector();
  int attempt = 0;
  if (const char* a = std::getenv("PTDP_RESTART_ATTEMPT"); a && *a) attempt = std::atoi(a);
  return FaultInjector(parse_fault_specs(v), world_rank, attempt);
}

bool FaultInjector::applies(const FaultSpec& s, int64_t iteration) const {
  return s.iteration < 0 || s.iteration == iteration;
}

void FaultInjector::strike(FaultPoint point, int64_t iteration) const {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const FaultSpec& s = specs_[i];
    if (s.at != point || !applies(s, iteration)) continue;
    if (s.kind != FaultKind::Kill && s.kind != FaultKind::Hang && s.kind != FaultKind::Slow) continue;
    if (s.kind == FaultKind::Slow) {
      if (!announced_[i]) {
        announced_[i] = true;
        std::fprintf(stderr, "ptdp: PTDP_FAULT %s: rank %d sleeps %g ms at iteration %lld (%s)%s\n", s.text.c_str(),
                     rank_, s.ms, static_cast<long long>(iteration), point_name(point),
                     s.iteration < 0 ? ", and at every other iteration it applies to" : "");
        std::fflush(stderr);
      }
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(s.ms));
      continue;
    }
    std::fflush(stdout);
    std::fprintf(stderr, "ptdp: PTDP_FAULT %s: rank %d %s at iteration %lld (%s)\n", s.text.c_str(), rank_,
                 s.kind == FaultKind::Kill ? "kills itself" : "hangs", static_cast<long long>(iteration),
                 point_name(point));
    std::fflush(stderr);
    if (s.kind == FaultKind::Kill) {
      ::raise(SIGKILL);
    }
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

bool FaultInjector::nan_loss(int64_t iteration) const {
  for (const FaultSpec& s : specs_)
    if (s.kind == FaultKind::Nan && s.param.empty() && applies(s, iteration)) return true;
  return false;
}

std::vector<std::string> FaultInjector::nan_params(int64_t iteration) const {
  std::vector<std::string> out;
  for (const FaultSpec& s : specs_)
    if (s.kind == FaultKind::Nan && !s.param.empty() && applies(s, iteration)) out.push_back(s.param);
  return out;
}

const FaultSpec* FaultInjector::take_io_error(int64_t iteration) {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const FaultSpec& s = specs_[i];
    if (s.kind != FaultKind::IoError || used_[i]) continue;
    if (s.iteration >= 0 && s.iteration > iteration) continue;
    used_[i] = true;
    return &s;
  }
  return nullptr;
}

void check_fault_specs(const FaultInjector& faults, GptPipeline& model, const ProcessGroups& groups) {
  const int rank = faults.rank();
  for (const FaultSpec& f : faults.specs()) {
    if (f.kind == FaultKind::Nan && !f.param.empty()) {
      bool held = false;
      for (const auto& c : model.chunks()) held = held || c->params().find(f.param) >= 0;
      PTDP_CHECK_ARG(held, "PTDP_FAULT spec '" + f.text + "': rank " + std::to_string(rank) + " (pipeline stage " +
                               std::to_string(groups.rank(GroupKind::Pipeline)) + ") holds no parameter named " +
                               f.param);
    }
    if (f.kind == FaultKind::IoError) {
      PTDP_CHECK_ARG(rank == 0 || groups.rank(GroupKind::DataContext) == 0,
                     "PTDP_FAULT spec '" + f.text + "': rank " + std::to_string(rank) +
                         " writes no checkpoint file (only the data-parallel rank 0 of each tensor and pipeline "
                         "rank does); name one of those");
    }
  }
}

TrainingHooks fault_injection_hooks(FaultInjector faults, GptPipeline& model) {
  if (faults.empty()) return {};
  struct State {
    FaultInjector faults;
    int64_t iteration = 0;  // the 1-based iteration running
  };
  auto s = std::make_shared<State>(State{std::move(faults)});
  TrainingHooks h;
  h.before_iteration = [s](int64_t iteration) {
    s->iteration = iteration;
    s->faults.strike(FaultPoint::BeforeForward, iteration);
  };
  h.on_grads_ready = [s, &model](int j, int first, int end) {
    const ParamTable& table = model.chunks()[static_cast<std::size_t>(j)]->params();
    for (const std::string& name : s->faults.nan_params(s->iteration)) {
      const int i = table.find(name);
      if (i < first || i >= end) continue;
      Tensor g = table.grad(i);
      if (g.numel() == 0) continue;
      const float nan = NAN;
      g.backend().copy_from_host(g.raw(), &nan, sizeof nan);
    }
  };
  h.after_backward = [s](float& loss) {
    s->faults.strike(FaultPoint::AfterBackward, s->iteration);
    if (s->faults.nan_loss(s->iteration)) loss = NAN;
  };
  h.around_save = [s](int64_t iteration, const std::function<void()>& save) {
    s->faults.strike(FaultPoint::Save, iteration);
    const FaultSpec* io_error = s->faults.take_io_error(iteration);
    if (io_error == nullptr) {
      save();
      return;
    }
    std::fprintf(stderr, "ptdp: PTDP_FAULT %s: rank %d's file writes fail during the save at iteration %lld\n",
                 io_error->text.c_str(), s->faults.rank(), static_cast<long long>(iteration));
    std::fflush(stderr);
    with_failing_writes(save);
  };
  return h;
}

void with_failing_writes(const std::function<void()>& save) {
  struct rlimit old {};
  if (::getrlimit(RLIMIT_FSIZE, &old) != 0) throw_error(ErrorCode::Internal, "getrlimit(RLIMIT_FSIZE) failed");
  struct sigaction ignore {}, previous {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGXFSZ, &ignore, &previous);
  // The limits come back however the save ends.
  struct Restore {
    const struct rlimit& limit;
    const struct sigaction& action;
    ~Restore() {
      ::setrlimit(RLIMIT_FSIZE, &limit);
      ::sigaction(SIGXFSZ, &action, nullptr);
    }
  } restore{old, previous};
  struct rlimit none = old;
  none.rlim_cur = 0;
  ::setrlimit(RLIMIT_FSIZE, &none);
  save();
}

}  // namespace ptdp
