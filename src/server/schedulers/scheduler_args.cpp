#include "scheduler_args.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <vector>

#include "perseus/util/error.hpp"

namespace perseus::server {

SchedulerArgs::SchedulerArgs(std::string scheduler, const nlohmann::json& args,
                             std::initializer_list<const char*> accepted)
    : scheduler_(std::move(scheduler)), args_(args.is_null() ? nlohmann::json::object() : args) {
  if (!args_.is_object())
    throw Error(fmt::format("{}'s arguments: expected a JSON object, got {}", scheduler_, args_.dump()),
                ErrorKind::bad_setting);
  std::vector<std::string> names(accepted.begin(), accepted.end());
  for (auto& [key, value] : args_.items()) {
    if (std::find(names.begin(), names.end(), key) == names.end())
      throw Error(fmt::format("{}'s arguments: unknown argument '{}' (accepted: {})", scheduler_, key,
                              names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "))),
                  ErrorKind::bad_setting);
  }
}

const nlohmann::json* SchedulerArgs::find(const char* key) const {
  auto it = args_.find(key);
  return it == args_.end() || it->is_null() ? nullptr : &*it;
}

void SchedulerArgs::fail(const char* key, const std::string& problem) const {
  throw Error(fmt::format("{}'s arguments: '{}' {}", scheduler_, key, problem), ErrorKind::bad_setting);
}

std::optional<double> SchedulerArgs::number(const char* key) const {
  const auto* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || v->is_boolean()) fail(key, "must be a number");
  return v->get<double>();
}

std::optional<int> SchedulerArgs::integer(const char* key) const {
  const auto* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) fail(key, "must be an integer");
  return v->get<int>();
}

std::optional<std::string> SchedulerArgs::string(const char* key) const {
  const auto* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail(key, "must be a string");
  return v->get<std::string>();
}

std::optional<bool> SchedulerArgs::boolean(const char* key) const {
  const auto* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) fail(key, "must be true or false");
  return v->get<bool>();
}

}  // namespace perseus::server
