"""What the benchmark scripts share to run a perseus server on this machine."""
import re
import select
import socket
import subprocess
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, seconds=20):
    """Until the server at `url` answers GET /info; RuntimeError after `seconds`."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url + "/info", timeout=1).read()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"no server at {url}")


def discard(stream):
    """Reads a stream to its end, keeping nothing (a server's log can outgrow memory over a long run)."""
    for _ in stream:
        pass


def serve(perseus, args, stderr=subprocess.DEVNULL, seconds=20):
    """`perseus serve ARGS` on a port the system picks: (the process, its URL) once it answers. A port picked
    here and handed over could be taken by another script's server in between, and this one's clients would then
    talk to that server. A server that does not start is reported with what it wrote to stderr (where the caller
    discards it, read until the server answers and discarded from then on, as its output is)."""
    discarded = stderr == subprocess.DEVNULL
    process = subprocess.Popen([perseus, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE if discarded else stderr, text=True)
    deadline = time.time() + seconds
    line = ""
    while time.time() < deadline and process.poll() is None:
        if select.select([process.stdout], [], [], 0.1)[0]:
            line = process.stdout.readline()
            if "listening on" in line:
                break
    found = re.search(r"listening on (http://\S+)", line)
    if not found:
        process.kill()
        process.wait()
        said = " ".join(filter(None, [line.strip(), process.stderr.read().strip()[-500:] if discarded else ""]))
        raise RuntimeError(f"perseus serve did not start: {said or 'no output'}")
    for rest in [process.stdout] + ([process.stderr] if discarded else []):
        threading.Thread(target=discard, args=(rest,), daemon=True).start()  # whatever else it prints
    url = found.group(1)
    wait_for(url, seconds)
    return process, url
