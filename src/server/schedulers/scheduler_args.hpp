#pragma once
// Reading a scheduler's --scheduler-args: every key checked, unknown keys refused, errors name
// the scheduler and the argument (perseus::Error, usage exit code).
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace perseus::server {

class SchedulerArgs {
 public:
  SchedulerArgs(std::string scheduler, const nlohmann::json& args, std::initializer_list<const char*> accepted);
  std::optional<double> number(const char* key) const;
  std::optional<int> integer(const char* key) const;
  std::optional<std::string> string(const char* key) const;
  std::optional<bool> boolean(const char* key) const;
  [[noreturn]] void fail(const char* key, const std::string& problem) const;

 private:
  const nlohmann::json* find(const char* key) const;
  std::string scheduler_;
  nlohmann::json args_;
};

}  // namespace perseus::server
