#include "perseus/server/budget_routes.hpp"

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <mutex>

#include "perseus/server/power_budget.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::server {

namespace {

// Changes are stored and handed to the job manager's strand in one order: the store's last word
// is the budget that holds.
std::mutex change_order;

}  // namespace

void route_power_budget(JobManager& jobs, const std::string& method, const std::string& body,
                        std::function<void(HttpResponse)> respond, const Credentials& credentials) {
  if (method == "GET") {
    boost::asio::post(jobs.executor(), [&jobs, respond = std::move(respond)] {
      respond({200, json_body(jobs.power_budget_status())});
    });
    return;
  }
  if (method != "PUT") return respond(refusal_response(Refusal::method_not_allowed, "Method Not Allowed"));
  if (!credentials.admin && !credentials.loopback)
    return respond(refusal_response(Refusal::forbidden,
                                    "changing the power budget needs the server's bearer token "
                                    "or, on a server without one, a request from this machine"));
  if (body.size() > kMaxBudgetBodyBytes)
    return respond(refusal_response(Refusal::too_large, fmt::format("body: {} bytes, above the {} a power budget takes",
                                                                    body.size(), kMaxBudgetBodyBytes)));
  BudgetRequest request;
  try {
    request = budget_request_from_json(parse_body(body));
  } catch (const RequestError& e) {
    return respond(refusal_response(Refusal::malformed, e.what()));
  }
  std::lock_guard lock(change_order);
  const auto& settings = jobs.settings();
  if (settings.dump_data) {
    const auto file = std::filesystem::path(settings.dump_dir) / kBudgetFile;
    try {
      store_budget(file, settings.power_budget_w, request);
    } catch (const std::exception& e) {  // not durable: not acknowledged
      spdlog::error("power budget: could not store it in {}: {}", file.string(), safe_text(e.what()));
      return respond(refusal_response(
          Refusal::not_stored, fmt::format("the power budget could not be stored ({}); it is unchanged", e.what())));
    }
  }
  boost::asio::post(jobs.executor(), [&jobs, request, respond = std::move(respond)] {
    jobs.set_power_budget(request);
    respond({200, json_body(jobs.power_budget_status())});
  });
}

}  // namespace perseus::server
