"""What the benchmark scripts share to run a perseus server on this machine."""
import re
import select
import socket
import subprocess
import tempfile
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


def serve(perseus, args, stderr=subprocess.DEVNULL, seconds=20):
    """`perseus serve ARGS` on a port the system picks: (the process, its URL) once it answers. A port picked
    here and handed over could be taken by another script's server in between, and this one's clients would then
    talk to that server. A server that does not start is reported with what it wrote to stderr (where the caller
    discards it, kept in a temporary file until then)."""
    errors = tempfile.TemporaryFile("w+") if stderr == subprocess.DEVNULL else None
    process = subprocess.Popen([perseus, "serve", *args, "--port", "0"], stdout=subprocess.PIPE,
                               stderr=errors or stderr, text=True)
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
        said = line.strip()
        if errors:
            errors.seek(0)
            said = " ".join(filter(None, [said, errors.read().strip()[-500:]]))
        raise RuntimeError(f"perseus serve did not start: {said or 'no output'}")
    if errors:
        errors.close()  # the server keeps its own descriptor; what it writes from now on is discarded with the file
    threading.Thread(target=process.stdout.read, daemon=True).start()  # whatever else it prints
    url = found.group(1)
    wait_for(url, seconds)
    return process, url
