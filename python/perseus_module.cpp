// `perseus._perseus`: the compiled half of the `perseus` Python package (python/perseus/ holds the
// rest). The training-side client for Python training loops (PyTorch, Megatron, DeepSpeed). The
// hooks release the GIL wherever they may block (registration, the round barrier), so other
// Python threads keep running. Every argument has its real name and every docstring an Args
// section: `help(perseus.Client)` is the reference users read first.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "perseus/client/client.hpp"
#include "perseus/gpu/backends.hpp"
#include "perseus/gpu/visible_devices.hpp"
#include "perseus/pipeline/schedule.hpp"
#include "perseus/util/error.hpp"

namespace py = pybind11;
using perseus::client::Client;
using perseus::client::ClientOptions;

namespace {

std::unique_ptr<Client> make_client(int rank, int dp_rank, int pp_rank, int tp_rank, int dp_degree, int pp_degree,
                                    int tp_degree, int world_size, unsigned device, std::string server_url,
                                    std::string framework, std::string model_name, std::string partition_method,
                                    int microbatch_size, int num_microbatches, std::vector<std::string> pipe_schedule,
                                    int report_every, py::object broadcast_job_id, std::string job_id,
                                    std::string nvml_library, double request_timeout, bool fail_open,
                                    bool strict_schedule, std::string gpud_socket, std::string token, double retry_for,
                                    double heartbeat_interval, std::string job_secret, double weight) {
  ClientOptions o;
  o.rank = rank, o.dp_rank = dp_rank, o.pp_rank = pp_rank, o.tp_rank = tp_rank;
  o.dp_degree = dp_degree, o.pp_degree = pp_degree, o.tp_degree = tp_degree, o.world_size = world_size;
  o.device = device;
  o.server_url = std::move(server_url);
  o.framework = std::move(framework), o.model_name = std::move(model_name),
  o.partition_method = std::move(partition_method);
  o.microbatch_size = microbatch_size, o.num_microbatches = num_microbatches;
  o.pipe_schedule = std::move(pipe_schedule);
  o.report_every = report_every;
  o.job_id = std::move(job_id);
  o.job_secret = std::move(job_secret);
  o.nvml_library = std::move(nvml_library);
  o.request_timeout = std::chrono::milliseconds(static_cast<long>(request_timeout * 1000));
  o.fail_open = fail_open;
  o.strict_schedule = strict_schedule;
  o.gpud_socket = std::move(gpud_socket);
  o.token = std::move(token);
  o.retry_for = std::chrono::milliseconds(static_cast<long>(retry_for * 1000));
  o.heartbeat_interval = std::chrono::milliseconds(static_cast<long>(heartbeat_interval * 1000));
  o.weight = weight;
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

// The node's GPUs numbered as CUDA numbers them ($CUDA_VISIBLE_DEVICES), read-only helpers' view.
std::shared_ptr<perseus::gpu::GpuLibrary> visible_gpus(const std::string& library) {
  return perseus::gpu::cuda_numbered(perseus::gpu::load_gpu_library("", library),
                                     perseus::gpu::cuda_visible_devices_from_env());
}

perseus::ScheduleKind schedule_kind(const std::string& name) {
  auto kind = perseus::parse_schedule_kind(name);
  if (!kind) throw py::value_error("schedule must be one of " + perseus::schedule_names() + ", not '" + name + "'");
  return *kind;
}

constexpr const char* kClientDoc = R"(The perseus client of one training rank.

Construct one per rank (rank 0 registers the job with `perseus serve`; the job id reaches the
other ranks through `broadcast_job_id`), then call the hooks in the training loop:
`on_step_begin()`, `on_instruction_begin(name)` / `on_instruction_end(name)` around every forward
and backward, `on_step_end()`. The hooks only enqueue; a controller thread locks the GPU clock the
server's schedule gives each instruction and reads the GPU's energy counter. With `fail_open`
(the default) any server or GPU failure disables perseus with one warning and training goes on
at the GPU's default clocks. `close()` (or leaving a `with` block) resets the clocks.)";

constexpr const char* kInitDoc = R"(Registers this rank (and, on rank 0, the job) with the server.

Args:
    rank: global rank of this process (0 registers the job).
    dp_rank: data-parallel rank (which pipeline replica).
    pp_rank: pipeline-parallel rank (the stage).
    tp_rank: tensor-parallel rank within the stage.
    dp_degree: number of data-parallel pipelines.
    pp_degree: number of pipeline stages.
    tp_degree: tensor-parallel ranks per stage.
    world_size: total ranks; must equal dp_degree * pp_degree * tp_degree.
    device: the GPU as CUDA numbers it: with CUDA_VISIBLE_DEVICES=2,3, device 1 is NVML's GPU 3
        (indices or GPU-UUIDs; unset: NVML's numbering).
    server_url: URL of `perseus serve`.
    framework: job metadata, part of the job id.
    model_name: job metadata, part of the job id.
    partition_method: job metadata, part of the job id.
    microbatch_size: job metadata, part of the job id.
    num_microbatches: microbatches per iteration; with the default pipe_schedule it sets the
        number of forwards and backwards.
    pipe_schedule: this rank's instruction names in execution order; empty: the 1F1B order
        `default_pipe_schedule(pp_rank, pp_degree, num_microbatches)`.
    report_every: iterations per round: every report_every iterations on_step_end hands the
        measurements to a background thread, which sends them and fetches the next schedule
        (training never waits on the server; at least 2 for coupled ranks).
    broadcast_job_id: callable(str) -> str: rank 0 calls it with the new job id, the other
        ranks call it with "" and get the id back (a collective: every rank calls it once).
        Not needed when world_size is 1 or job_id is given.
    job_id: join this already registered job (no registration, no broadcast).
    job_secret: with job_id, that job's secret if it has one; "" means $PERSEUS_JOB_SECRET.
        (Rank 0 registers the job with a secret, which broadcast_job_id carries with the id.)
    nvml_library: path of libnvidia-ml; "" means $PERSEUS_NVML_LIBRARY, else libnvidia-ml.so.1.
    request_timeout: seconds any request (the schedule barrier's too) may take.
    fail_open: True: failures disable perseus with a warning and training continues;
        False: they raise RuntimeError.
    strict_schedule: what happens when the instructions an iteration runs do not follow
        pipe_schedule (names out of order, another count), so that the plan's clocks would land
        on the wrong instructions. False: one warning, and this rank stays at default clocks
        while still taking part in every round; True: the hook that noticed raises
        ScheduleMismatch and perseus is off for this process.
    gpud_socket: the node's `perseus gpud` socket; "" means $PERSEUS_GPUD_SOCKET, and NVML
        directly when that is unset. Through the daemon this process needs no privileges and
        its clocks are reset the moment it exits, however it exits.
    token: the server's bearer token (perseus serve --token-file); "" means $PERSEUS_TOKEN.
    retry_for: seconds to keep retrying a server that went away (restart, network) at round
        boundaries while training continues at the current clocks; then give up as fail_open
        says. A restarted server resumes the job. A server that does not answer yet when the
        client is made is retried the same way: training starts at default clocks, and the
        client registers in the background once it answers (job_id is "" until then).
    heartbeat_interval: seconds between heartbeats that tell the server this rank is alive and
        progressing, so a killed or hung rank is named within seconds; 0: none.
    weight: the job's priority under the server's cluster power budget (perseus serve
        --power-budget): its throughput counts this many times when the budget is shared out.)";

}  // namespace

void bind_monitor(py::module_& m);      // monitor_bindings.cpp
void bind_power_limit(py::module_& m);  // power_limit_bindings.cpp

PYBIND11_MODULE(_perseus, m) {
  m.doc() = "perseus: per-instruction GPU clock plans for pipeline-parallel training (compiled part).";
  m.attr("__version__") = PERSEUS_VERSION;
  py::register_exception<perseus::client::ProfilingDone>(m, "ProfilingDone", PyExc_RuntimeError);
  m.attr("ProfilingDone").attr("__doc__") =
      "The server says this job has nothing more to run (e.g. profiling finished): training should stop.";

  py::register_exception<perseus::client::ScheduleMismatch>(m, "ScheduleMismatch", PyExc_RuntimeError);
  m.attr("ScheduleMismatch").attr("__doc__") =
      "The instructions an iteration ran do not follow the registered pipe_schedule (with strict_schedule=True).";

  py::class_<Client>(m, "Client", kClientDoc)
      .def(py::init(&make_client), kInitDoc, py::arg("rank"), py::arg("dp_rank") = 0, py::arg("pp_rank") = 0,
           py::arg("tp_rank") = 0, py::arg("dp_degree") = 1, py::arg("pp_degree") = 1, py::arg("tp_degree") = 1,
           py::arg("world_size") = 1, py::arg("device") = 0, py::arg("server_url") = "http://127.0.0.1:7787",
           py::arg("framework") = "perseus", py::arg("model_name") = "model", py::arg("partition_method") = "uniform",
           py::arg("microbatch_size") = 1, py::arg("num_microbatches") = 1,
           py::arg("pipe_schedule") = std::vector<std::string>{}, py::arg("report_every") = 5,
           py::arg("broadcast_job_id") = py::none(), py::arg("job_id") = "", py::arg("nvml_library") = "",
           py::arg("request_timeout") = 30.0, py::arg("fail_open") = true, py::arg("strict_schedule") = false,
           py::arg("gpud_socket") = "", py::arg("token") = "", py::arg("retry_for") = 300.0,
           py::arg("heartbeat_interval") = 5.0, py::arg("job_secret") = "", py::arg("weight") = 1.0)
      .def("on_step_begin", &Client::on_step_begin,
           "Starts an iteration: the schedule fetched at the last round boundary takes effect.")
      .def("on_step_end", &Client::on_step_end, py::call_guard<py::gil_scoped_release>(),
           "Ends an iteration; every report_every iterations hands the round's measurements to the background "
           "thread that reports them and fetches the next schedule (never waits on the server). Raises ProfilingDone "
           "once the server said training should stop.")
      .def(
          "on_instruction_begin", [](Client& c, const std::string& name) { c.on_instruction_begin(name); },
          py::arg("name"),
          "Marks the start of an instruction; its scheduled clock is locked before it is measured.\n\n"
          "Args:\n    name: the instruction, e.g. 'forward' or 'backward'; it must be the next entry of "
          "pipe_schedule (names not in pipe_schedule are measured and keep the current clock).\n\n"
          "Raises:\n    ScheduleMismatch: with strict_schedule, when name is not the next registered instruction.")
      .def(
          "on_instruction_end", [](Client& c, const std::string& name) { c.on_instruction_end(name); }, py::arg("name"),
          "Marks the end of an instruction; its time and energy are measured up to here.\n\n"
          "Args:\n    name: the same name as the matching on_instruction_begin.")
      .def("flush", &Client::flush, py::call_guard<py::gil_scoped_release>(),
           "Waits until the controller thread has applied every clock change and measurement enqueued so far.")
      .def(
          "wait_for_server",
          [](Client& c, double timeout) {
            return c.wait_for_server(std::chrono::milliseconds(static_cast<long>(timeout * 1000)));
          },
          py::arg("timeout") = 30.0, py::call_guard<py::gil_scoped_release>(),
          "Waits at most timeout seconds until the background exchange with the server settled (results sent, the "
          "next schedule in); True when it did. For tests and simulations: training never needs it.")
      .def_property_readonly("enabled", &Client::enabled, "False once perseus gave up (fail_open) or was closed.")
      .def_property_readonly("job_id", &Client::job_id, "The job's id on the server.")
      .def_property_readonly("job_secret", &Client::job_secret,
                             "The job's secret (\"\" when the server gave none): with job_id, what another process "
                             "needs to change the job (PERSEUS_JOB_SECRET for perseus straggler).")
      .def_property_readonly("round", &Client::round, "Rounds (of report_every iterations) completed.")
      .def_property_readonly("schedule", &Client::schedule,
                             "Power state (clock in MHz, or power limit in W) per pipe_schedule entry, this round.")
      .def_property_readonly("pipe_schedule", &Client::pipe_schedule,
                             "This rank's instruction names in execution order, as registered.")
      .def_property_readonly("mode", &Client::mode, "'frequency' or 'power limit', from the server.")
      .def("close", &Client::close, py::arg("finished") = true, py::call_guard<py::gil_scoped_release>(),
           "Training is over for this rank: stops the controller thread, resets the GPU's clocks and tells the "
           "server (once every rank closed, the job is done). finished=False: stopped by an error (the job "
           "ends as failed, so no rank waits for this one). The hooks do nothing afterwards.")
      .def(
          "__enter__", [](py::object self) { return self; }, "Returns the client itself.")
      .def(
          "__exit__",
          [](Client& c, py::object exc_type, py::object, py::object) {
            const bool finished = exc_type.is_none();
            py::gil_scoped_release release;
            c.close(finished);
            return false;
          },
          py::arg("exc_type"), py::arg("exc_value"), py::arg("traceback"),
          "Closes the client (resets the clocks; finished unless the block raised); exceptions propagate.");

  m.def(
      "default_pipe_schedule",
      [](int pp_rank, int pp_degree, int num_microbatches, const std::string& schedule, int virtual_stages) {
        try {
          return perseus::client::default_pipe_schedule(pp_rank, pp_degree, num_microbatches, schedule_kind(schedule),
                                                        virtual_stages);
        } catch (const perseus::Error& e) {
          throw py::value_error(e.what());
        }
      },
      py::arg("pp_rank"), py::arg("pp_degree"), py::arg("num_microbatches"), py::arg("schedule") = "1f1b",
      py::arg("virtual_stages") = 1,
      "One stage's forwards and backwards in the order its schedule runs them.\n\n"
      "Args:\n    pp_rank: the stage, 0 <= pp_rank < pp_degree.\n    pp_degree: number of stages.\n"
      "    num_microbatches: microbatches per iteration.\n"
      "    schedule: '1f1b' (DeepSpeed's TrainSchedule; Megatron-LM's non-interleaved 1F1B runs the same order), "
      "'gpipe' (all forwards, then all backwards), 'interleaved' (Megatron-LM's interleaved 1F1B), 'zb-h1', 'zbv' "
      "or 'dualpipev' (the orders of PyTorch's ScheduleInterleavedZeroBubble with one stage per rank, "
      "ScheduleZBVZeroBubble and ScheduleDualPipeV: backward_input / backward_weight, and forward_backward for an "
      "overlapped pair).\n"
      "    virtual_stages: with 'interleaved', model chunks per stage (Megatron-LM's "
      "virtual_pipeline_model_parallel_size); num_microbatches must be a multiple of pp_degree.");

  m.def(
      "gpu_clocks",
      [](unsigned device, const std::string& library) {
        auto gpu = visible_gpus(library);
        auto memory = gpu->supported_memory_clocks(device);
        return gpu->supported_graphics_clocks(device, memory.front());
      },
      py::arg("device") = 0, py::arg("nvml_library") = "",
      "Supported graphics clocks (MHz, highest first) of a GPU at its top memory clock; read-only.\n\n"
      "Args:\n    device: the GPU as CUDA numbers it (CUDA_VISIBLE_DEVICES applies).\n    nvml_library: path of "
      "libnvidia-ml; \"\" as for Client.");

  m.def(
      "current_gpu_clock",
      [](unsigned device, const std::string& library) { return visible_gpus(library)->current_graphics_clock(device); },
      py::arg("device") = 0, py::arg("nvml_library") = "",
      "The SM clock (MHz) a GPU runs at now (a power limit may hold it below its lock); read-only.\n\n"
      "Args:\n    device: the GPU as CUDA numbers it (CUDA_VISIBLE_DEVICES applies).\n    nvml_library: path of "
      "libnvidia-ml; \"\" as for Client.");

  bind_monitor(m);
  bind_power_limit(m);
}
