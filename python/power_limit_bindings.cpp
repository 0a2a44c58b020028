// perseus.EnergyMonitor (Zeus's ZeusMonitor) and the GPU controls perseus.zeus's optimizers use;
// the optimizers themselves are Python (python/perseus/power_limit.py, python/perseus/zeus/).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/gpu/gpu.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/zeus/energy_monitor.hpp"

namespace py = pybind11;
using namespace perseus::zeus;

void bind_power_limit(py::module_& m) {
  py::class_<Measurement>(m, "Measurement", "What one measurement window saw.")
      .def_readonly("time", &Measurement::time, "Seconds.")
      .def_readonly("gpu_energy", &Measurement::gpu_energy, "Joules by GPU index.")
      .def_readonly("total_energy", &Measurement::total_energy, "Joules, every GPU.")
      .def("__repr__", [](const Measurement& x) {
        return "Measurement(time=" + std::to_string(x.time) + ", total_energy=" + std::to_string(x.total_energy) + ")";
      });

  py::class_<EnergyMonitor>(m, "EnergyMonitor",
                            "GPU time and energy in named windows (Zeus's ZeusMonitor), nested or overlapping.")
      .def(py::init([](std::optional<std::vector<unsigned>> gpu_indices, const std::string& nvml_library,
                       const std::string& gpud_socket) {
             std::shared_ptr<perseus::gpu::GpuLibrary> gpus = perseus::gpud::open_gpu_library(gpud_socket, nvml_library);
             return std::make_unique<EnergyMonitor>(gpus, gpu_indices.value_or(std::vector<unsigned>{}));
           }),
           py::arg("gpu_indices") = py::none(), py::arg("nvml_library") = "", py::arg("gpud_socket") = "",
           "Args:\n    gpu_indices: NVML indices to measure; None: every GPU.\n"
           "    nvml_library: path of libnvidia-ml (\"\": $PERSEUS_NVML_LIBRARY or the driver's).\n"
           "    gpud_socket: go through `perseus gpud` (\"\": $PERSEUS_GPUD_SOCKET, else NVML directly).")
      .def_property_readonly("gpu_indices", &EnergyMonitor::gpu_indices)
      .def("_begin_window", &EnergyMonitor::begin_window, py::arg("key"))
      .def("_end_window", &EnergyMonitor::end_window, py::arg("key"), py::arg("cancel") = false);

  // The GPU controls perseus.zeus's Python optimizers need (NVML indices), through gpud where configured.
  py::class_<perseus::gpu::GpuLibrary, std::shared_ptr<perseus::gpu::GpuLibrary>>(m, "_Gpus")
      .def(py::init([](const std::string& nvml_library, const std::string& gpud_socket) {
             return std::shared_ptr<perseus::gpu::GpuLibrary>(perseus::gpud::open_gpu_library(gpud_socket, nvml_library));
           }),
           py::arg("nvml_library") = "", py::arg("gpud_socket") = "")
      .def("device_count", &perseus::gpu::GpuLibrary::device_count)
      .def("power_limit_range", [](perseus::gpu::GpuLibrary& g, unsigned d) {
        auto r = g.power_limit_range(d);
        return std::make_pair(r.min_mw, r.max_mw);
      }, py::arg("device"), "(min, max) in mW.")
      .def("power_limit_mw", &perseus::gpu::GpuLibrary::power_limit_mw, py::arg("device"))
      .def("set_power_limit_mw", &perseus::gpu::GpuLibrary::set_power_limit_mw, py::arg("device"), py::arg("limit_mw"))
      .def("supported_graphics_clocks", [](perseus::gpu::GpuLibrary& g, unsigned d) {
        auto memory = g.supported_memory_clocks(d);
        return memory.empty() ? std::vector<unsigned>{} : g.supported_graphics_clocks(d, memory.front());
      }, py::arg("device"), "MHz, descending, at the highest memory clock.")
      .def("lock_graphics_clock", [](perseus::gpu::GpuLibrary& g, unsigned d, unsigned mhz) { g.lock_graphics_clock(d, mhz, mhz); },
           py::arg("device"), py::arg("mhz"))
      .def("reset_graphics_clock", &perseus::gpu::GpuLibrary::reset_graphics_clock, py::arg("device"));
}
