// The rank layout is pure arithmetic: checked against Megatron's documented example and the
// closed form for every layout of up to 64 ranks, without starting any process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "base/error.h"
#include "core/parallel/layout.h"

using ptdp::GroupKind;
using ptdp::Layout;
using ptdp::ParallelConfig;
using Groups = std::vector<std::vector<int>>;

TEST_CASE("16 ranks with t=2, p=4 reproduce Megatron's documented groups", "[layout]") {
  const Layout l(ParallelConfig{16, 2, 4, 1});
  CHECK(l.data() == 2);
  CHECK(l.all_groups(GroupKind::Tensor) ==
        Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(l.all_groups(GroupKind::Pipeline) ==
        Groups{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
  CHECK(l.all_groups(GroupKind::Data) ==
        Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(l.all_groups(GroupKind::Model) ==
        Groups{{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}});
  CHECK(l.all_groups(GroupKind::Embedding) == Groups{{0, 12}, {1, 13}, {2, 14}, {3, 15}});
  CHECK(l.members(GroupKind::Embedding, 5).empty());  // a middle stage
  CHECK(l.members(GroupKind::Pipeline, 9) == std::vector<int>{1, 5, 9, 13});
  CHECK(l.str() == "W=16 (t=2, p=4, d=2, v=1)");
}

TEST_CASE("every layout up to 64 ranks partitions the world consistently", "[layout]") {
  for (int w = 1; w <= 64; ++w) {
    for (int t = 1; t <= w; ++t) {
      for (int p = 1; p <= w; ++p) {
        if (w % (t * p) != 0) continue;
        const Layout l(ParallelConfig{w, t, p, 1});
        const int d = w / (t * p);
        INFO("W=" << w << " t=" << t << " p=" << p);
        for (int r = 0; r < w; ++r) {
          const auto c = l.coords(r);
          REQUIRE(l.rank_of(c) == r);
          REQUIRE(r == c.pp * d * t + c.dp * t + c.tp);
        }
        // Tensor, pipeline, data and model groups partition the world; sizes are t, p, d, t*p.
        const std::pair<GroupKind, int> kinds[] = {
            {GroupKind::Tensor, t}, {GroupKind::Pipeline, p}, {GroupKind::Data, d}, {GroupKind::Model, t * p}};
        for (auto [kind, size] : kinds) {
          const auto groups = l.all_groups(kind);
          REQUIRE(static_cast<int>(groups.size()) == w / size);
          std::set<int> seen;
          for (const auto& g : groups) {
            REQUIRE(static_cast<int>(g.size()) == size);
            for (int r : g) {
              REQUIRE(seen.insert(r).second);
              // Each member sees the same group, and it contains the member.
              REQUIRE(l.members(kind, r) == g);
            }
          }
          REQUIRE(static_cast<int>(seen.size()) == w);
        }
        // Tensor groups are consecutive; data groups stride t; pipeline groups stride t*d.
        for (const auto& g : l.all_groups(GroupKind::Tensor))
          for (std::size_t i = 1; i < g.size(); ++i) REQUIRE(g[i] == g[i - 1] + 1);
        for (const auto& g : l.all_groups(GroupKind::Data))
          for (std::size_t i = 1; i < g.size(); ++i) REQUIRE(g[i] == g[i - 1] + t);
        for (const auto& g : l.all_groups(GroupKind::Pipeline))
          for (std::size_t i = 1; i < g.size(); ++i) REQUIRE(g[i] == g[i - 1] + t * d);
        // Embedding: first and last stage of each pipeline; one rank when p == 1.
        for (const auto& g : l.all_groups(GroupKind::Embedding)) {
          REQUIRE(static_cast<int>(g.size()) == (p > 1 ? 2 : 1));
          REQUIRE(l.coords(g.front()).pp == 0);
          REQUIRE(l.coords(g.back()).pp == p - 1);
        }
      }
    }
  }
}

TEST_CASE("invalid layouts are rejected with the numbers in the message", "[layout]") {
  const auto message = [](ParallelConfig c) -> std::string {
    try {
      Layout l(c);
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      return e.what();
    }
    return "no error";
  };
  CHECK(message({12, 5, 1, 1}) == "world size 12 is not divisible by tensor size 5 x pipeline size 1 = 5");
  CHECK(message({8, 2, 3, 1}).find("not divisible by tensor size 2 x pipeline size 3 = 6") != std::string::npos);
  CHECK(message({8, 0, 1, 1}) == "tensor parallel size must be > 0, got 0");
  CHECK(message({8, 1, -2, 1}) == "pipeline parallel size must be > 0, got -2");
  CHECK(message({8, 1, 1, 0}) == "virtual pipeline size must be > 0, got 0");
  CHECK(message({0, 1, 1, 1}) == "world size must be > 0, got 0");
  CHECK(message({8, 2, 1, 2}) == "virtual pipeline size 2 needs pipeline parallel size > 1, got 1");
  CHECK(message({8, 2, 2, 2}) == "no error");
  const Layout l(ParallelConfig{8, 2, 2, 1});
  CHECK_THROWS_AS(l.coords(8), ptdp::Error);
  CHECK_THROWS_AS(l.members(GroupKind::Tensor, -1), ptdp::Error);
}

TEST_CASE("context parallelism: Megatron's tp-cp-dp-pp order with t=2, c=2, d=2, p=2", "[layout]") {
  ParallelConfig cfg{16, 2, 2, 1};
  cfg.context = 2;
  const Layout l(cfg);
  CHECK(l.data() == 2);
  CHECK(l.context() == 2);
  CHECK(l.all_groups(GroupKind::Tensor) ==
        Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}});
  CHECK(l.all_groups(GroupKind::Context) ==
        Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(l.all_groups(GroupKind::Data) ==
        Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  CHECK(l.all_groups(GroupKind::DataContext) == Groups{{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}});
  CHECK(l.all_groups(GroupKind::Pipeline) ==
        Groups{{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}});
  CHECK(l.all_groups(GroupKind::Model) == Groups{{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}});
  CHECK(l.all_groups(GroupKind::Embedding) == l.all_groups(GroupKind::Pipeline));
  const auto c = l.coords(11);  // 11 = ((1 * 2 + 0) * 2 + 1) * 2 + 1
  CHECK((c.pp == 1 && c.dp == 0 && c.cp == 1 && c.tp == 1));
  CHECK(l.str() == "W=16 (t=2, p=2, d=2, v=1, c=2)");
  for (int w = 1; w <= 32; ++w) {
    for (int t = 1; t <= w; ++t) {
      for (int p = 1; p <= w / t; ++p) {
        for (int cp = 1; cp <= w / (t * p); ++cp) {
          if (w % (t * p * cp) != 0) continue;
          ParallelConfig x{w, t, p, 1};
          x.context = cp;
          const Layout m(x);
          const int d = w / (t * p * cp);
          INFO("W=" << w << " t=" << t << " p=" << p << " c=" << cp);
          REQUIRE(m.data() == d);
          for (int r = 0; r < w; ++r) {
            const auto k = m.coords(r);
            REQUIRE(m.rank_of(k) == r);
            REQUIRE(r == ((k.pp * d + k.dp) * cp + k.cp) * t + k.tp);
          }
          const std::pair<GroupKind, int> kinds[] = {{GroupKind::Context, cp}, {GroupKind::DataContext, d * cp}};
          for (auto [kind, size] : kinds) {
            std::set<int> seen;
            for (const auto& g : m.all_groups(kind)) {
              REQUIRE(static_cast<int>(g.size()) == size);
              for (int r : g) REQUIRE(seen.insert(r).second);
            }
            REQUIRE(static_cast<int>(seen.size()) == w);
          }
        }
      }
    }
  }
  ParallelConfig bad{8, 2, 1, 1};
  bad.context = 3;
  CHECK_THROWS_WITH(Layout(bad), Catch::Contains("context parallel size 3"));
  bad.context = 0;
  CHECK_THROWS_WITH(Layout(bad), Catch::Contains("context parallel size must be > 0"));
}

namespace {

ParallelConfig expert_config(int w, int t, int p, int c, int e, int etp) {
  ParallelConfig x{w, t, p, 1};
  x.context = c;
  x.expert_model = e;
  x.expert_tensor = etp;
  return x;
}

}  // namespace

TEST_CASE("expert groups fold etp x e x edp over the t*c*d ranks of each stage: t=2, d=4, e=4, etp=1, p=2",
          "[layout][experts]") {
  const Layout l(expert_config(16, 2, 2, 1, 4, 1));
  CHECK(l.expert_model() == 4);
  CHECK(l.expert_tensor() == 1);
  CHECK(l.expert_data() == 2);
  CHECK(l.all_groups(GroupKind::ExpertTensor).size() == 16);  // groups of one
  CHECK(l.all_groups(GroupKind::ExpertModel) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(l.all_groups(GroupKind::ExpertData) ==
        Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
  CHECK(l.all_groups(GroupKind::ExpertTensorAndModel) == l.all_groups(GroupKind::ExpertModel));
  CHECK(l.all_groups(GroupKind::TensorContext) == l.all_groups(GroupKind::Tensor));
  // Rank 13: stage 1, local 5: etp 0, ep 1, edp 1; its attention coordinates are tp 1, dp 2.
  const auto k = l.coords(13);
  CHECK((k.pp == 1 && k.tp == 1 && k.dp == 2 && k.etp == 0 && k.ep == 1 && k.edp == 1));
  CHECK(l.str() == "W=16 (t=2, p=2, d=4, v=1, e=4, etp=1)");
}

TEST_CASE("expert groups: t=2, d=2, e=2, etp=2, p=2 (each expert split like the dense MLP)", "[layout][experts]") {
  const Layout l(expert_config(8, 2, 2, 1, 2, 2));
  CHECK(l.expert_data() == 1);
  CHECK(l.all_groups(GroupKind::ExpertTensor) == l.all_groups(GroupKind::Tensor));
  CHECK(l.all_groups(GroupKind::ExpertModel) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(l.all_groups(GroupKind::ExpertData) == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  CHECK(l.all_groups(GroupKind::ExpertTensorAndModel) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(l.str() == "W=8 (t=2, p=2, d=2, v=1, e=2)");
}

TEST_CASE("expert groups: t=4, e=2, etp=2, p=2 (experts split over fewer ranks than attention)", "[layout][experts]") {
  const Layout l(expert_config(8, 4, 2, 1, 2, 2));
  CHECK(l.data() == 1);
  CHECK(l.expert_data() == 1);
  CHECK(l.all_groups(GroupKind::ExpertTensor) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(l.all_groups(GroupKind::ExpertModel) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(l.all_groups(GroupKind::ExpertTensorAndModel) == l.all_groups(GroupKind::Tensor));
  CHECK(l.str() == "W=8 (t=4, p=2, d=1, v=1, e=2, etp=2)");
  // etp = 1 with the same t: the experts' data-parallel group crosses the tensor ranks.
  const Layout m(expert_config(8, 4, 2, 1, 2, 1));
  CHECK(m.expert_data() == 2);
  CHECK(m.all_groups(GroupKind::ExpertData) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(m.all_groups(GroupKind::ExpertModel) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
}

TEST_CASE("expert groups: c=2, d=2, e=4, p=2 (expert parallelism over the context and data ranks)", "[layout][experts]") {
  const Layout l(expert_config(8, 1, 2, 2, 4, 0));
  CHECK(l.expert_tensor() == 1);  // 0: t
  CHECK(l.expert_data() == 1);
  CHECK(l.all_groups(GroupKind::ExpertModel) == l.all_groups(GroupKind::DataContext));
  CHECK(l.all_groups(GroupKind::ExpertModel) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}});
  CHECK(l.all_groups(GroupKind::TensorContext) == l.all_groups(GroupKind::Context));
  CHECK(l.all_groups(GroupKind::TensorContext) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  // With t = 2 the tensor+context groups hold t*c ranks: those of one data rank.
  const Layout m(expert_config(16, 2, 2, 2, 4, 1));
  CHECK(m.all_groups(GroupKind::TensorContext) == Groups{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}});
  CHECK(m.all_groups(GroupKind::ExpertData) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}});
}

TEST_CASE("every expert layout up to 32 ranks partitions each stage; e=1, etp=t gives the dense groups",
          "[layout][experts]") {
  int layouts = 0;
  for (int w = 1; w <= 32; ++w) {
    for (int t = 1; t <= w; ++t) {
      for (int p = 1; p <= w / t; ++p) {
        for (int c = 1; c <= w / (t * p); ++c) {
          if (w % (t * p * c) != 0) continue;
          const int stage = w / p;
          for (int e = 1; e <= stage; ++e) {
            for (int etp = 1; etp * e <= stage; ++etp) {
              if (stage % (e * etp) != 0) continue;
              const Layout l(expert_config(w, t, p, c, e, etp));
              const int edp = stage / (e * etp);
              INFO("W=" << w << " t=" << t << " p=" << p << " c=" << c << " e=" << e << " etp=" << etp);
              ++layouts;
              REQUIRE(l.expert_data() == edp);
              for (int r = 0; r < w; ++r) {
                const auto k = l.coords(r);
                REQUIRE(l.expert_rank_of(k.pp, k.etp, k.ep, k.edp) == r);
                REQUIRE((k.etp < etp && k.ep < e && k.edp < edp));
              }
              const std::pair<GroupKind, int> kinds[] = {{GroupKind::ExpertTensor, etp},
                                                         {GroupKind::ExpertModel, e},
                                                         {GroupKind::ExpertData, edp},
                                                         {GroupKind::ExpertTensorAndModel, etp * e},
                                                         {GroupKind::TensorContext, t * c}};
              for (auto [kind, size] : kinds) {
                std::set<int> seen;
                for (const auto& g : l.all_groups(kind)) {
                  REQUIRE(static_cast<int>(g.size()) == size);
                  const int pp = l.coords(g.front()).pp;
                  for (int r : g) {
                    REQUIRE(seen.insert(r).second);
                    REQUIRE(l.coords(r).pp == pp);  // expert groups stay inside a stage
                    REQUIRE(l.members(kind, r) == g);
                  }
                }
                REQUIRE(static_cast<int>(seen.size()) == w);
              }
              // The groups ProcessGroups shares communicators between hold the same ranks in the
              // same order (groups.cpp, resolved()).
              if (etp == t) REQUIRE(l.all_groups(GroupKind::ExpertTensor) == l.all_groups(GroupKind::Tensor));
              if (e == 1 && etp == t) {
                REQUIRE(l.all_groups(GroupKind::ExpertTensorAndModel) == l.all_groups(GroupKind::Tensor));
                REQUIRE(l.all_groups(GroupKind::ExpertData) == l.all_groups(GroupKind::DataContext));
              }
              if (c == 1) REQUIRE(l.all_groups(GroupKind::TensorContext) == l.all_groups(GroupKind::Tensor));
            }
          }
        }
      }
    }
  }
  CHECK(layouts > 500);
}

TEST_CASE("expert layouts that cannot exist are refused naming the flags", "[layout][experts][errors]") {
  const auto message = [](ParallelConfig c) -> std::string {
    try {
      Layout l(c);
    } catch (const ptdp::Error& e) {
      CHECK(e.code() == ptdp::ErrorCode::InvalidArgument);
      return e.what();
    }
    return "no error";
  };
  CHECK(message(expert_config(8, 2, 2, 1, 0, 1)) ==
        "expert model parallel size (--expert-model-parallel-size) must be > 0, got 0");
  CHECK(message(expert_config(8, 2, 2, 1, 1, -1)).find("expert tensor parallel size (--expert-tensor-parallel-size) must "
                                                       "be > 0 (0: the tensor parallel size), got -1") == 0);
  // 4 ranks per stage cannot hold e = 3, nor e x etp = 2 x 4.
  CHECK(message(expert_config(8, 2, 2, 1, 3, 1)) ==
        "the 4 ranks of a pipeline stage (tensor 2 x context 1 x data 2) are not divisible by expert model parallel "
        "size (--expert-model-parallel-size) 3 x expert tensor parallel size (--expert-tensor-parallel-size) 1");
  CHECK(message(expert_config(8, 2, 2, 1, 2, 4)).find("are not divisible by expert model parallel size "
                                                      "(--expert-model-parallel-size) 2 x expert tensor parallel size "
                                                      "(--expert-tensor-parallel-size) 4") != std::string::npos);
  // etp defaults to t: e = 4 with t = 2 needs 8 ranks per stage.
  CHECK(message(expert_config(8, 2, 2, 1, 4, 0)).find("expert tensor parallel size (--expert-tensor-parallel-size) 2") !=
        std::string::npos);
  CHECK(message(expert_config(8, 2, 2, 1, 2, 0)) == "no error");
}
