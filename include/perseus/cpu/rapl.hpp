#pragma once
// CPU package and DRAM energy from RAPL, as Linux exposes it in the powercap tree:
// <root>/intel-rapl:N (package N: name "package-N", energy_uj, max_energy_range_uj) and its
// subzones <root>/intel-rapl:N/intel-rapl:N:M, of which the one named "dram" is the package's
// memory. The counters wrap at max_energy_range_uj; RaplCounters turns them into joules that only
// grow, as long as it reads them at least once per wrap (minutes even at full power).
// energy_uj is readable by root only on recent kernels: perseus gpud serves the readings then.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace perseus::cpu {

inline constexpr const char* kPowercapRootEnv = "PERSEUS_POWERCAP_ROOT";
inline constexpr const char* kDefaultPowercapRoot = "/sys/class/powercap";

// absent: no RAPL package zone under the root; unreadable: there are zones, but this process
// cannot read their counters (not root).
enum class RaplErrorKind { absent, unreadable };

class RaplError : public std::runtime_error {
 public:
  RaplError(RaplErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  RaplErrorKind kind() const { return kind_; }

 private:
  RaplErrorKind kind_;
};

// One raw counter: package `package`'s own, or (dram) its memory subzone's.
struct RaplReading {
  unsigned package = 0;
  bool dram = false;
  std::uint64_t energy_uj = 0;
  std::uint64_t max_energy_range_uj = 0;
  bool operator==(const RaplReading&) const = default;
};

// Where the raw counters come from: the powercap tree, or perseus gpud (gpud/client.hpp).
class RaplSource {
 public:
  virtual ~RaplSource() = default;
  // Every counter, packages in index order, each package's DRAM right after it.
  virtual std::vector<RaplReading> read_rapl() = 0;
};

// $PERSEUS_POWERCAP_ROOT, else /sys/class/powercap.
std::string powercap_root();

// The powercap tree at `root`, which it reads once to check: RaplError(absent) when it holds no
// package zone, RaplError(unreadable) when a counter cannot be read.
std::unique_ptr<RaplSource> powercap_tree(const std::string& root);

// Joules since construction per package and per DRAM zone, wrap-arounds included. Thread-safe.
class RaplCounters {
 public:
  explicit RaplCounters(std::unique_ptr<RaplSource> source);

  struct Energy {
    std::map<unsigned, double> cpu_j;   // by package index
    std::map<unsigned, double> dram_j;  // packages that have a DRAM zone
  };
  // Reads the counters now; a counter below its last value wrapped once at its range.
  Energy read();
  std::vector<unsigned> packages() const { return packages_; }
  bool has_dram(unsigned package) const;

 private:
  std::unique_ptr<RaplSource> source_;
  std::vector<unsigned> packages_;
  mutable std::mutex mutex_;
  std::vector<RaplReading> last_;
  Energy total_;
};

}  // namespace perseus::cpu
