#include "core/comm/flight_analyzer.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "io/json_read.h"

namespace ptdp {

namespace {

using nlohmann::json;

struct Entry {
  std::string group_key;
  uint64_t seq = 0, coll = 0;
  std::string op, reduction, state;
  int dtype = -1, root = -1;
  int64_t count = 0, bytes = 0;
  std::vector<std::pair<int, bool>> peers;  // (world rank, is receive)
  double start = 0, end = 0;
  bool in_flight() const { return state == "started" || state == "timed_out" || state == "aborted"; }
};

struct GroupInfo {
  std::string name;
  std::vector<int> ranks;
  uint64_t last_coll = 0, done_coll = 0;
  double timeout_s = 0;
};

struct RankRecord {
  int rank = -1;
  int world_size = 0;
  double dumped_at = 0;
  std::map<std::string, GroupInfo> groups;  // by key
  std::vector<Entry> entries;               // oldest first
};

std::string group_key(const std::string& name, int instance) { return name + "\x1f" + std::to_string(instance); }

std::string clock_str(double t) {
  if (t <= 0) return "?";
  const auto secs = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%02d:%02d:%02d.%03d UTC", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>((t - static_cast<double>(secs)) * 1000));
  return buf;
}

std::string ranks_str(const std::vector<int>& r) {
  std::string s;
  for (std::size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s;
}

const char* dtype_str(int d) {
  switch (d) {
    case 0: return "f32";
    case 1: return "bf16";
    case 2: return "f16";
    case 3: return "i32";
    case 4: return "i64";
  }
  return "?";
}

std::string signature(const Entry& e) {
  std::string s = e.op;
  if (!e.peers.empty()) {
    s += "(";
    for (std::size_t i = 0; i < e.peers.size(); ++i) {
      s += (i ? ", " : "") + std::string(e.peers[i].second ? "recv from " : "send to ") +
           std::to_string(e.peers[i].first);
    }
    s += ")";
  }
  if (!e.reduction.empty()) s += "(" + e.reduction + ")";
  if (e.root >= 0) s += " root " + std::to_string(e.root);
  if (e.dtype >= 0) s += " " + std::to_string(e.count) + " x " + dtype_str(e.dtype);
  return s;
}

RankRecord parse_record(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception& e) {
    throw_io_error(where, std::string("is not valid JSON: ") + e.what());
  }
  try {
    if (j.value("format", std::string()) != "ptdp-flight-recorder") {
      throw_io_error(where, "is not a ptdp flight record (no \"format\": \"ptdp-flight-recorder\")");
    }
    namespace jr = json_read;
    const auto what = [&](const std::string& key) { return str_cat(where, ": \"", key, "\""); };
    RankRecord r;
    r.rank = jr::integer<int>(j.at("rank"), what("rank"));
    r.world_size = jr::integer<int>(j.at("world_size"), what("world_size"));
    r.dumped_at = j.value("dumped_at", 0.0);
    std::vector<std::string> keys;
    for (const json& g : j.at("groups")) {
      GroupInfo gi;
      gi.name = g.at("name").get<std::string>();
      if (!g.at("ranks").is_array()) throw_io_error(where, "\"ranks\" of a group is not an array");
      for (const json& x : g.at("ranks")) gi.ranks.push_back(jr::integer<int>(x, what("groups[].ranks[]")));
      gi.last_coll = jr::field_or(g, "last_collective", uint64_t{0}, what("last_collective"));
      gi.done_coll = jr::field_or(g, "completed_collective", uint64_t{0}, what("completed_collective"));
      gi.timeout_s = g.value("timeout_s", 0.0);
      const std::string key = group_key(gi.name, jr::field_or(g, "instance", 0, what("instance")));
      keys.push_back(key);
      r.groups[key] = std::move(gi);
    }
    for (const json& je : j.at("entries")) {
      Entry e;
      const int gi = jr::integer<int>(je.at("group"), what("entries[].group"));
      if (gi < 0 || gi >= static_cast<int>(keys.size())) continue;
      e.group_key = keys[static_cast<std::size_t>(gi)];
      e.seq = jr::field_or(je, "seq", uint64_t{0}, what("seq"));
      e.coll = jr::field_or(je, "collective", uint64_t{0}, what("collective"));
      e.op = je.value("op", std::string());
      e.reduction = je.value("reduction", std::string());
      e.state = je.value("state", std::string());
      e.dtype = jr::field_or(je, "dtype", -1, what("dtype"));
      e.root = jr::field_or(je, "root", -1, what("root"));
      e.count = jr::field_or(je, "count", int64_t{0}, what("count"));
      e.bytes = jr::field_or(je, "bytes", int64_t{0}, what("bytes"));
      e.start = je.value("start", 0.0);
      e.end = je.value("end", 0.0);
      if (je.contains("peers")) {
        for (const json& p : je.at("peers")) e.peers.emplace_back(jr::integer<int>(p.at("rank"), what("peers[].rank")), p.value("dir", "") == "recv");
      }
      r.entries.push_back(std::move(e));
    }
    return r;
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw_io_error(where, std::string("is not a valid flight record: ") + e.what());
  }
}

// One rank waiting for another.
struct Wait {
  int waiter = -1;
  int on = -1;
  const Entry* entry = nullptr;  // the waiter's operation
  std::string group_name;
};

FlightAnalysis analyze(std::vector<RankRecord> recs) {
  FlightAnalysis a;
  std::map<int, const RankRecord*> by_rank;
  for (const RankRecord& r : recs) {
    a.world_size = std::max(a.world_size, r.world_size);
    by_rank[r.rank] = &r;
  }
  for (const RankRecord& r : recs) {
    for (const auto& [k, g] : r.groups) {
      for (int m : g.ranks) a.world_size = std::max(a.world_size, m + 1);
    }
  }
  for (int r = 0; r < a.world_size; ++r) {
    if (by_rank.count(r)) a.ranks_read.push_back(r);
    else a.ranks_missing.push_back(r);
  }
  std::ostringstream out;
  out << "flight records of " << a.ranks_read.size() << " of " << a.world_size << " ranks";
  if (!a.ranks_missing.empty()) out << " (none from rank" << (a.ranks_missing.size() > 1 ? "s " : " ")
                                    << ranks_str(a.ranks_missing) << ")";
  out << "\n";

  // Waits: every operation still in flight waits for the ranks that have not joined it.
  std::vector<Wait> waits;
  std::set<int> in_flight;
  const Entry* first_timeout = nullptr;
  int first_timeout_rank = -1;
  std::string first_timeout_group;
  for (const RankRecord& r : recs) {
    for (const Entry& e : r.entries) {
      if (!e.in_flight()) continue;
      in_flight.insert(r.rank);
      const GroupInfo& g = r.groups.at(e.group_key);
      if (e.state == "timed_out" && (first_timeout == nullptr || e.end < first_timeout->end)) {
        first_timeout = &e;
        first_timeout_rank = r.rank;
        first_timeout_group = g.name;
      }
      if (e.coll > 0) {
        for (int m : g.ranks) {
          if (m == r.rank) continue;
          auto it = by_rank.find(m);
          bool behind = it == by_rank.end();
          if (!behind) {
            auto gm = it->second->groups.find(e.group_key);
            behind = gm == it->second->groups.end() || gm->second.last_coll < e.coll;
          }
          if (behind) waits.push_back({r.rank, m, &e, g.name});
        }
      } else {
        std::set<int> seen;
        for (const auto& [peer, is_recv] : e.peers) {
          if (peer != r.rank && seen.insert(peer).second) waits.push_back({r.rank, peer, &e, g.name});
        }
      }
    }
  }

  // Roots: ranks waited on that are not waiting themselves (or have no record), reached by
  // following the waits from every waiting rank.
  std::map<int, std::vector<const Wait*>> waits_on;  // on -> waits
  std::map<int, std::set<int>> out_edges;
  for (const Wait& w : waits) {
    waits_on[w.on].push_back(&w);
    out_edges[w.waiter].insert(w.on);
  }
  std::set<int> roots;
  {
    std::set<int> seen;
    std::vector<int> stack;
    for (const auto& [r, targets] : out_edges) stack.insert(stack.end(), targets.begin(), targets.end());
    while (!stack.empty()) {
      const int r = stack.back();
      stack.pop_back();
      if (!seen.insert(r).second) continue;
      // Reached through a wait: a rank that waits for nobody (not in communication, or only in
      // operations every peer joined) or has no record is where the waits end.
      if (by_rank.count(r) == 0 || out_edges.count(r) == 0) {
        roots.insert(r);
        continue;
      }
      for (int n : out_edges[r]) stack.push_back(n);
    }
  }

  auto waiter_summary = [&](const std::vector<const Wait*>& ws) {
    // "rank 2 stuck in all_reduce(sum) 8 x f32 #5 on tensor group [2, 3] since 12:00:01.250 UTC"
    std::vector<std::string> parts;
    std::set<int> listed;
    for (const Wait* w : ws) {
      if (!listed.insert(w->waiter).second) continue;
      parts.push_back("rank " + std::to_string(w->waiter) + " " +
                      (w->entry->state == "timed_out" ? "timed out" : "is stuck") + " in " + signature(*w->entry) +
                      " #" + std::to_string(w->entry->seq) + " on " + w->group_name + " since " +
                      clock_str(w->entry->start));
    }
    std::string s;
    for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? "; " : "") + parts[i];
    return s;
  };

  for (int root : roots) {
    const std::vector<const Wait*>& ws = waits_on[root];
    FlightFinding f;
    f.rank = root;
    // The operation the root never reached: prefer a collective of a direct waiter.
    const Wait* key = nullptr;
    for (const Wait* w : ws) {
      if (!key || (w->entry->coll > 0 && key->entry->coll == 0)) key = w;
    }
    std::set<int> waiting;
    for (const Wait* w : ws) waiting.insert(w->waiter);
    f.waiting.assign(waiting.begin(), waiting.end());
    if (key) {
      f.group = key->group_name;
      f.op = key->entry->op;
      f.seq = key->entry->seq;
    }
    std::string text;
    if (by_rank.count(root) == 0) {
      f.kind = FlightFinding::Kind::NoRecord;
      text = "rank " + std::to_string(root) + " wrote no flight record (it died, was killed, or hangs without reaching a "
             "timeout)";
      if (key) text += " and never joined " + key->entry->op + " #" + std::to_string(key->entry->seq) + " on " + key->group_name;
    } else {
      f.kind = FlightFinding::Kind::NeverReached;
      text = "rank " + std::to_string(root) + " never reached ";
      if (key) {
        text += key->entry->op + " #" + std::to_string(key->entry->seq) + " on " + key->group_name;
        if (key->entry->coll > 0) text += " (collective " + std::to_string(key->entry->coll) + " of that group)";
      } else {
        text += "the operation its peers wait in";
      }
      const RankRecord& rr = *by_rank.at(root);
      if (!rr.entries.empty()) {
        const Entry& last = rr.entries.back();
        text += "; its last operation was " + signature(last) + " #" + std::to_string(last.seq) + " on " +
                rr.groups.at(last.group_key).name + ", " + last.state + " at " +
                clock_str(last.end > 0 ? last.end : last.start);
      } else {
        text += "; it recorded no operation";
      }
    }
    if (!ws.empty()) text += "; " + waiter_summary(ws);
    f.text = text;
    a.findings.push_back(std::move(f));
  }

  // Waiting ranks that reach no root wait on each other.
  if (roots.empty() && !waits.empty()) {
    FlightFinding f;
    f.kind = FlightFinding::Kind::Cycle;
    std::vector<const Wait*> all;
    for (const Wait& w : waits) all.push_back(&w);
    f.rank = waits.front().on;
    f.group = waits.front().group_name;
    f.op = waits.front().entry->op;
    f.seq = waits.front().entry->seq;
    f.text = "the waiting ranks wait for each other (no rank outside communication): " + waiter_summary(all);
    a.findings.push_back(std::move(f));
  }

  // Everybody joined, nobody finished: a rank whose deadline fired far too late did not run.
  if (roots.empty() && waits.empty()) {
    const Entry* worst = nullptr;
    int worst_rank = -1;
    double worst_late = 0;
    std::string worst_group;
    for (const RankRecord& r : recs) {
      for (const Entry& e : r.entries) {
        if (e.state != "timed_out" || e.end <= 0) continue;
        const GroupInfo& g = r.groups.at(e.group_key);
        const double late = (e.end - e.start) - g.timeout_s;
        if (g.timeout_s > 0 && late > std::max(1.0, 0.5 * g.timeout_s) && late > worst_late) {
          worst = &e;
          worst_rank = r.rank;
          worst_late = late;
          worst_group = g.name;
        }
      }
    }
    if (worst != nullptr) {
      FlightFinding f;
      f.kind = FlightFinding::Kind::Stalled;
      f.rank = worst_rank;
      f.group = worst_group;
      f.op = worst->op;
      f.seq = worst->seq;
      char late[32];
      std::snprintf(late, sizeof late, "%.1f", worst_late);
      std::string others;
      for (const RankRecord& r : recs) {
        if (r.rank == worst_rank) continue;
        for (const Entry& e : r.entries) {
          if (e.in_flight() && e.group_key == worst->group_key) {
            others += (others.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r.rank) + " waits in " +
                      signature(e) + " #" + std::to_string(e.seq) + " since " + clock_str(e.start);
            f.waiting.push_back(r.rank);
          }
        }
      }
      f.text = "rank " + std::to_string(worst_rank) + " joined " + signature(*worst) + " #" +
               std::to_string(worst->seq) + " on " + worst_group + " but did not run: its deadline fired " + late +
               " s late (stopped, swapped out or starved)" + (others.empty() ? "" : "; " + others);
      a.findings.push_back(std::move(f));
    }
  }

  // Disagreements: the same collective position on the same group with different signatures.
  std::map<std::pair<std::string, uint64_t>, std::vector<std::pair<int, const Entry*>>> by_position;
  for (const RankRecord& r : recs) {
    for (const Entry& e : r.entries) {
      if (e.coll > 0) by_position[{e.group_key, e.coll}].emplace_back(r.rank, &e);
    }
  }
  for (const auto& [pos, list] : by_position) {
    std::map<std::string, std::vector<int>> sigs;
    for (const auto& [rank, e] : list) sigs[signature(*e)].push_back(rank);
    if (sigs.size() < 2) continue;
    // The ranks outside the largest agreeing set (ties: outside the set of the lowest rank).
    const std::vector<int>* majority = nullptr;
    for (const auto& [s, rs] : sigs) {
      if (!majority || rs.size() > majority->size() ||
          (rs.size() == majority->size() && rs.front() < majority->front())) {
        majority = &rs;
      }
    }
    FlightFinding f;
    f.kind = FlightFinding::Kind::Mismatch;
    const RankRecord& any = *by_rank.at(list.front().first);
    f.group = any.groups.at(pos.first).name;
    std::string text = "ranks disagree on collective " + std::to_string(pos.second) + " of " + f.group + ":";
    for (const auto& [s, rs] : sigs) {
      text += " rank" + std::string(rs.size() > 1 ? "s " : " ") + ranks_str(rs) + " called " + s + ";";
      if (&rs != majority && f.rank < 0) {
        f.rank = rs.front();
        for (const auto& [rank, e] : list) {
          if (rank == f.rank) {
            f.op = e->op;
            f.seq = e->seq;
          }
        }
      }
    }
    f.waiting = *majority;
    text.pop_back();
    f.text = text;
    a.findings.push_back(std::move(f));
  }

  if (!a.findings.empty()) {
    // The culprit: a root with the most waiting ranks (ties: the lowest rank); else a mismatch.
    const FlightFinding* best = nullptr;
    for (const FlightFinding& f : a.findings) {
      if (f.kind != FlightFinding::Kind::NeverReached && f.kind != FlightFinding::Kind::NoRecord &&
          f.kind != FlightFinding::Kind::Stalled) {
        continue;
      }
      if (!best || f.waiting.size() > best->waiting.size()) best = &f;
    }
    if (!best) best = &a.findings.front();
    a.culprit = best->rank;
    out << "culprit: rank " << a.culprit << "\n";
    for (const FlightFinding& f : a.findings) out << "- " << f.text << "\n";
    if (first_timeout != nullptr) {
      out << "first timeout: rank " << first_timeout_rank << " in " << signature(*first_timeout) << " #"
          << first_timeout->seq << " on " << first_timeout_group << " at " << clock_str(first_timeout->end);
      if (first_timeout_rank != a.culprit) out << " (a consequence, not the cause)";
      out << "\n";
    }
  } else if (in_flight.empty()) {
    out << "consistent: no operation in flight on any rank, and every rank recorded the same collectives\n";
  } else {
    out << "consistent: operations are in flight but every rank has joined them\n";
  }
  a.report = out.str();
  return a;
}

}  // namespace

FlightAnalysis analyze_flight_texts(const std::vector<std::string>& texts) {
  std::vector<RankRecord> recs;
  for (std::size_t i = 0; i < texts.size(); ++i) recs.push_back(parse_record(texts[i], "record " + std::to_string(i)));
  return analyze(std::move(recs));
}

FlightAnalysis analyze_flight_records(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw_io_error(dir, "is not a directory");
  std::vector<std::string> files;
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    const std::string name = de.path().filename().string();
    if (name.rfind("flight-rank", 0) == 0 && name.size() > 5 && name.substr(name.size() - 5) == ".json") {
      files.push_back(de.path().string());
    }
  }
  if (ec) throw_io_error(dir, "cannot list: " + ec.message());
  if (files.empty()) throw_io_error(dir, "holds no flight record (flight-rank*.json)");
  std::sort(files.begin(), files.end());
  std::vector<RankRecord> recs;
  std::set<int> seen;
  for (const std::string& path : files) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw_io_error(path, "cannot open");
    std::stringstream ss;
    ss << f.rdbuf();
    RankRecord r = parse_record(ss.str(), path);
    if (!seen.insert(r.rank).second) throw_io_error(path, "a second record of rank " + std::to_string(r.rank));
    recs.push_back(std::move(r));
  }
  return analyze(std::move(recs));
}

}  // namespace ptdp
