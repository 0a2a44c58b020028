// Zeus's monitors (ZeusMonitor, PowerMonitor) and CUDA's device numbering for Python;
// python/perseus/zeus/monitor/ gives them Zeus's exact interface. Every GPU index given here is a
// CUDA index: the GPU library is wrapped with gpu::cuda_numbered over $CUDA_VISIBLE_DEVICES.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/gpu/visible_devices.hpp"
#include "perseus/gpud/client.hpp"
#include "perseus/zeus/energy_monitor.hpp"
#include "perseus/zeus/power_monitor.hpp"

namespace py = pybind11;
using namespace perseus::zeus;
namespace gpu = perseus::gpu;

namespace {

// The node's GPUs as CUDA numbers them, directly or through perseus gpud.
std::shared_ptr<gpu::GpuLibrary> visible_gpus(const std::string& gpud_socket, const std::string& nvml_library) {
  std::shared_ptr<gpu::GpuLibrary> all = perseus::gpud::open_gpu_library(gpud_socket, nvml_library);
  return gpu::cuda_numbered(std::move(all), gpu::cuda_visible_devices_from_env());
}

// RAPL as the monitor uses it: none when cpu_indices is [], else the powercap tree or gpud;
// where neither can be read, none by default and an error when packages were asked for.
std::shared_ptr<perseus::cpu::RaplCounters> rapl_for(const std::optional<std::vector<unsigned>>& cpu_indices,
                                                     const std::string& gpud_socket) {
  if (cpu_indices && cpu_indices->empty()) return nullptr;
  try {
    return std::make_shared<perseus::cpu::RaplCounters>(perseus::gpud::open_rapl(gpud_socket));
  } catch (const std::exception& e) {
    if (cpu_indices) throw std::runtime_error(std::string("CPU energy (RAPL) cannot be read: ") + e.what());
    return nullptr;
  }
}

// A node without GPUs: what ZeusMonitor() measures where NVML cannot be loaded, as Zeus falls back
// to no GPUs. Every per-GPU call is an error (there is no GPU to name).
class NoGpus final : public gpu::GpuLibrary {
 public:
  unsigned device_count() override { return 0; }
  std::string name(unsigned d) override { fail(d); }
  std::vector<unsigned> supported_memory_clocks(unsigned d) override { fail(d); }
  std::vector<unsigned> supported_graphics_clocks(unsigned d, unsigned) override { fail(d); }
  unsigned current_graphics_clock(unsigned d) override { fail(d); }
  unsigned current_memory_clock(unsigned d) override { fail(d); }
  void lock_graphics_clock(unsigned d, unsigned, unsigned) override { fail(d); }
  void reset_graphics_clock(unsigned d) override { fail(d); }
  void lock_memory_clock(unsigned d, unsigned, unsigned) override { fail(d); }
  void reset_memory_clock(unsigned d) override { fail(d); }
  unsigned power_limit_mw(unsigned d) override { fail(d); }
  gpu::PowerLimitRange power_limit_range(unsigned d) override { fail(d); }
  void set_power_limit_mw(unsigned d, unsigned) override { fail(d); }
  std::uint64_t total_energy_mj(unsigned d) override { fail(d); }
  unsigned power_usage_mw(unsigned d) override { fail(d); }

 private:
  [[noreturn]] static void fail(unsigned d) {
    throw gpu::GpuError(gpu::GpuErrorKind::invalid_argument, "GPU " + std::to_string(d) + ": no GPU is visible");
  }
};

py::object optional_map(const std::optional<std::map<unsigned, double>>& m) { return m ? py::cast(*m) : py::none(); }

}  // namespace

void bind_monitor(py::module_& m) {
  py::class_<Measurement>(m, "Measurement", "What one measurement window saw.")
      .def_readonly("time", &Measurement::time, "Seconds.")
      .def_readonly("gpu_energy", &Measurement::gpu_energy, "Joules by GPU index.")
      .def_property_readonly(
          "cpu_energy", [](const Measurement& x) { return optional_map(x.cpu_energy); },
          "Joules by CPU package (RAPL), or None.")
      .def_property_readonly(
          "dram_energy", [](const Measurement& x) { return optional_map(x.dram_energy); },
          "Joules by CPU package's DRAM (RAPL), or None.")
      .def_readonly("total_energy", &Measurement::total_energy, "Joules, every GPU.")
      .def("__repr__", [](const Measurement& x) {
        return "Measurement(time=" + std::to_string(x.time) + ", total_energy=" + std::to_string(x.total_energy) + ")";
      });

  py::class_<EnergyMonitor>(m, "EnergyMonitor",
                            "GPU time and energy in named windows (Zeus's ZeusMonitor), nested or overlapping.")
      .def(py::init([](std::optional<std::vector<unsigned>> gpu_indices, const std::string& nvml_library,
                       const std::string& gpud_socket, std::optional<std::vector<unsigned>> cpu_indices,
                       bool approx_instant_energy) {
             EnergyMonitorOptions o;
             o.gpu_indices = std::move(gpu_indices);
             o.cpu_indices = cpu_indices;
             o.approx_instant_energy = approx_instant_energy;
             o.rapl = rapl_for(cpu_indices, gpud_socket);
             std::shared_ptr<gpu::GpuLibrary> gpus;
             try {
               gpus = visible_gpus(gpud_socket, nvml_library);
             } catch (const gpu::GpuError&) {
               if (o.gpu_indices && !o.gpu_indices->empty()) throw;  // GPUs named: say why they cannot be read
               gpus = std::make_shared<NoGpus>();                    // as Zeus: no NVML, no GPUs measured
             }
             py::gil_scoped_release release;
             return std::make_unique<EnergyMonitor>(std::move(gpus), std::move(o));
           }),
           py::arg("gpu_indices") = py::none(), py::arg("nvml_library") = "", py::arg("gpud_socket") = "",
           py::arg("cpu_indices") = py::none(), py::arg("approx_instant_energy") = false,
           "Args:\n    gpu_indices: GPUs to measure as CUDA numbers them (CUDA_VISIBLE_DEVICES applies); None: every "
           "visible GPU (none where NVML cannot be loaded).\n"
           "    nvml_library: path of libnvidia-ml (\"\": $PERSEUS_NVML_LIBRARY or the driver's).\n"
           "    gpud_socket: go through `perseus gpud` (\"\": $PERSEUS_GPUD_SOCKET, else NVML directly).\n"
           "    cpu_indices: RAPL packages (intel-rapl:N) to measure; None: every one that can be read; []: none.\n"
           "    approx_instant_energy: a window whose GPU energy reads zero gets power x time instead.")
      .def_property_readonly("gpu_indices", &EnergyMonitor::gpu_indices)
      .def_property_readonly("cpu_indices", &EnergyMonitor::cpu_indices)
      .def("_begin_window", &EnergyMonitor::begin_window, py::arg("key"), py::arg("restart") = false,
           py::call_guard<py::gil_scoped_release>())
      .def("_end_window", &EnergyMonitor::end_window, py::arg("key"), py::arg("cancel") = false,
           py::call_guard<py::gil_scoped_release>());

  py::class_<PowerMonitor>(m, "_PowerMonitor", "GPU power sampled on a thread of its own (Zeus's PowerMonitor).")
      .def(py::init([](std::optional<std::vector<unsigned>> gpu_indices, double period_s, std::size_t max_samples,
                       const std::string& nvml_library, const std::string& gpud_socket) {
             auto gpus = visible_gpus(gpud_socket, nvml_library);
             std::vector<unsigned> indices;
             if (gpu_indices) indices = *gpu_indices;
             else
               for (unsigned i = 0; i < gpus->device_count(); ++i) indices.push_back(i);
             return std::make_unique<PowerMonitor>(std::move(gpus), std::move(indices), period_s, max_samples);
           }),
           py::arg("gpu_indices"), py::arg("period_s"), py::arg("max_samples") = 0, py::arg("nvml_library") = "",
           py::arg("gpud_socket") = "")
      .def_property_readonly("gpu_indices", &PowerMonitor::gpu_indices)
      .def("sample", &PowerMonitor::sample, py::call_guard<py::gil_scoped_release>())
      .def("stop", &PowerMonitor::stop, py::call_guard<py::gil_scoped_release>())
      .def(
          "timeline",
          [](const PowerMonitor& p, unsigned gpu, std::optional<double> start, std::optional<double> end) {
            std::vector<std::pair<double, double>> out;
            for (const auto& s : p.timeline(gpu, start, end)) out.emplace_back(s.time, s.watts);
            return out;
          },
          py::arg("gpu"), py::arg("start") = py::none(), py::arg("end") = py::none())
      .def("energy", &PowerMonitor::energy, py::arg("start"), py::arg("end"));

  m.def(
      "nvml_device_index",
      [](unsigned cuda_index, std::optional<std::string> visible, const std::string& nvml_library,
         const std::string& gpud_socket) {
        auto gpus = perseus::gpud::open_gpu_library(gpud_socket, nvml_library);
        try {
          return gpu::nvml_index(*gpus, cuda_index, visible ? visible : gpu::cuda_visible_devices_from_env());
        } catch (const gpu::GpuError& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("cuda_index"), py::arg("visible") = py::none(), py::arg("nvml_library") = "", py::arg("gpud_socket") = "",
      "The NVML index of CUDA device cuda_index.\n\n"
      "Args:\n    cuda_index: the GPU as CUDA numbers it.\n"
      "    visible: a CUDA_VISIBLE_DEVICES value (indices or GPU-UUIDs); None: the environment's.\n"
      "    nvml_library, gpud_socket: where to read the GPUs (UUIDs, count), as for Client.\n\n"
      "Raises:\n    ValueError: no such CUDA device is visible, or the list names a MIG instance.");
}
