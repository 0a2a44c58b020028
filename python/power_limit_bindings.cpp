// perseus.EnergyMonitor, perseus.GlobalPowerLimitOptimizer and the optimum selectors (Zeus's
// power-limit API, seed zeus-power-limit-api.txt) for Python; python/perseus/power_limit.py adds
// the torch.distributed combine and the Hugging Face callback.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/gpud/client.hpp"
#include "perseus/util/error.hpp"
#include "perseus/zeus/power_limit_optimizer.hpp"

namespace py = pybind11;
using namespace perseus::zeus;

namespace {

// Lets a Python class derived from OptimumSelector choose.
class PySelector : public OptimumSelector {
 public:
  int select(const std::vector<PowerLimitMeasurement>& measurements) const override {
    PYBIND11_OVERRIDE_PURE(int, OptimumSelector, select, measurements);
  }
};

}  // namespace

void bind_power_limit(py::module_& m) {
  // Measurement and EnergyMonitor: monitor_bindings.cpp (bound first).
  py::class_<PowerLimitMeasurement>(m, "PowerLimitMeasurement", "Energy (J) and time (s) measured at one power limit (W).")
      .def(py::init<int, double, double>(), py::arg("power_limit"), py::arg("energy"), py::arg("time"))
      .def_readwrite("power_limit", &PowerLimitMeasurement::power_limit, "Watts.")
      .def_readwrite("energy", &PowerLimitMeasurement::energy, "Joules over the profiled steps, every GPU and rank.")
      .def_readwrite("time", &PowerLimitMeasurement::time, "Seconds over the profiled steps.")
      .def("__eq__", [](const PowerLimitMeasurement& a, const PowerLimitMeasurement& b) { return a == b; })
      .def("__repr__", [](const PowerLimitMeasurement& x) {
        return "PowerLimitMeasurement(power_limit=" + std::to_string(x.power_limit) + ", energy=" + std::to_string(x.energy) +
               ", time=" + std::to_string(x.time) + ")";
      });

  py::class_<OptimumSelector, PySelector, std::shared_ptr<OptimumSelector>>(
      m, "OptimumSelector", "Base class of selectors: override select(measurements) -> power limit (W).")
      .def(py::init<>())
      .def("select", &OptimumSelector::select, py::arg("measurements"));
  py::class_<EnergySelector, OptimumSelector, std::shared_ptr<EnergySelector>>(m, "Energy", "The limit with the least energy.")
      .def(py::init<>());
  py::class_<TimeSelector, OptimumSelector, std::shared_ptr<TimeSelector>>(m, "Time", "The limit with the least time.")
      .def(py::init<>());
  py::class_<ZeusCostSelector, OptimumSelector, std::shared_ptr<ZeusCostSelector>>(
      m, "ZeusCost", "The limit with the least eta*Energy + (1-eta)*MaxPower*Time (MaxPower: highest limit x world_size).")
      .def(py::init<double, int>(), py::arg("eta_knob"), py::arg("world_size") = 1)
      .def_property_readonly("eta_knob", &ZeusCostSelector::eta_knob, "Weight of energy, 0..1.")
      .def_property_readonly("world_size", &ZeusCostSelector::world_size, "GPUs in the job (MaxPower's multiplier).");
  py::class_<MaxSlowdownConstraintSelector, OptimumSelector, std::shared_ptr<MaxSlowdownConstraintSelector>>(
      m, "MaxSlowdownConstraint", "The lowest limit whose time is within factor x the highest limit's.")
      .def(py::init<double>(), py::arg("factor"))
      .def_property_readonly("factor", &MaxSlowdownConstraintSelector::factor, "The slowdown allowed, at least 1.");

  py::class_<GlobalPowerLimitOptimizer>(m, "_GlobalPowerLimitOptimizer")
      .def(py::init([](EnergyMonitor& monitor, std::shared_ptr<OptimumSelector> selector, int wait_steps, int warmup_steps,
                       int profile_steps, int pl_step, std::optional<std::string> profile_path,
                       std::function<std::pair<double, double>(double, double)> combine) {
             PowerLimitOptimizerOptions o;
             o.selector = std::move(selector);
             o.wait_steps = wait_steps, o.warmup_steps = warmup_steps, o.profile_steps = profile_steps, o.pl_step = pl_step;
             o.profile_path = profile_path.value_or("");
             if (combine) {
               o.combine = [combine](double& energy, double& time) {
                 py::gil_scoped_acquire gil;
                 std::tie(energy, time) = combine(energy, time);
               };
             }
             try {
               return std::make_unique<GlobalPowerLimitOptimizer>(monitor, std::move(o));
             } catch (const std::invalid_argument& e) {
               throw py::value_error(e.what());
             }
           }),
           py::arg("monitor"), py::arg("optimum_selector"), py::arg("wait_steps"), py::arg("warmup_steps"),
           py::arg("profile_steps"), py::arg("pl_step"), py::arg("profile_path"), py::arg("combine"), py::keep_alive<1, 2>())
      .def("on_step_begin", &GlobalPowerLimitOptimizer::on_step_begin)
      .def("on_step_end", &GlobalPowerLimitOptimizer::on_step_end)
      .def("on_epoch_end", &GlobalPowerLimitOptimizer::on_epoch_end)
      .def("close", &GlobalPowerLimitOptimizer::close)
      .def_property_readonly("state", [](const GlobalPowerLimitOptimizer& o) { return to_string(o.state()); })
      .def_property_readonly("current_power_limit", &GlobalPowerLimitOptimizer::current_power_limit)
      .def_property_readonly("optimal_power_limit", &GlobalPowerLimitOptimizer::optimal_power_limit)
      .def_property_readonly("power_limits", &GlobalPowerLimitOptimizer::power_limits)
      .def_property_readonly("measurements", &GlobalPowerLimitOptimizer::measurements)
      .def_property_readonly("enabled", &GlobalPowerLimitOptimizer::enabled);
}
