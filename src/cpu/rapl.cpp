#include "perseus/cpu/rapl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace perseus::cpu {
namespace {

namespace fs = std::filesystem;

// The N of "intel-rapl:N" (top level) or the M of "intel-rapl:N:M" (`prefix` = "intel-rapl:N:").
std::optional<unsigned> zone_number(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() > prefix.size() + 6)
    return std::nullopt;
  std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return static_cast<unsigned>(std::stoul(digits));
}

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

std::uint64_t read_counter(const fs::path& file) {
  errno = 0;
  std::ifstream in(file);
  std::uint64_t value = 0;
  if (!in || !(in >> value)) {
    int error = errno;
    throw RaplError(RaplErrorKind::unreadable, fmt::format("cannot read {}: {}", file.string(),
                                                           error != 0 ? std::strerror(error) : "not a counter"));
  }
  return value;
}

struct Zone {
  unsigned package;
  bool dram;
  fs::path dir;
};

class PowercapTree final : public RaplSource {
 public:
  explicit PowercapTree(const std::string& root) {
    std::error_code error;
    std::vector<std::pair<unsigned, fs::path>> packages;
    for (const auto& entry : fs::directory_iterator(root, error)) {
      auto n = zone_number(entry.path().filename().string(), "intel-rapl:");
      if (n && first_line(entry.path() / "name").rfind("package", 0) == 0) packages.emplace_back(*n, entry.path());
    }
    std::sort(packages.begin(), packages.end());
    for (const auto& [n, dir] : packages) {
      zones_.push_back({n, false, dir});
      for (const auto& sub : fs::directory_iterator(dir, error)) {
        if (zone_number(sub.path().filename().string(), fmt::format("intel-rapl:{}:", n)) &&
            first_line(sub.path() / "name") == "dram") {
          zones_.push_back({n, true, sub.path()});
          break;
        }
      }
    }
    if (zones_.empty())
      throw RaplError(RaplErrorKind::absent, fmt::format("no RAPL package zone (intel-rapl:N) under {}", root));
    (void)read_rapl();
  }

  std::vector<RaplReading> read_rapl() override {
    std::vector<RaplReading> out;
    for (const Zone& zone : zones_)
      out.push_back({zone.package, zone.dram, read_counter(zone.dir / "energy_uj"),
                     read_counter(zone.dir / "max_energy_range_uj")});
    return out;
  }

 private:
  std::vector<Zone> zones_;
};

}  // namespace

std::string powercap_root() {
  const char* root = std::getenv(kPowercapRootEnv);
  return root != nullptr && *root != '\0' ? root : kDefaultPowercapRoot;
}

std::unique_ptr<RaplSource> powercap_tree(const std::string& root) { return std::make_unique<PowercapTree>(root); }

RaplCounters::RaplCounters(std::unique_ptr<RaplSource> source) : source_(std::move(source)) {
  if (!source_) throw std::invalid_argument("RaplCounters needs a source");
  last_ = source_->read_rapl();
  for (const auto& r : last_) {
    if (!r.dram) packages_.push_back(r.package);
    (r.dram ? total_.dram_j : total_.cpu_j)[r.package] = 0;
  }
}

bool RaplCounters::has_dram(unsigned package) const { return total_.dram_j.count(package) != 0; }

RaplCounters::Energy RaplCounters::read() {
  std::lock_guard lock(mutex_);
  auto now = source_->read_rapl();
  for (const auto& r : now) {
    auto before = std::find_if(last_.begin(), last_.end(),
                               [&](const RaplReading& l) { return l.package == r.package && l.dram == r.dram; });
    if (before == last_.end()) continue;  // a zone that appeared later: not counted
    std::uint64_t delta = r.energy_uj >= before->energy_uj
                              ? r.energy_uj - before->energy_uj
                              : r.max_energy_range_uj - before->energy_uj + r.energy_uj;  // wrapped
    (r.dram ? total_.dram_j : total_.cpu_j)[r.package] += static_cast<double>(delta) / 1e6;
    before->energy_uj = r.energy_uj;
  }
  return total_;
}

}  // namespace perseus::cpu
