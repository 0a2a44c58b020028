// The registry of GPU backends (perseus/gpu/backends.hpp). A new backend is its file, its
// loader's declaration below and its row in kBackends.
#include "perseus/gpu/backends.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <vector>

namespace perseus::gpu {

std::unique_ptr<GpuLibrary> load_amdsmi(const std::string& path);  // src/gpu/amdsmi.cpp

namespace {

constexpr GpuBackend kBackends[] = {
    {"nvml", "NVML", "PERSEUS_NVML_LIBRARY", "libnvidia-ml.so.1", &load_nvml},
    {"amdsmi", "AMD SMI", "PERSEUS_AMDSMI_LIBRARY", "libamd_smi.so", &load_amdsmi},
};

constexpr const char* kAuto = "auto";

std::string titles() {
  std::vector<std::string> out;
  for (const GpuBackend& backend : kBackends) out.emplace_back(backend.title);
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

}  // namespace

std::span<const GpuBackend> gpu_backends() { return kBackends; }

std::string gpu_library_names() {
  std::vector<std::string> out;
  for (const GpuBackend& backend : kBackends) out.emplace_back(backend.name);
  out.emplace_back(kAuto);
  return fmt::format("{}", fmt::join(out, ", "));
}

std::string gpu_library_help() {
  return fmt::format("GPU library: one of {} (auto: the first that lists a GPU); default: ${}, else {}",
                     gpu_library_names(), kGpuLibraryEnv, kBackends[0].name);
}

std::string gpu_library_file_help() {
  std::vector<std::string> out;
  for (const GpuBackend& backend : kBackends)
    out.push_back(fmt::format("{}: ${}, else {}", backend.name, backend.path_env, backend.default_path));
  return fmt::format("The GPU library's file to load (default for {})", fmt::join(out, "; "));
}

const GpuBackend* gpu_backend(const std::string& name) {
  const std::string chosen = name.empty() ? env_or(kGpuLibraryEnv, kBackends[0].name) : name;
  if (chosen == kAuto) return nullptr;
  for (const GpuBackend& backend : kBackends)
    if (chosen == backend.name) return &backend;
  throw GpuError(GpuErrorKind::invalid_argument,
                 fmt::format("GPU library '{}'{}: expected one of {}", chosen,
                             name.empty() ? fmt::format(" (${})", kGpuLibraryEnv) : "", gpu_library_names()));
}

std::string gpu_library_path(const GpuBackend& backend, const std::string& path) {
  return path.empty() ? env_or(backend.path_env, backend.default_path) : path;
}

std::string describe_gpu_library(const std::string& name, const std::string& path) {
  const GpuBackend* backend = gpu_backend(name);
  if (backend == nullptr) return fmt::format("the first of {} that lists a GPU", titles());
  return fmt::format("{}: {}", backend->title, gpu_library_path(*backend, path));
}

std::unique_ptr<GpuLibrary> load_gpu_library(const std::string& name, const std::string& path) {
  const GpuBackend* backend = gpu_backend(name);
  if (backend != nullptr) return backend->load(gpu_library_path(*backend, path));
  if (!path.empty())
    throw GpuError(GpuErrorKind::invalid_argument,
                   fmt::format("a GPU library file ({}) needs a named GPU library, not '{}': one of {}", path, kAuto,
                               gpu_library_names()));
  std::vector<std::string> reasons;
  for (const GpuBackend& candidate : kBackends) {
    try {
      auto library = candidate.load(gpu_library_path(candidate));
      if (library->device_count() > 0) return library;
      reasons.push_back(fmt::format("{} lists no GPU", candidate.title));
    } catch (const GpuError& e) {
      reasons.push_back(e.what());
    }
  }
  throw GpuError(GpuErrorKind::library_missing,
                 fmt::format("no GPU library lists a GPU: {}", fmt::format("{}", fmt::join(reasons, "; "))));
}

}  // namespace perseus::gpu
