"""`perseus serve` as a process on a free port, for the Python and browser tests (no other imports,
so that the browser tests, which run without the perseus module, can use it too)."""
import re
import subprocess


def start_serve(binary, dump_dir, scheduler, scheduler_args="{}", extra=()):
    """Starts `perseus serve` on a free port; (process, URL) once it printed its ready line."""
    assert binary, "no perseus binary: set PERSEUS_BINARY or put perseus on PATH"
    proc = subprocess.Popen([binary, "serve", "--port", "0", "--dump-dir", str(dump_dir), "--scheduler", scheduler,
                             "--scheduler-args", scheduler_args, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    port = re.search(r"127\.0\.0\.1:(\d+)", line)
    if not port:
        proc.kill()
        raise AssertionError(f"no ready line: {line!r}")
    return proc, f"http://127.0.0.1:{port.group(1)}"


def stop_all(procs):
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


def start_gpud_metrics(binary, nvml, socket_path, gpus=2):
    """Starts `perseus gpud` on the fake NVML with `gpus` GPUs and metrics on a free loopback port;
    (process, metrics URL) once it printed both ready lines."""
    import os
    proc = subprocess.Popen([binary, "gpud", "--socket", str(socket_path), "--nvml", nvml, "--metrics-address", "127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, PERSEUS_FAKE_NVML_GPUS=str(gpus)))
    url = None
    for _ in range(2):  # the socket's ready line, then the metrics'
        found = re.search(r"metrics on (http://\S+)", proc.stdout.readline())
        url = url or (found and found.group(1))
    if not url:
        proc.kill()
        raise AssertionError("gpud printed no metrics address")
    return proc, url
