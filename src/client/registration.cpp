#include "registration.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "clock_reset.hpp"
#include "perseus/gpu/visible_devices.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/protocol/job_secret.hpp"
#include "perseus/protocol/models.hpp"
#include "perseus/protocol/power_state.hpp"
#include "perseus/util/error.hpp"

namespace perseus::client {

using nlohmann::json;

Registration::Registration(const ClientOptions& options, ServerConnection& connection,
                           std::function<void()> on_registered)
    : options_(options), connection_(connection), on_registered_(std::move(on_registered)) {}

std::optional<std::string> Registration::begin() {
  const auto& o = options_;
  connection_.open();
  // A server that does not answer yet (started after training, restarting) is no reason to give
  // up: the steps left are taken in the background, for retry_for, while training runs.
  std::optional<std::string> unreachable;
  auto step = [&](auto&& action) {
    if (unreachable) return;
    try {
      action();
    } catch (const ServerUnreachable& e) {
      if (o.retry_for.count() <= 0) throw;
      unreachable = e.what();
    }
  };
  step([&] { learn_server(); });
  if (server_known_) prepare_gpu();  // its power states depend on the server's mode

  if (!o.job_id.empty()) {
    connection_.set_job_id(o.job_id);
    connection_.set_job_secret(
        o.job_secret.empty() && std::getenv("PERSEUS_JOB_SECRET") ? std::getenv("PERSEUS_JOB_SECRET") : o.job_secret);
  } else if (o.rank == 0) {
    connection_.set_job_secret(protocol::new_job_secret());
    step([&] { register_job(); });
    joined_broadcast_ = true;  // the id is "" while the job is not registered: the others register it too
    const auto& id = connection_.job_id();
    const auto& secret = connection_.job_secret();
    if (o.broadcast_job_id) o.broadcast_job_id(secret.empty() ? id : id + '\n' + secret);
  } else {
    if (!o.broadcast_job_id) throw Error("ranks other than 0 need broadcast_job_id (or job_id) to learn the job id");
    joined_broadcast_ = true;
    receive_job_id(o.broadcast_job_id(""));
    if (connection_.job_id().empty() && connection_.job_secret().empty())
      throw Error("rank 0 could not start perseus, so there is no job to join");
  }
  step([&] {
    if (connection_.job_id().empty()) register_job();
    register_rank();
  });
  return unreachable;
}

void Registration::complete() {
  if (!server_known_) learn_server();
  if (!gpu_ready_) prepare_gpu();
  if (connection_.job_id().empty()) register_job();
  register_rank();
  spdlog::info(
      "perseus: rank {}: registered with the server {:.1f} s after it started (job {}); perseus takes "
      "part from the next iteration",
      options_.rank, std::chrono::duration<double>(std::chrono::steady_clock::now() - created_).count(),
      connection_.job_id());
}

void Registration::learn_server() {
  json info = connection_.call("GET", "/info", nullptr);
  mode_ =
      protocol::parse_power_mode(info.value("mode", std::string("frequency"))).value_or(protocol::PowerMode::frequency);
  server_known_ = true;
}

void Registration::prepare_gpu() {
  const auto& o = options_;
  gpu_ = o.gpu ? o.gpu : std::shared_ptr<gpu::GpuLibrary>(gpud::open_gpu_library(o.gpud_socket, o.nvml_library));
  device_ = gpu::nvml_index(*gpu_, o.device, o.cuda_visible_devices);  // options name it as CUDA does
  states_.clear();
  if (mode_ == protocol::PowerMode::power_limit) {
    limit_before_mw_ = gpu_->power_limit_mw(device_);
    auto range = gpu_->power_limit_range(device_);
    const auto top = protocol::watts_at_most({range.max_mw}), bottom = protocol::watts_at_least({range.min_mw});
    for (unsigned w = top.value; w >= bottom.value && w > 0; w -= std::min(w, 25u))
      states_.push_back(static_cast<int>(w));
  } else {
    auto memory = gpu_->supported_memory_clocks(device_);
    if (memory.empty()) throw Error(fmt::format("GPU {} lists no memory clocks", device_));
    unsigned top_memory = *std::max_element(memory.begin(), memory.end());
    for (unsigned c : gpu_->supported_graphics_clocks(device_, top_memory)) states_.push_back(static_cast<int>(c));
    register_clock_reset(gpu_.get(), device_);
    registered_reset_ = true;
    gpu_->lock_memory_clock(device_, top_memory, top_memory);
  }
  gpu_ready_ = true;
}

// Registers the job with the connection's secret (made here, or shared by rank 0): every rank
// holding it gets the one job, whichever registers first.
void Registration::register_job() {
  const auto& o = options_;
  protocol::JobInfo job{"",          o.pp_degree,  o.dp_degree,        o.tp_degree,       o.world_size,
                        o.framework, o.model_name, o.partition_method, o.microbatch_size, o.num_microbatches};
  job.weight = o.weight;
  std::string id = connection_.call("POST", "/register_job", protocol::to_json(job)).get<std::string>();
  std::string secret = connection_.received_job_secret();  // "" from a server that keeps no secrets
  if (secret != connection_.job_secret()) connection_.set_job_secret(std::move(secret));
  connection_.set_job_id(std::move(id));
}

void Registration::register_rank() {
  const auto& o = options_;
  protocol::RankInfo rank{connection_.job_id(), o.rank, o.dp_rank, o.pp_rank, o.tp_rank, o.pipe_schedule, states_};
  try {  // the bound on what this rank may measure (physical_bounds.hpp), and what a power budget may ask
    const auto range = gpu_->power_limit_range(device_);
    rank.max_power_w = protocol::to_watts({range.max_mw});
    if (range.min_mw > 0) rank.min_power_w = protocol::to_watts({range.min_mw});
  } catch (const std::exception&) {}
  connection_.call("POST", "/register_rank", protocol::to_json(rank));
  on_registered_();
}

void Registration::receive_job_id(const std::string& shared) {
  auto newline = shared.find('\n');
  connection_.set_job_id(shared.substr(0, newline));
  connection_.set_job_secret(newline == std::string::npos ? "" : shared.substr(newline + 1));
}

void Registration::join_broadcast_after_failure() {
  const auto& o = options_;
  if (joined_broadcast_ || !o.job_id.empty() || !o.broadcast_job_id) return;
  joined_broadcast_ = true;
  try {
    std::string id = o.broadcast_job_id("");
    if (o.rank != 0 && connection_.job_id().empty())
      receive_job_id(id);  // so that this rank can tell the job it is out
  } catch (const std::exception& e) {
    spdlog::warn("perseus: rank {}: the job-id broadcast failed: {}", o.rank, e.what());
  }
}

void Registration::leave(const std::string& why, bool finished) const {
  const Endpoint& endpoint = connection_.endpoint();
  if (endpoint.job_id.empty() || endpoint.server_url.empty()) return;
  try {
    auto once = endpoint.open();
    json body = {{"rank", endpoint.rank}, {"reason", why.substr(0, 500)}, {"finished", finished}};
    once->request("POST", fmt::format("/leave/{}", encode_path_segment(endpoint.job_id)), body.dump(),
                  std::min(endpoint.request_timeout, std::chrono::milliseconds(5000)));
  } catch (const std::exception& e) {
    spdlog::debug("perseus: rank {}: could not tell the server it left: {}", endpoint.rank, e.what());
  }
}

void Registration::release_clock_reset() {
  if (registered_reset_) unregister_clock_reset(gpu_.get(), device_);
  registered_reset_ = false;
}

}  // namespace perseus::client
