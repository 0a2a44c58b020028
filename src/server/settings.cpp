#include "perseus/server/settings.hpp"

#include <algorithm>
#include <cctype>

namespace perseus::server {

nlohmann::json info_json(const ServerSettings& s) {
  return {{"scheduler", s.scheduler},
          {"scheduler_args", s.scheduler_args},
          {"log_level", s.log_level},
          {"mode", protocol::to_string(s.mode)},
          {"dump_data", s.dump_data},
          {"dump_dir", s.dump_dir},
          {"round_timeout_s", s.round_timeout_s},
          {"job_retention_s", s.job_retention_s},
          {"max_world_size", s.max_world_size},
          {"dead_rank_timeout_s", s.dead_rank_timeout_s},
          {"max_job_idle_s", s.max_job_idle_s},
          {"max_jobs", s.max_jobs},
          {"max_total_ranks", s.max_total_ranks},
          {"max_job_entries", s.max_job_entries},
          {"max_result_iterations", s.max_result_iterations},
          {"record_ranks", s.record_ranks},
          {"record_rounds", s.record_rounds}};
}

std::chrono::steady_clock::duration clamped_duration(double seconds) {
  if (!(seconds > 0)) return std::chrono::steady_clock::duration::zero();  // NaN too
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(std::min(seconds, kMaxSettingSeconds)));
}

nlohmann::json artifact_server_info(const ServerSettings& s) {
  std::string level = s.log_level;
  std::transform(level.begin(), level.end(), level.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return {{"scheduler", s.scheduler}, {"scheduler_args", s.scheduler_args},
          {"log_level", level},       {"mode", protocol::to_string(s.mode)},
          {"dump_data", s.dump_data}, {"dump_dir", s.dump_dir}};
}

}  // namespace perseus::server
