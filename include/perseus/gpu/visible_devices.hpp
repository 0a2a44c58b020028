#pragma once
// GPUs as the training framework numbers them. CUDA numbers only the GPUs CUDA_VISIBLE_DEVICES
// lists, in its order; NVML numbers every GPU of the node. Every index a user gives perseus (a
// monitor's gpu_indices, a client's device) is a CUDA index, mapped to NVML's here and nowhere else.
//
// CUDA's rules: unset, every GPU is visible in NVML's order; an entry is an NVML index or a GPU
// UUID ("GPU-" and a unique prefix of it); at the first entry that names no GPU (a bad or
// repeated index, an unknown or ambiguous UUID, an empty entry, "-1"), the list ends, so "" and
// "-1" hide every GPU. MIG instances ("MIG-...") cannot be mapped to a whole GPU: an error.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "perseus/gpu/gpu.hpp"

namespace perseus::gpu {

inline constexpr const char* kCudaVisibleDevicesEnv = "CUDA_VISIBLE_DEVICES";

// $CUDA_VISIBLE_DEVICES, nullopt when it is unset.
std::optional<std::string> cuda_visible_devices_from_env();

// The NVML index of each CUDA device, in CUDA's order. `visible`: the variable's value (nullopt:
// unset). Throws GpuError(not_supported) for a MIG entry.
std::vector<unsigned> visible_nvml_indices(GpuLibrary& gpus, const std::optional<std::string>& visible);

// The NVML index of CUDA device `cuda_index`; GpuError(invalid_argument) naming the variable when
// no such device is visible.
unsigned nvml_index(GpuLibrary& gpus, unsigned cuda_index, const std::optional<std::string>& visible);

// `gpus` numbered as CUDA numbers them: device_count() is the visible count and device i is CUDA
// device i. Every call goes to `gpus` with the NVML index; an index past the visible ones throws
// GpuError(invalid_argument).
std::shared_ptr<GpuLibrary> cuda_numbered(std::shared_ptr<GpuLibrary> gpus, const std::optional<std::string>& visible);

}  // namespace perseus::gpu
