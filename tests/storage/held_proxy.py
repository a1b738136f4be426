"""A TCP proxy in front of a real server that lets the first `pass_bytes`
bytes of the server's answers through and then holds everything: a client
downloading through it is stopped mid-transfer, at a byte the test chose,
for as long as the test wants (to kill it there, say). No timing involved:
`holding` is set the moment the limit is reached."""
from __future__ import annotations

import socket
import threading


class HeldProxy:
    def __init__(self, target: tuple[str, int], *, pass_bytes: int) -> None:
        self.target = target
        self.pass_bytes = pass_bytes
        self.holding = threading.Event()
        self._passed = 0
        self._count = threading.Lock()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, True), daemon=True).start()

    def _allowed(self, data: bytes) -> bytes:
        """What of an answer's `data` may pass; the rest is held."""
        with self._count:
            allowed = data[:max(0, self.pass_bytes - self._passed)]
            self._passed += len(allowed)
        if len(allowed) < len(data):
            self.holding.set()
        return allowed

    def _pipe(self, src: socket.socket, dst: socket.socket, answers: bool) -> None:
        try:
            while data := src.recv(65536):
                allowed = self._allowed(data) if answers else data
                if allowed:
                    dst.sendall(allowed)
                if len(allowed) < len(data):
                    self._closed.wait()  # held until the test closes the proxy
                    return
        except OSError:
            return

    def close(self) -> None:
        """Stop: every connection ends at once (shut down, so that a thread
        blocked reading one wakes and its peer sees the end), and none is
        accepted any more."""
        self._closed.set()
        for sock in [self._listener, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def __enter__(self) -> HeldProxy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
