"""A remote store's fetches, served to the processes forked from the one that opened it.

obstore's client runs on a tokio runtime whose threads do not survive a fork: a worker
process that fetched through the client it inherited could wait forever. So a forked
child never fetches. It asks the opener, over a unix socket, to open a shard: the opener
fetches it into the shared cache when it is missing (as its own reads do), notes that
the reader has reached it (so the fetch-ahead thread follows the workers' reads) and
answers with the cached file's path and the shards the reader still needs (the child
closes its others). The service starts just before the first fork (shard_fetcher.py);
one thread accepts the children and one answers each; ``close`` ends and joins them.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import weakref
from typing import Callable

from .remote import RemoteError

_services: "weakref.WeakSet[FetchService]" = weakref.WeakSet()


class FetchService:
    """``open_shard(name) -> (path, names still needed)``, in this process, for its forked children."""

    def __init__(self, open_shard: "weakref.WeakMethod[Callable[[str], tuple[str, list[str]]]]"):
        self._open_shard = open_shard   # weakly: the service does not keep its store alive
        self.owner = os.getpid()
        self.address = f"\0feedline-fetch-{self.owner}-{id(self):x}"   # abstract: nothing on disk
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._client: tuple[int, socket.socket, threading.Lock] | None = None   # (pid, socket, lock) of a child
        self._acceptor = threading.Thread(target=self._accept, name="feedline-fetch-service", daemon=True)
        self._acceptor.start()
        _services.add(self)

    # -- the opener's side ---------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:   # shut down by close()
                return
            with self._lock:
                if self._closed:
                    conn.close()
                    return
                thread = threading.Thread(target=self._answer, args=(conn,), name="feedline-fetch-answer",
                                          daemon=True)
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        """One child's requests, a shard's name a line, each answered with a line of JSON."""
        with conn.makefile("rb") as requests:
            for line in requests:
                try:
                    open_shard = self._open_shard()
                    if open_shard is None:
                        raise RemoteError("the data set was closed")
                    path, needed = open_shard(line.decode().rstrip("\n"))
                    reply = {"path": path, "needed": needed}
                except Exception as exc:   # the child raises it, with the shard's name
                    reply = {"error": f"{type(exc).__name__}: {exc}"}
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    return

    def close(self) -> None:
        """Stop accepting, end every child's connection, and join the threads (a fetch under
        way finishes first)."""
        if os.getpid() != self.owner or self._closed:
            return
        with self._lock:
            self._closed = True
            conns, threads = list(self._conns), [self._acceptor, *self._threads]
        for sock in (self._listener, *conns):
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes the threads blocked on them
            except OSError:
                pass
        for thread in threads:
            if thread is not threading.current_thread():   # a finalizer may run on one of them
                thread.join()
        for sock in (self._listener, *conns):
            sock.close()

    # -- a forked child's side -----------------------------------------------------------------
    def open(self, name: str) -> tuple[str, list[str]]:
        """(the cached path of shard ``name``, the shards the reader still needs), from the opener."""
        if self._client is None or self._client[0] != os.getpid():
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(self.address)
            self._client = (os.getpid(), sock, threading.Lock())
        _, sock, lock = self._client
        with lock:
            sock.sendall(name.encode() + b"\n")
            answer = _line(sock)
        if not answer:
            raise RemoteError(f"shard {name}: the process that opened the data set (pid {self.owner}) did not "
                              "answer; it fetches the shards for the worker processes")
        reply = json.loads(answer)
        if "error" in reply:
            raise RemoteError(f"shard {name}: {reply['error']}")
        return reply["path"], reply["needed"]

    def _forget_in_child(self) -> None:
        """In a forked child: close its copies of the opener's sockets (the opener's threads
        are not here); its own connection is made on its first request."""
        for sock in (self._listener, *self._conns):
            fd = sock.detach()   # whatever files the opener's threads made over it
            if fd >= 0:
                os.close(fd)
        self._conns, self._threads, self._client = [], [], None
        self._lock = threading.Lock()


def _line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data


def _after_fork_in_child() -> None:
    for service in list(_services):
        service._forget_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)
