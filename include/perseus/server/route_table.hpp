#pragma once
// The HTTP API's routes (docs/server.md#http-api), written once: the router dispatches on them
// (routes.cpp) and the metrics label requests by them (metrics.hpp's route_of), so that a route
// added here is both served and counted.
#include <array>
#include <string_view>

namespace perseus::server {

enum class Route {
  page,           // GET /: the web page
  info,           // GET /info
  register_job,   // POST /register_job
  register_rank,  // POST /register_rank, /register_rank/{job_id}
  schedule,       // GET /schedule/{job_id}?rank=R
  result,         // POST /result/{job_id}
  heartbeat,      // POST /heartbeat/{job_id}
  jobs,           // GET /jobs, /jobs/{job_id}, /jobs/{job_id}/frontier, /jobs/{job_id}/timeline.svg
  straggler,      // POST and DELETE /straggler/{job_id}
  leave,          // POST /leave/{job_id}
  metrics,        // GET /metrics
  power_budget,   // GET and PUT /power_budget
  other,          // no route: 404
};

struct RouteSpec {
  Route route;
  std::string_view name;                    // the path's first segment, and the route's label in the metrics
  bool bare;                                // served as /name
  bool with_id;                             // served as /name/{job_id...}
  std::array<std::string_view, 2> methods;  // the methods it takes (empty: none more)
};

inline constexpr std::array<RouteSpec, 12> kRoutes = {{
    {Route::page, "", true, false, {"GET", ""}},
    {Route::info, "info", true, false, {"GET", ""}},
    {Route::register_job, "register_job", true, false, {"POST", ""}},
    {Route::register_rank, "register_rank", true, true, {"POST", ""}},
    {Route::schedule, "schedule", false, true, {"GET", ""}},
    {Route::result, "result", false, true, {"POST", ""}},
    {Route::heartbeat, "heartbeat", false, true, {"POST", ""}},
    {Route::jobs, "jobs", true, true, {"GET", ""}},
    {Route::straggler, "straggler", false, true, {"POST", "DELETE"}},
    {Route::leave, "leave", false, true, {"POST", ""}},
    {Route::metrics, "metrics", true, false, {"GET", ""}},
    {Route::power_budget, "power_budget", true, false, {"GET", "PUT"}},
}};

// The route whose name is the path's first segment ("/" is the page's); other when none is.
constexpr const RouteSpec* route_spec(std::string_view path) {
  if (path == "/") return &kRoutes[0];
  if (path.empty() || path.front() != '/') return nullptr;
  const std::string_view first = path.substr(1, path.find('/', 1) - 1);
  for (const auto& spec : kRoutes)
    if (!spec.name.empty() && spec.name == first) return &spec;
  return nullptr;
}

// A request to `path` on its route: the route when the path has a form the route serves (bare,
// or with a non-empty rest after "/name/"), and that rest.
struct RouteMatch {
  Route route = Route::other;
  std::string_view rest;  // after "/name/"; empty for a bare path
};

constexpr RouteMatch match_route(std::string_view path) {
  const RouteSpec* spec = route_spec(path);
  if (!spec) return {};
  if (spec->route == Route::page) return {Route::page, {}};
  const std::size_t bare_size = spec->name.size() + 1;
  if (path.size() == bare_size) return spec->bare ? RouteMatch{spec->route, {}} : RouteMatch{};
  if (spec->with_id && path.size() > bare_size + 1) return {spec->route, path.substr(bare_size + 1)};
  return {};
}

constexpr bool route_takes(Route route, std::string_view method) {
  for (const auto& spec : kRoutes)
    if (spec.route == route)
      return method == spec.methods[0] || (!spec.methods[1].empty() && method == spec.methods[1]);
  return false;
}

}  // namespace perseus::server
