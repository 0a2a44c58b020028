#pragma once
// The GPU management libraries perseus drives, and the one place that chooses among them: every
// process that opens GPUs (perseus gpud, `perseus gpu`, a training rank's client, the Python
// monitors and power-limit optimizer) calls load_gpu_library. A backend is one file that
// implements GpuLibrary (src/gpu/nvml.cpp, src/gpu/amdsmi.cpp) and one row in src/gpu/backends.cpp.
#include <memory>
#include <span>
#include <string>

#include "perseus/gpu/gpu.hpp"

namespace perseus::gpu {

// Names the backend: "nvml" (the default), "amdsmi", or "auto" (probe each in order).
inline constexpr const char* kGpuLibraryEnv = "PERSEUS_GPU_LIBRARY";

struct GpuBackend {
  const char* name;          // what --gpu-library and $PERSEUS_GPU_LIBRARY say
  const char* title;         // for people: "NVML", "AMD SMI"
  const char* path_env;      // the variable that names its library file
  const char* default_path;  // the file dlopen looks for otherwise
  std::unique_ptr<GpuLibrary> (*load)(const std::string& path);
};

// Every backend, in the order "auto" tries them.
std::span<const GpuBackend> gpu_backends();

// "nvml, amdsmi, auto": the names --gpu-library takes, for messages.
std::string gpu_library_names();

// The help texts of the commands' --gpu-library (the names) and --nvml (where each backend's
// library file comes from) options.
std::string gpu_library_help();
std::string gpu_library_file_help();

// The backend `name` names: "" means $PERSEUS_GPU_LIBRARY, and that unset or empty "nvml".
// "auto" gives nullptr. Throws GpuError(invalid_argument) listing the names for any other.
const GpuBackend* gpu_backend(const std::string& name);

// The file `backend` loads: `path` when given, else $<path_env>, else its default_path.
std::string gpu_library_path(const GpuBackend& backend, const std::string& path = "");

// "NVML: libnvidia-ml.so.1": what load_gpu_library(name, path) opens, for messages; "the first
// of NVML, AMD SMI that lists a GPU" for "auto".
std::string describe_gpu_library(const std::string& name = "", const std::string& path = "");

// Opens the backend `name` (gpu_backend's rules) from `path` (gpu_library_path's rules). "auto"
// opens, in order, each backend's library that loads and lists at least one GPU; when none does,
// GpuError(library_missing) gives every backend's reason. A `path` with "auto" is
// GpuError(invalid_argument): a file belongs to one backend.
std::unique_ptr<GpuLibrary> load_gpu_library(const std::string& name = "", const std::string& path = "");

}  // namespace perseus::gpu
