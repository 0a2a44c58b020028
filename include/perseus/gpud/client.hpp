#pragma once
// The GPU library a training rank uses when the node runs `perseus gpud`: every call is one
// request over the daemon's Unix socket, so the rank needs no privileges, and whatever it sets is
// reset by the daemon when the rank's connection closes, however the rank ends.
#include <chrono>
#include <memory>
#include <string>

#include "perseus/cpu/rapl.hpp"
#include "perseus/gpu/gpu.hpp"

namespace perseus::gpud {

// Connects to the daemon at `socket_path`; throws GpuError (library_missing) naming the socket
// and what to do when no daemon answers there. Calls fail with GpuError; one that gets no answer
// within `timeout` (a hung daemon) fails too. When the connection breaks (the daemon restarted),
// the next call connects again — at once, then at most once a second while no daemon answers —
// and first sets again the clocks and power limits this client had set (the restarted daemon reset
// them), so the rank goes on where it was; calls fail with GpuError until then.
std::unique_ptr<gpu::GpuLibrary> connect(const std::string& socket_path,
                                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The GPU library a process should use: the daemon at `gpud_socket` when it is given (or
// $PERSEUS_GPUD_SOCKET is set), otherwise the backend $PERSEUS_GPU_LIBRARY names (NVML unless it
// says otherwise) loaded from the file `nvml_library` (gpu::load_gpu_library's rules).
std::unique_ptr<gpu::GpuLibrary> open_gpu_library(const std::string& gpud_socket = "",
                                                  const std::string& nvml_library = "");

// RAPL counters read by the daemon at `socket_path` (its "rapl" operation), over a connection of
// their own. Calls fail with GpuError.
std::unique_ptr<cpu::RaplSource> connect_rapl(const std::string& socket_path,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The RAPL source a process should use: the powercap tree at cpu::powercap_root(); where this
// process may not read it, the daemon at `gpud_socket` (or $PERSEUS_GPUD_SOCKET) when one is
// given. Throws cpu::RaplError when neither gives readings.
std::unique_ptr<cpu::RaplSource> open_rapl(const std::string& gpud_socket = "");

// The socket open_gpu_library would use: gpud_socket, else $PERSEUS_GPUD_SOCKET, else "".
std::string gpud_socket_from(const std::string& gpud_socket);

}  // namespace perseus::gpud
