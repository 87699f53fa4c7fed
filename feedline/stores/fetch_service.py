"""A remote store's fetches, served to the processes forked from the one that opened it.

obstore's client runs on a tokio runtime whose threads do not survive a fork: a worker
process that fetched through the client it inherited could wait forever. So a forked
child never fetches. It asks the opener, over a unix socket, to open a shard: the opener
fetches it into the shared cache when it is missing (as its own reads do), notes that
the reader has reached it (so the fetch-ahead thread follows the workers' reads) and
answers with the cached file's path and the shards the reader still needs (the child
closes its others). The opener starts the service before it forks (``Store.before_fork``);
one thread accepts the children and one answers each, and ends (closing its connection)
when that child goes; ``close`` ends and joins them.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
from functools import partial
from typing import Callable

from ..core.errors import StoreError, UnavailableError
from .process_local import ProcessLocal
from .remote import RemoteError

log = logging.getLogger(__name__)
JOIN_S = 2.0   # closing waits this long for an answer in flight (a fetch), then leaves it to end on its own


class _Client:
    """A forked child's connection to the opener: one request at a time."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(address)
        self.lock = threading.Lock()

    def close(self) -> None:
        self.sock.close()


class FetchService:
    """``open_shard(name) -> (path, names still needed)``, in this process, for its forked children."""

    def __init__(self, open_shard: Callable[[], Callable[[str], tuple[str, list[str]]] | None]):
        """``open_shard``: a weak method (the service does not keep its store alive)."""
        self._open_shard = open_shard
        self.owner = os.getpid()
        self.address = f"\0feedline-fetch-{self.owner}-{id(self):x}"   # abstract: nothing on disk
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen()
        self._lock = threading.Lock()
        self._answering: dict[socket.socket, threading.Thread] = {}   # the children connected now
        self._closed = False
        self._client: ProcessLocal[_Client] = ProcessLocal(partial(_Client, self.address), _Client.close)
        self._acceptor = threading.Thread(target=self._accept, name="feedline-fetch-service", daemon=True)
        self._acceptor.start()

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
                self._answering[conn] = thread
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        """One child's requests, a shard's name a line, each answered with a line of JSON; its
        connection closed here when the child goes (or the service closes)."""
        try:
            with conn.makefile("rb") as requests:
                for line in requests:
                    try:
                        conn.sendall(json.dumps(self._reply(line.decode().rstrip("\n"))).encode() + b"\n")
                    except OSError:
                        return
        except OSError:   # shut down by close()
            pass
        finally:
            with self._lock:
                self._answering.pop(conn, None)
            conn.close()

    def _reply(self, name: str) -> dict:
        try:
            open_shard = self._open_shard()
            if open_shard is None:
                raise RemoteError("the data set was closed")
            path, needed = open_shard(name)
            return {"path": path, "needed": needed}
        except Exception as exc:   # the child raises it, with the shard's name
            return {"error": f"{type(exc).__name__}: {exc}", "unavailable": isinstance(exc, UnavailableError)}

    def close(self) -> None:
        """Stop accepting, end every child's connection, and join the threads (an answer in
        flight, a fetch, is given ``JOIN_S``, then left to end with its request's timeout)."""
        if os.getpid() != self.owner or self._closed:
            return
        with self._lock:
            self._closed = True
            answering = dict(self._answering)
        for sock in (self._listener, *answering):
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes the threads blocked on them
            except OSError:
                pass
        for thread in (self._acceptor, *answering.values()):
            if thread is not threading.current_thread():   # a finalizer may run on one of them
                thread.join(JOIN_S)
        self._listener.close()

    # -- a forked child's side -----------------------------------------------------------------
    def open(self, name: str) -> tuple[str, list[str]]:
        """(the cached path of shard ``name``, the shards the reader still needs), from the opener."""
        client = self._client.get()   # this process's own connection, made on its first request
        with client.lock:
            client.sock.sendall(name.encode() + b"\n")
            answer = _line(client.sock)
        if not answer:
            raise RemoteError(f"shard {name}: the process that opened the data set (pid {self.owner}) did not "
                              "answer; it fetches the shards for the worker processes")
        reply = json.loads(answer)
        if "error" in reply:
            kind = RemoteError if reply.get("unavailable") else StoreError
            raise kind(f"shard {name}: {reply['error']}")
        return reply["path"], reply["needed"]


def _line(sock: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        data += chunk
    return data
