// The HTTP routes (docs/server.md#http-api), mapped onto the job manager: requests are parsed and checked on
// whichever I/O thread read them, then handed to the job manager's strand. Paths are percent-decoded; job ids
// contain '+', which clients may send as is or as %2B.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <optional>

#include "perseus/protocol/job_secret.hpp"
#include "perseus/server/budget_routes.hpp"
#include "perseus/server/http_server.hpp"
#include "perseus/server/route_table.hpp"
#include "perseus/server/wire.hpp"
#include "perseus/server/web_page.hpp"
#include "perseus/util/safe_text.hpp"

namespace perseus::server {
namespace {

using nlohmann::json;

HttpResponse ok(const json& body) { return {200, json_body(body)}; }

// Runs `work(respond)` on the job manager's strand: parsing happened on this I/O thread, job state
// changes happen one at a time there.
template <typename Work>
void on_jobs(JobManager& jobs, std::function<void(HttpResponse)> respond, Work work) {
  boost::asio::post(jobs.executor(), [respond = std::move(respond), work = std::move(work)]() mutable {
    try {
      work(respond);
    } catch (const RequestError& e) {
      respond(refusal_response(e.refusal(), e.what()));
    } catch (const std::exception& e) {
      spdlog::error("job manager: {}", safe_text(e.what()));
      respond(refusal_response(Refusal::internal, fmt::format("internal error: {}", e.what())));
    }
  });
}

// The reply to a request that changed state, once the job manager says it is durable.
JobManager::Ack acknowledge(const std::function<void(HttpResponse)>& reply) {
  return [reply](std::optional<RequestError> refused) {
    if (refused) return reply(refusal_response(refused->refusal(), refused->what()));
    reply(ok(nullptr));
  };
}

}  // namespace

void route_request(JobManager& jobs, const std::string& method, const std::string& target, const std::string& body,
                   std::function<void(HttpResponse)> respond, const Credentials& credentials) {
  auto question = target.find('?');
  std::string path = percent_decode(std::string_view(target).substr(0, question));
  std::string_view query =
      question == std::string::npos ? std::string_view() : std::string_view(target).substr(question + 1);
  auto fail = [&](Refusal refusal, const std::string& detail) { respond(refusal_response(refusal, detail)); };
  // Every route that changes a job checks, on the strand, that the request may (JobManager::authorize).
  auto allowed = [&jobs, secret = credentials.job_secret, admin = credentials.admin](const std::string& id) {
    jobs.authorize(id, secret, admin);
  };
  try {
    const RouteMatch match = match_route(path);
    if (match.route == Route::other) return fail(Refusal::not_found, "Not Found");
    if (!route_takes(match.route, method)) return fail(Refusal::method_not_allowed, "Method Not Allowed");
    const std::string id(match.rest);  // the job id, for the routes of one job
    switch (match.route) {
      case Route::page: {
        // The web page (web_page.hpp): static, no job data in it; the one route the token does not
        // guard (exactly GET /, see http_server.cpp).
        HttpResponse page{200,
                          std::string(web_page()),
                          {{"Content-Security-Policy", kWebPagePolicy}, {"Cache-Control", "no-cache"}},
                          kWebPageContentType};
        return respond(std::move(page));
      }
      case Route::info:
        return respond(ok(info_json(jobs.settings())));
      case Route::power_budget:
        return route_power_budget(jobs, method, body, std::move(respond), credentials);
      case Route::metrics:
        return on_jobs(jobs, std::move(respond), [&jobs](auto& reply) {
          HttpResponse response{200, jobs.metrics_text()};
          response.content_type = kMetricsContentType;
          reply(std::move(response));
        });
      case Route::register_job: {
        JobInfo info = job_info_from_json(parse_body(body));
        // A client that asks for a secret, or brings one (perseus's own), gets it in a header: the
        // body stays the job id as a JSON string, as the artifact's and Zeus's clients read it.
        const std::string& secret = credentials.job_secret;
        if (!secret.empty() && secret != protocol::kAskForJobSecret && !protocol::is_job_secret(secret))
          throw RequestError(Refusal::invalid_request, fmt::format("header {}: 'new' or 32 to 128 lowercase "
                                                                   "hexadecimal digits",
                                                                   kJobSecretHeader));
        return on_jobs(jobs, std::move(respond), [&jobs, info = std::move(info), secret](auto& reply) mutable {
          jobs.register_job(
              std::move(info), secret,
              [reply, with_secret = !secret.empty()](std::optional<RequestError> refused, const JobInfo& job) {
                if (refused) return reply(refusal_response(refused->refusal(), refused->what()));
                HttpResponse response = ok(job.job_id);
                if (with_secret) response.headers.emplace_back(kJobSecretHeader, job.job_secret);
                reply(std::move(response));
              });
        });
      }
      case Route::register_rank: {
        RankInfo info = rank_info_from_json(parse_body(body));
        if (!id.empty()) {
          if (!info.job_id.empty() && info.job_id != id)
            throw RequestError(Refusal::invalid_request, "field 'job_id': differs from the job id in the path");
          info.job_id = id;
        }
        if (info.job_id.empty()) throw RequestError(Refusal::invalid_request, "field 'job_id': missing");
        return on_jobs(jobs, std::move(respond), [&jobs, info = std::move(info), allowed](auto& reply) mutable {
          std::string job_id = info.job_id;
          allowed(job_id);
          jobs.register_rank(job_id, std::move(info), acknowledge(reply));
        });
      }
      case Route::schedule: {
        int rank = rank_parameter(query);
        return on_jobs(jobs, std::move(respond), [&jobs, id, rank, allowed](auto& reply) {
          allowed(id);
          jobs.request_schedule(id, rank, [reply](std::optional<Refusal> refusal, const json& body) {
            reply({refusal ? http_status(*refusal) : 200, json_body(body)});
          });
        });
      }
      case Route::result: {
        ProfilingResult result =
            profiling_result_from_text(body, {jobs.settings().max_result_iterations, kMaxResultInstructions});
        return on_jobs(jobs, std::move(respond), [&jobs, id, result = std::move(result), allowed](auto& reply) mutable {
          allowed(id);
          jobs.report_result(id, std::move(result), acknowledge(reply));
        });
      }
      case Route::heartbeat: {
        Heartbeat beat = heartbeat_from_json(parse_body(body));
        return on_jobs(jobs, std::move(respond), [&jobs, id, beat, allowed](auto& reply) {
          allowed(id);
          jobs.heartbeat(id, beat);
          reply(ok(jobs.heartbeat_reply(id)));  // the power budget's limit for the rank now, or null
        });
      }
      case Route::jobs: {
        // What the web page draws of one job: its frontier (JSON) and its deployed plan's timeline
        // (SVG). These suffixes win over a job id that would end with them.
        const std::size_t last_slash = id.rfind('/');
        if (last_slash != std::string::npos && (id.ends_with("/frontier") || id.ends_with("/timeline.svg"))) {
          bool svg = id.ends_with("/timeline.svg");
          return on_jobs(jobs, std::move(respond), [&jobs, id = id.substr(0, last_slash), svg](auto& reply) {
            if (!svg) return reply(ok(jobs.job_frontier(id)));
            reply({200, jobs.job_timeline_svg(id), {{"Content-Security-Policy", kSvgPolicy}}, "image/svg+xml"});
          });
        }
        return on_jobs(jobs, std::move(respond),
                       [&jobs, id](auto& reply) { reply(ok(id.empty() ? jobs.jobs_summary() : jobs.job_status(id))); });
      }
      case Route::straggler: {
        std::optional<StragglerNotice> notice;
        if (method == "POST") notice = straggler_from_json(parse_body(body));
        return on_jobs(jobs, std::move(respond), [&jobs, id, notice, allowed](auto& reply) {
          allowed(id);
          jobs.straggler(id, notice);
          reply(ok(nullptr));
        });
      }
      case Route::leave: {
        Leave leave = leave_from_json(parse_body(body));
        return on_jobs(jobs, std::move(respond), [&jobs, id, leave, allowed](auto& reply) {
          allowed(id);
          jobs.leave(id, leave, acknowledge(reply));
        });
      }
      case Route::other:
        break;
    }
    return fail(Refusal::not_found, "Not Found");
  } catch (const RequestError& e) {
    spdlog::debug("{} {} -> {} {}", method, safe_text(target), http_status(e.refusal()), e.what());
    return fail(e.refusal(), e.what());
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", method, safe_text(target), safe_text(e.what()));
    return fail(Refusal::internal, fmt::format("internal error: {}", e.what()));
  }
}

}  // namespace perseus::server
