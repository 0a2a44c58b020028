"""The training-side client bounds what it reads of a reply: a server (broken, or not perseus) whose
reply announces a body of 1 GiB is refused from the header, at once, without the process allocating
it."""
import resource
import socket
import threading
import time

import pytest

from fakegpu import FAKE_NVML

import perseus


class HugeReplyServer:
    """Answers every request with a header announcing `length` bytes, then a trickle of them."""

    def __init__(self, length):
        self.length = length
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stop = False
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while not self.stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                             f"Content-Length: {self.length}\r\n\r\n".encode())
                chunk = b"0" * 65536
                for _ in range(256):  # 16 MiB at most, then the connection stays open
                    conn.sendall(chunk)
                time.sleep(5)
            except OSError:
                pass

    def close(self):
        self.stop = True
        self.sock.close()


@pytest.mark.parametrize("length", [1 << 30, 100 << 20])
def test_a_reply_announcing_a_huge_body_is_refused_at_once(length):
    server = HugeReplyServer(length)
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="larger than a reply may be"):
            perseus.Client(rank=0, server_url=server.url, nvml_library=FAKE_NVML, fail_open=False)
        took = time.monotonic() - start
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        assert took < 3, f"the constructor took {took:.1f} s"
        assert grown_mib < 64, f"the process grew by {grown_mib:.0f} MiB reading the reply"
        # With fail_open (the default) training goes on without perseus.
        client = perseus.Client(rank=0, server_url=server.url, nvml_library=FAKE_NVML)
        assert not client.enabled
    finally:
        server.close()
