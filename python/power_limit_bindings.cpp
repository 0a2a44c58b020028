// The GPU controls perseus.zeus's optimizers use (Measurement and EnergyMonitor, Zeus's
// ZeusMonitor: monitor_bindings.cpp); the optimizers themselves are Python
// (python/perseus/power_limit.py, python/perseus/zeus/).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/gpu/gpu.hpp"
#include "perseus/gpud/client.hpp"

namespace py = pybind11;

void bind_power_limit(py::module_& m) {
  // The GPU controls perseus.zeus's Python optimizers need (NVML indices), through gpud where configured.
  py::class_<perseus::gpu::GpuLibrary, std::shared_ptr<perseus::gpu::GpuLibrary>>(m, "_Gpus")
      .def(py::init([](const std::string& nvml_library, const std::string& gpud_socket) {
             return std::shared_ptr<perseus::gpu::GpuLibrary>(
                 perseus::gpud::open_gpu_library(gpud_socket, nvml_library));
           }),
           py::arg("nvml_library") = "", py::arg("gpud_socket") = "")
      .def("device_count", &perseus::gpu::GpuLibrary::device_count)
      .def(
          "power_limit_range",
          [](perseus::gpu::GpuLibrary& g, unsigned d) {
            auto r = g.power_limit_range(d);
            return std::make_pair(r.min_mw, r.max_mw);
          },
          py::arg("device"), "(min, max) in mW.")
      .def("power_limit_mw", &perseus::gpu::GpuLibrary::power_limit_mw, py::arg("device"))
      .def("set_power_limit_mw", &perseus::gpu::GpuLibrary::set_power_limit_mw, py::arg("device"), py::arg("limit_mw"))
      .def(
          "supported_graphics_clocks",
          [](perseus::gpu::GpuLibrary& g, unsigned d) {
            auto memory = g.supported_memory_clocks(d);
            return memory.empty() ? std::vector<unsigned>{} : g.supported_graphics_clocks(d, memory.front());
          },
          py::arg("device"), "MHz, descending, at the highest memory clock.")
      .def(
          "lock_graphics_clock",
          [](perseus::gpu::GpuLibrary& g, unsigned d, unsigned mhz) { g.lock_graphics_clock(d, mhz, mhz); },
          py::arg("device"), py::arg("mhz"))
      .def("reset_graphics_clock", &perseus::gpu::GpuLibrary::reset_graphics_clock, py::arg("device"))
      // The rest of the GPU layer, for perseus.zeus.device (Zeus's GPUs interface).
      .def("name", &perseus::gpu::GpuLibrary::name, py::arg("device"))
      .def("supported_memory_clocks", &perseus::gpu::GpuLibrary::supported_memory_clocks, py::arg("device"),
           "MHz, descending.")
      .def("supported_graphics_clocks_at", &perseus::gpu::GpuLibrary::supported_graphics_clocks, py::arg("device"),
           py::arg("memory_mhz"), "MHz, descending, at that memory clock.")
      .def("current_graphics_clock", &perseus::gpu::GpuLibrary::current_graphics_clock, py::arg("device"))
      .def("current_memory_clock", &perseus::gpu::GpuLibrary::current_memory_clock, py::arg("device"))
      .def("lock_graphics_clocks", &perseus::gpu::GpuLibrary::lock_graphics_clock, py::arg("device"),
           py::arg("min_mhz"), py::arg("max_mhz"))
      .def("lock_memory_clocks", &perseus::gpu::GpuLibrary::lock_memory_clock, py::arg("device"), py::arg("min_mhz"),
           py::arg("max_mhz"))
      .def("reset_memory_clock", &perseus::gpu::GpuLibrary::reset_memory_clock, py::arg("device"))
      .def("total_energy_mj", &perseus::gpu::GpuLibrary::total_energy_mj, py::arg("device"),
           "mJ since the driver loaded.")
      .def("power_usage_mw", &perseus::gpu::GpuLibrary::power_usage_mw, py::arg("device"));
}
