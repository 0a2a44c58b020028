#pragma once
// GET and PUT /power_budget (docs/server.md#a-power-budget-for-the-cluster), routed from
// route_request.
#include <functional>
#include <string>

#include "perseus/server/http_server.hpp"

namespace perseus::server {

// The largest PUT /power_budget body (413 beyond it): {"watts": ..., "seconds": ...} needs far less.
inline constexpr std::size_t kMaxBudgetBodyBytes = 4096;

// Answers `method` on /power_budget. A change needs the administrator: the server's bearer token,
// or, on a server without one, a request from this machine (loopback); 403 otherwise. Its body is
// checked on the calling thread (400 naming the field, 413 above kMaxBudgetBodyBytes) and the
// budget is stored (when the server keeps records) before it is applied and acknowledged.
void route_power_budget(JobManager& jobs, const std::string& method, const std::string& body,
                        std::function<void(HttpResponse)> respond, const Credentials& credentials);

}  // namespace perseus::server
