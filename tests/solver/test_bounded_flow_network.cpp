#include <gtest/gtest.h>

#include <optional>
#include <random>

#include "max_flow_oracle.hpp"
#include "perseus/solver/bounded_flow_network.hpp"

using namespace perseus;

namespace {

// A random DAG with long series chains (as in critical subgraphs): a spine 0 -> 1 -> ... -> n-1
// and a few shortcuts. Bounds in the millions, where the reference rule's floating-point check
// lets some one-unit shortfalls pass and not others.
std::vector<BoundedArc> random_network(std::mt19937& rng, int n) {
  std::uniform_int_distribution<std::int64_t> capacity(1'000'000, 1'000'060), lower(0, 40);
  std::vector<BoundedArc> arcs;
  for (int v = 0; v + 1 < n; ++v) arcs.push_back({v, v + 1, lower(rng), capacity(rng)});
  std::uniform_int_distribution<int> node(0, n - 1);
  for (int i = 0; i < n / 3; ++i) {
    int u = node(rng), v = node(rng);
    if (u == v) continue;
    if (u > v) std::swap(u, v);
    arcs.push_back({u, v, lower(rng), capacity(rng)});
  }
  return arcs;
}

// Whether some node other than the source and sink is out of balance: a shortfall that the
// feasibility rule let pass.
bool kept_a_shortfall(int n, const std::vector<BoundedArc>& arcs, const std::vector<std::int64_t>& flow) {
  std::vector<std::int64_t> balance(n, 0);
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    balance[arcs[i].to] += flow[i];
    balance[arcs[i].from] -= flow[i];
  }
  for (int v = 1; v + 1 < n; ++v)
    if (balance[v] != 0) return true;
  return false;
}

struct Cut {
  std::vector<int> forward, backward;
  bool operator==(const Cut&) const = default;
};

// The cut searched arc by arc: the source side is what the source reaches through open residuals.
Cut cut_by_arcs(int n, const std::vector<BoundedArc>& arcs, const std::vector<std::int64_t>& flow, Feasibility rule) {
  std::vector<char> side(n, 0);
  side[0] = 1;
  for (bool grew = true; grew;) {
    grew = false;
    for (std::size_t i = 0; i < arcs.size(); ++i) {
      const auto& arc = arcs[i];
      if (side[arc.from] && !side[arc.to] && residual_open(arc.upper, flow[i], rule)) side[arc.to] = 1, grew = true;
      if (side[arc.to] && !side[arc.from] && residual_open(flow[i], arc.lower, rule)) side[arc.from] = 1, grew = true;
    }
  }
  Cut cut;
  for (std::size_t i = 0; i < arcs.size(); ++i) {
    if (side[arcs[i].from] && !side[arcs[i].to]) cut.forward.push_back(static_cast<int>(i));
    if (!side[arcs[i].from] && side[arcs[i].to]) cut.backward.push_back(static_cast<int>(i));
  }
  return cut;
}

// A node with one arc in and one out (not the source or sink): the network contracts it away.
bool inside_a_chain(int n, const std::vector<BoundedArc>& arcs, int v) {
  int in = 0, out = 0;
  for (const auto& arc : arcs) in += arc.to == v, out += arc.from == v;
  return v != 0 && v != n - 1 && in == 1 && out == 1;
}

}  // namespace

// The planner re-solves on the same arcs with a few bounds changed, point after point. A re-solve
// must find exactly the flow that a solve from scratch finds when warm-started from the last flow
// (which is what the planner did before it kept its network): on random sequences of bound
// changes, under both feasibility rules, including flows that carry a shortfall the rule let pass.
// Its minimum cut, searched on the contracted chains (or read off the flow's last search), must be
// the arc-by-arc search's.
TEST(BoundedFlowNetwork, ResolvingEqualsSolvingAfreshFromTheLastFlow) {
  std::mt19937 rng(11);
  int resolved = 0, carried = 0, crossed_inside_chains = 0, taken_back = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 4 + trial % 30;
    const Feasibility rule = trial % 2 ? Feasibility::reference : Feasibility::exact;
    auto arcs = random_network(rng, n);
    BoundedFlowNetwork network;
    bool ok = network.solve(n, arcs, 0, n - 1, nullptr, rule);
    auto fresh = bounded_max_flow(n, arcs, 0, n - 1, MaxFlowAlgorithm::dinic, nullptr, rule);
    ASSERT_EQ(ok, fresh.has_value()) << "trial " << trial;
    std::uniform_int_distribution<int> pick(0, static_cast<int>(arcs.size()) - 1), change(-3, 3);
    for (int round = 0; ok && round < 30; ++round) {
      std::vector<int> changed;
      for (int k = 0; k < 1 + round % 3; ++k) {
        const int i = pick(rng);
        const std::int64_t flow = (*fresh)[i];
        if (rng() % 2) {
          arcs[i].lower = std::max<std::int64_t>(0, flow + change(rng));
        } else {
          arcs[i].upper = std::max<std::int64_t>(1, flow + change(rng));
        }
        arcs[i].lower = std::min(arcs[i].lower, arcs[i].upper);
        changed.push_back(i);
      }
      // Re-solves taken back (the planner's guesses on the wrong arcs, several points ahead) leave
      // no trace; one kept is the plain re-solve.
      auto guess = [&](std::vector<BoundedArc>& guessed_arcs) {
        std::vector<int> guessed;
        for (int k = 0; k < 3; ++k) {
          const int i = pick(rng);
          guessed_arcs[i].upper = std::max<std::int64_t>(1, (*fresh)[i] + change(rng));
          guessed_arcs[i].lower = std::min<std::int64_t>(guessed_arcs[i].lower + 2, guessed_arcs[i].upper);
          guessed.push_back(i);
        }
        if (!network.resolve(guessed_arcs, guessed, rule)) return false;
        Cut ignored;
        network.min_cut(guessed_arcs, rule, ignored.forward, ignored.backward);
        return true;
      };
      if (round % 2 == 0) {  // two guesses in a row, taken back to the second checkpoint, then the first
        BoundedFlowNetwork::Checkpoint first, second;
        auto guessed_arcs = arcs;
        network.checkpoint(first);
        if (guess(guessed_arcs)) {
          network.checkpoint(second);
          guess(guessed_arcs);
          network.undo_to(second);
        }
        network.undo_to(first);
        ++taken_back;
      }
      const bool kept = round % 3 == 0;
      BoundedFlowNetwork::Checkpoint before;
      if (kept) network.checkpoint(before);
      ok = network.resolve(arcs, changed, rule);
      if (kept && ok && round % 2 == 1) {  // the planner's case: this point confirmed, a guess after it not
        BoundedFlowNetwork::Checkpoint after;
        network.checkpoint(after);
        network.forget_before(after);
        auto guessed_arcs = arcs;
        guess(guessed_arcs);
        network.undo_to(after);
        ++taken_back;
      }
      if (round % 5 == 0) network.end_checkpoints();
      fresh = bounded_max_flow(n, arcs, 0, n - 1, MaxFlowAlgorithm::dinic, &*fresh, rule);
      ASSERT_EQ(ok, fresh.has_value()) << "trial " << trial << " round " << round;
      if (!ok) break;
      ++resolved;
      std::vector<std::int64_t> mine(arcs.size());
      for (std::size_t i = 0; i < arcs.size(); ++i) mine[i] = network.flow(static_cast<int>(i));
      ASSERT_EQ(mine, *fresh) << "trial " << trial << " round " << round;
      carried += kept_a_shortfall(n, arcs, mine);
      // The cut, searched chain by chain, is the one an arc-by-arc search finds.
      Cut cut;
      network.min_cut(arcs, rule, cut.forward, cut.backward);
      const Cut expected = cut_by_arcs(n, arcs, mine, rule);
      ASSERT_EQ(cut, expected) << "trial " << trial << " round " << round;
      for (int i : cut.forward) crossed_inside_chains += inside_a_chain(n, arcs, arcs[i].from);
      for (int i : cut.backward) crossed_inside_chains += inside_a_chain(n, arcs, arcs[i].to);
    }
  }
  EXPECT_GT(resolved, 1000);
  EXPECT_GT(carried, 20);  // the case where the last flow is not balanced is exercised
  EXPECT_GT(crossed_inside_chains, 100);
  EXPECT_GT(taken_back, 500);
}

// Without a last flow (a failed call), a re-solve starts from the lower bounds, as a solve does.
TEST(BoundedFlowNetwork, ResolvingAfterAFailureSolvesFromTheLowerBounds) {
  std::vector<BoundedArc> arcs = {{0, 1, 0, 10}, {1, 2, 0, 4}, {0, 2, 0, 3}};
  BoundedFlowNetwork network;
  ASSERT_TRUE(network.solve(3, arcs, 0, 2, nullptr, Feasibility::exact));
  EXPECT_EQ(network.flow(0), 4);
  arcs[0].lower = 9;  // node 1 cannot pass on 9 units
  EXPECT_FALSE(network.resolve(arcs, {0}, Feasibility::exact));
  arcs[0].lower = 2;
  ASSERT_TRUE(network.resolve(arcs, {0}, Feasibility::exact));
  EXPECT_EQ(network.flow(0), 4);
  EXPECT_EQ(network.flow(1), 4);
  EXPECT_EQ(network.flow(2), 3);
}
