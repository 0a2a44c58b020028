"""What the benchmark scripts share to run a perseus server on this machine."""
import socket
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
