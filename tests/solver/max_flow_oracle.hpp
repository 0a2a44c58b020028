#pragma once
// Test-only maximum flows within bounds: Boost.Graph's push-relabel (the oracle the solver's Dinic
// network is checked against) and that Dinic network behind the same call.
#include <cstdint>
#include <optional>
#include <vector>

#include "perseus/solver/max_flow.hpp"
#include "perseus/solver/phillips_dessouky.hpp"

namespace perseus {

enum class MaxFlowAlgorithm { dinic, boost_push_relabel };

// The flow on each arc of a maximum s-t flow within the bounds, or nullopt when no flow satisfies
// every lower bound (first a feasible circulation with an infinite t->s arc, then a maximum flow
// on its residual, as the reference planner does). `initial`: a per-arc starting flow within the
// bounds (a warm start; Dinic uses it, the oracle ignores it).
std::optional<std::vector<std::int64_t>> bounded_max_flow(int num_nodes, const std::vector<BoundedArc>& arcs,
                                                          int source, int sink, MaxFlowAlgorithm algorithm,
                                                          const std::vector<std::int64_t>* initial = nullptr,
                                                          Feasibility feasibility = Feasibility::exact);

// SolverOptions::max_flow_oracle: the Boost oracle.
MaxFlowOracle boost_max_flow_oracle();

}  // namespace perseus
