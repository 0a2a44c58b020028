// The `perseus` command's argument checks and the one way a bad command line is reported.
#include "perseus/cli/arguments.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "perseus/cli/exit_codes.hpp"
#include "perseus/util/error.hpp"

namespace perseus::cli {

namespace {

// The whole text as a finite number, or nothing ("four", "4x", "nan" are not numbers).
std::optional<double> parse_number(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string got(const std::string& value) { return fmt::format(", got '{}'", value); }

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
    }
  }
  return row[b.size()];
}

std::string did_you_mean(const std::string& given, const std::vector<std::string>& candidates) {
  const std::string near = nearest(given, candidates);
  return near.empty() ? "" : fmt::format("; did you mean '{}'?", near);
}

// The parsed command chain: the app, then each subcommand given, outermost first.
std::vector<CLI::App*> parsed_chain(CLI::App& app) {
  std::vector<CLI::App*> chain{&app};
  for (auto subcommands = app.get_subcommands(); !subcommands.empty(); subcommands = chain.back()->get_subcommands())
    chain.push_back(subcommands.front());
  return chain;
}

std::string command_path(const std::vector<CLI::App*>& chain) {
  std::string path = "perseus";
  for (std::size_t i = 1; i < chain.size(); ++i) path += " " + chain[i]->get_name();
  return path;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

std::vector<std::string> option_names(const std::vector<CLI::App*>& chain) {
  std::vector<std::string> names;
  for (const CLI::App* app : chain)
    for (const CLI::Option* option : app->get_options()) {
      for (const auto& name : option->get_lnames()) names.push_back("--" + name);
      for (const auto& name : option->get_snames()) names.push_back("-" + name);
    }
  return names;
}

const CLI::Option* find_option(const std::vector<CLI::App*>& chain, const std::string& name) {
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if (const CLI::Option* option = (*it)->get_option_no_throw(name)) return option;
  return nullptr;
}

// What an option's values are, in words: its type as CLI11 names it.
std::string kind_of(const CLI::Option* option) {
  const std::string type = option == nullptr ? "" : option->get_type_name();
  if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) return "integer";
  if (type.rfind("FLOAT", 0) == 0) return "number";
  return "value";
}

std::string a_kind(const CLI::Option* option) {
  const std::string kind = kind_of(option);
  return (kind == "integer" ? "an " : "a ") + kind;
}

std::string with_kind(std::string message, const CLI::Option* option) {
  for (const auto& [placeholder, words] : {std::pair<std::string, std::string>{kAKindPlaceholder, a_kind(option)},
                                           std::pair<std::string, std::string>{kKindPlaceholder, kind_of(option)}})
    for (auto at = message.find(placeholder); at != std::string::npos; at = message.find(placeholder))
      message.replace(at, placeholder.size(), words);
  return message;
}

bool looks_like_option(const std::string& token) { return token.size() > 1 && token[0] == '-' && !parse_number(token); }

// Tokens no option or command took: each named, with the nearest known one.
std::vector<std::string> unknown_tokens(const std::vector<CLI::App*>& chain, bool& unknown_command) {
  std::vector<std::string> problems;
  const std::vector<std::string> options = option_names(chain);
  for (std::size_t level = 0; level < chain.size(); ++level) {
    const std::vector<std::string> left = chain[level]->remaining(false);
    for (std::size_t i = 0; i < left.size(); ++i) {
      const std::string& token = left[i];
      if (looks_like_option(token)) {
        const std::string name = token.substr(0, token.find('='));
        problems.push_back(fmt::format("unknown option '{}'{}", name, did_you_mean(name, options)));
        if (token.find('=') == std::string::npos && i + 1 < left.size() && !looks_like_option(left[i + 1]))
          ++i;  // its value
      } else if (level + 1 == chain.size() && unknown_command) {
        continue;  // an argument of the unknown command
      } else if (level + 1 == chain.size() && !chain[level]->get_subcommands({}).empty()) {
        unknown_command = true;
        const std::vector<std::string> commands = subcommand_names(*chain[level]);
        const std::string suggestion = did_you_mean(token, commands);
        problems.push_back(suggestion.empty()
                               ? fmt::format("unknown command '{}' (one of: {})", token, fmt::join(commands, ", "))
                               : fmt::format("unknown command '{}'{}", token, suggestion));
      } else {
        problems.push_back(fmt::format("unexpected argument '{}'", token));
      }
    }
  }
  return problems;
}

// Every required argument of the given commands that is missing, in one line (but `failed`, which
// the failure itself names).
std::optional<std::string> missing_required(const std::vector<CLI::App*>& chain, bool unknown_command,
                                            const CLI::Option* failed) {
  std::vector<std::string> missing;
  for (const CLI::App* app : chain)
    for (const CLI::Option* option : app->get_options())
      if (option->get_required() && option->count() == 0 && option != failed) missing.push_back(option->get_name());
  const CLI::App* last = chain.back();
  if (missing.empty() && !unknown_command && last->get_require_subcommand_min() > 0 && last->get_subcommands().empty())
    return fmt::format("a command is required: one of {}", fmt::join(subcommand_names(*last), ", "));
  if (missing.empty()) return std::nullopt;
  return fmt::format("missing {} (required)", fmt::join(missing, ", "));
}

struct Failure {
  std::string text;
  const CLI::Option* option = nullptr;  // the option it names, where it names one
};

// The failure CLI11 stopped at, in the same words as the validators: the option, what it must be,
// what was given. Nothing for unknown and missing arguments: those are listed from the parse.
std::optional<Failure> describe(const std::vector<CLI::App*>& chain, const CLI::ParseError& error) {
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr ||
      dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr)
    return std::nullopt;
  const std::string what = error.what();
  const std::string conversion = "Could not convert: ";
  if (dynamic_cast<const CLI::ConversionError*>(&error) != nullptr && what.rfind(conversion, 0) == 0) {
    const std::string rest = what.substr(conversion.size());
    const auto equals = rest.find(" = ");
    const std::string name = rest.substr(0, equals);
    const CLI::Option* option = find_option(chain, name);
    return Failure{fmt::format("{} must be {}{}", name, a_kind(option),
                               equals == std::string::npos ? "" : got(rest.substr(equals + 3))),
                   option};
  }
  const auto colon = what.find(": ");
  if (colon != std::string::npos) {
    const std::string name = what.substr(0, colon);
    if (const CLI::Option* option = find_option(chain, name)) {
      if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr)
        return Failure{fmt::format("{} needs a value ({})", name, a_kind(option)), option};
      return Failure{fmt::format("{} {}", name, with_kind(what.substr(colon + 2), option)), option};
    }
  }
  return Failure{what};
}

}  // namespace

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const auto number = parse_number(value);
        if (number && *number > 0) return "";
        return std::string("must be a positive ") + kKindPlaceholder + got(value);
      },
      "POSITIVE");
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        const auto number = parse_number(value);
        if (number && *number >= 0) return "";
        return std::string("must be a non-negative ") + kKindPlaceholder + got(value);
      },
      "NONNEGATIVE");
}

CLI::Validator between_text(const std::string& low, const std::string& high, double low_value, double high_value) {
  return CLI::Validator(
      [=](std::string& value) -> std::string {
        const auto number = parse_number(value);
        if (number && *number >= low_value && *number <= high_value) return "";
        return std::string("must be ") + kAKindPlaceholder + " from " + low + " to " + high + got(value);
      },
      fmt::format("[{} - {}]", low, high));
}

CLI::Validator one_of(std::vector<std::string> names) {
  const std::string listed = fmt::format("{}", fmt::join(names, ", "));
  return CLI::Validator(
      [names, listed](std::string& value) -> std::string {
        if (std::find(names.begin(), names.end(), value) != names.end()) return "";
        return fmt::format("must be one of {}{}{}", listed, got(value), did_you_mean(value, names));
      },
      fmt::format("{{{}}}", fmt::join(names, ",")));
}

CLI::Validator existing_file() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        std::error_code ec;
        const auto status = std::filesystem::status(value, ec);
        if (!std::filesystem::exists(status))
          return fmt::format("must name an existing file, got '{}' (no such file)", value);
        if (std::filesystem::is_directory(status))
          return fmt::format("must name a file, got '{}' (a directory)", value);
        return "";
      },
      "FILE");
}

std::string nearest(const std::string& given, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = std::max<std::size_t>(2, given.size() / 3) + 1;  // near enough: a typo or two
  for (const auto& candidate : candidates) {
    const std::size_t distance = edit_distance(given, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

int report_parse_error(CLI::App& app, const CLI::ParseError& error) {
  if (error.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(error);  // help, version
  const std::vector<CLI::App*> chain = parsed_chain(app);
  bool unknown_command = false;
  std::vector<std::string> problems = unknown_tokens(chain, unknown_command);
  const std::optional<Failure> failure = describe(chain, error);
  if (failure) problems.push_back(failure->text);
  if (auto missing = missing_required(chain, unknown_command, failure ? failure->option : nullptr))
    problems.push_back(*missing);
  if (problems.empty()) problems.emplace_back(error.what());
  const std::string path = command_path(chain);
  for (const auto& problem : problems) std::fprintf(stderr, "%s: error: %s\n", path.c_str(), problem.c_str());
  std::fprintf(stderr, "Run '%s --help' for its usage.\n", path.c_str());
  return kExitUsage;
}

}  // namespace perseus::cli
