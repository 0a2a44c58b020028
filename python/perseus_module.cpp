// `import perseus`: the training-side client for Python training loops (PyTorch, Megatron,
// DeepSpeed). The hooks release the GIL wherever they may block (registration, the round
// barrier), so other Python threads keep running.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/client/client.hpp"
#include "perseus/gpu/gpu.hpp"

namespace py = pybind11;
using perseus::client::Client;
using perseus::client::ClientOptions;

namespace {

std::unique_ptr<Client> make_client(int rank, int dp_rank, int pp_rank, int tp_rank, int dp_degree, int pp_degree,
                                    int tp_degree, int world_size, unsigned device, std::string server_url,
                                    std::string framework, std::string model_name, std::string partition_method,
                                    int microbatch_size, int num_microbatches, std::vector<std::string> pipe_schedule,
                                    int report_every, py::object broadcast_job_id, std::string job_id,
                                    std::string nvml_library, double request_timeout, bool fail_open) {
  ClientOptions o;
  o.rank = rank, o.dp_rank = dp_rank, o.pp_rank = pp_rank, o.tp_rank = tp_rank;
  o.dp_degree = dp_degree, o.pp_degree = pp_degree, o.tp_degree = tp_degree, o.world_size = world_size;
  o.device = device;
  o.server_url = std::move(server_url);
  o.framework = std::move(framework), o.model_name = std::move(model_name), o.partition_method = std::move(partition_method);
  o.microbatch_size = microbatch_size, o.num_microbatches = num_microbatches;
  o.pipe_schedule = std::move(pipe_schedule);
  o.report_every = report_every;
  o.job_id = std::move(job_id);
  o.nvml_library = std::move(nvml_library);
  o.request_timeout = std::chrono::milliseconds(static_cast<long>(request_timeout * 1000));
  o.fail_open = fail_open;
  if (!broadcast_job_id.is_none()) {
    // Called from this thread with the GIL released; take it back for the Python callable.
    o.broadcast_job_id = [broadcast_job_id](const std::string& id) {
      py::gil_scoped_acquire gil;
      return broadcast_job_id(id).cast<std::string>();
    };
  }
  py::gil_scoped_release release;
  return std::make_unique<Client>(std::move(o));
}

}  // namespace

PYBIND11_MODULE(perseus, m) {
  m.doc() = "perseus: per-instruction GPU clock plans for pipeline-parallel training";
  py::register_exception<perseus::client::ProfilingDone>(m, "ProfilingDone", PyExc_RuntimeError);

  py::class_<Client>(m, "Client", "One per training rank; see the README for the training-loop hooks.")
      .def(py::init(&make_client), py::arg("rank"), py::arg("dp_rank") = 0, py::arg("pp_rank") = 0,
           py::arg("tp_rank") = 0, py::arg("dp_degree") = 1, py::arg("pp_degree") = 1, py::arg("tp_degree") = 1,
           py::arg("world_size") = 1, py::arg("device") = 0, py::arg("server_url") = "http://127.0.0.1:7787",
           py::arg("framework") = "perseus", py::arg("model_name") = "model", py::arg("partition_method") = "uniform",
           py::arg("microbatch_size") = 1, py::arg("num_microbatches") = 1,
           py::arg("pipe_schedule") = std::vector<std::string>{}, py::arg("report_every") = 5,
           py::arg("broadcast_job_id") = py::none(), py::arg("job_id") = "", py::arg("nvml_library") = "",
           py::arg("request_timeout") = 30.0, py::arg("fail_open") = true)
      .def("on_step_begin", &Client::on_step_begin)
      .def("on_step_end", &Client::on_step_end, py::call_guard<py::gil_scoped_release>(),
           "Ends an iteration; every report_every iterations reports and fetches the next schedule (blocks at the "
           "round barrier). Raises ProfilingDone when the server says training should stop.")
      .def("on_instruction_begin", [](Client& c, const std::string& name) { c.on_instruction_begin(name); })
      .def("on_instruction_end", [](Client& c, const std::string& name) { c.on_instruction_end(name); })
      .def("flush", &Client::flush, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("enabled", &Client::enabled)
      .def_property_readonly("job_id", &Client::job_id)
      .def_property_readonly("round", &Client::round)
      .def_property_readonly("schedule", &Client::schedule)
      .def_property_readonly("pipe_schedule", &Client::pipe_schedule)
      .def_property_readonly("mode", &Client::mode)
      .def("close", &Client::close, py::call_guard<py::gil_scoped_release>(),
           "Stops the controller thread and resets the GPU's clocks; the hooks do nothing afterwards.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Client& c, py::object, py::object, py::object) {
        py::gil_scoped_release release;
        c.close();
        return false;
      });

  m.def("default_pipe_schedule", &perseus::client::default_pipe_schedule, py::arg("pp_rank"), py::arg("pp_degree"),
        py::arg("num_microbatches"), "DeepSpeed's 1F1B order of one stage's forwards and backwards.");

  m.def(
      "gpu_clocks",
      [](unsigned device, const std::string& library) {
        auto gpu = perseus::gpu::load_nvml(library);
        auto memory = gpu->supported_memory_clocks(device);
        return gpu->supported_graphics_clocks(device, memory.front());
      },
      py::arg("device") = 0, py::arg("nvml_library") = "", "Supported graphics clocks of a GPU (read-only).");
}
