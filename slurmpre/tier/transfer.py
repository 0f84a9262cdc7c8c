"""Pull a checkpoint folder straight from the node that wrote it, over TCP.

Both ends prove they hold the job's 32-byte key before anything is served, and every byte
is checked against a keyed digest (docs/security.md, 10). The bytes travel in the clear (no
standard-library cipher keeps up): what is guarded is who may ask and who may answer.

The protocol (integers big-endian; ``H`` is HMAC-SHA256, ``B`` BLAKE2b, keyed with the key):

1. client: ``MAGIC nc``, its fresh 32-byte nonce.
2. server: ``MAGIC ns H("server" MAGIC nc ns)``. The client checks this proof before it sends
   anything keyed: an impostor learns a random nonce, nothing else.
3. client: ``H("client" MAGIC ns nc name) u16(len(name)) name``. A wrong proof closes the
   connection, nothing served. Labels and nonce order differ: no proof is reflected.
4. server: ``u8 kind, u32 length``, then ``E`` and one line saying why not (a bad name, no such
   folder, no file in it), or ``M``, the manifest (JSON ``[[relpath, size], ...]``) and
   ``H("manifest" MAGIC nc ns manifest)``.
5. server, per entry in order: exactly ``size`` bytes, then ``B("file" MAGIC nc ns u64(index)
   bytes)``; a file that shrinks or grows while it is sent aborts the connection. Hashing at
   both ends bounds the speed: BLAKE2b runs near 0.8 GB/s a core on any CPU (HMAC-SHA256 is
   faster only where the CPU has SHA extensions; bench/transfer.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import io
import json
import logging
import os
import re
import secrets
import selectors
import shutil
import socket
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from slurmpre.errors import TransferError

KEY_BYTES = 32
MAGIC = b"SPTIER1\n"
NONCE = TAG = 32
ANY_HOST = "0.0.0.0"  # noqa: S104 - the successor runs elsewhere; the key decides who is served
# Reads, hashes and writes go by this much: Python's cost per call vanishes beside the work.
CHUNK = 2 << 20
MAX_MANIFEST = 64 << 20  # no server makes a client hold more than this in memory
MAX_LINE = 1000
HANDSHAKE_SECONDS = 10.0  # the longest an unproven client holds one of the slots
STALL_SECONDS = 60.0  # the longest the server waits on a proven client that stopped reading
# One folder name: no separator, no "." or "..", nothing hidden.
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,254}")

_Entries = list[tuple[str, int]]  # a manifest: each file's path under the folder, and its size
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a FIFO put where a file was is never waited on (fstat then refuses it).
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
LOG = logging.getLogger(__name__)


class _Refused(TransferError):
    """Why the server will not serve a proven client's request: sent to it as one line."""


@dataclass(frozen=True)
class Pulled:
    """What one pull brought: how many files, how many bytes, in how long."""

    files: int
    bytes: int
    seconds: float


def _check_key(key: bytes, where: str) -> None:
    if len(key) != KEY_BYTES:
        raise TransferError(f"{where}: the key must be {KEY_BYTES} bytes, not {len(key)}")


def _mac(key: bytes, label: bytes, *parts: bytes) -> hmac.HMAC:
    return hmac.new(key, b"".join((label, MAGIC, *parts)), hashlib.sha256)


def _digest(key: bytes, session: bytes, index: int) -> hashlib.blake2b:
    head = b"file" + MAGIC + session + index.to_bytes(8, "big")
    return hashlib.blake2b(head, key=key, digest_size=TAG)


def _recv_into(sock: socket.socket, view: memoryview, what: str) -> None:
    """Fill ``view`` from ``sock``; the connection ending first is an error ``what`` says."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            raise TransferError(f"the connection ended {what}")
        got += n


def _recv(sock: socket.socket, size: int, what: str) -> bytes:
    _recv_into(sock, buf := memoryview(bytearray(size)), what)
    return bytes(buf)


@contextlib.contextmanager
def _opened(path: str | Path, flags: int, dir_fd: int | None = None) -> Iterator[int]:
    fd = os.open(path, flags, 0o600, dir_fd=dir_fd)
    try:
        yield fd
    finally:
        os.close(fd)


class Server:
    """Serves the checkpoint folders directly under ``root``, read-only, to clients that
    prove they hold ``key``.

    One thread accepts, and owns the set of client threads; each client is served in a
    daemon thread of its own, and whatever it does wrong ends only its own connection.
    """

    def __init__(
        self, root: Path, key: bytes, host: str = ANY_HOST, port: int = 0, max_clients: int = 8
    ) -> None:
        _check_key(key, f"serving {root} on {host}:{port}")
        self._root, self._key, self._host, self._port = Path(root), bytes(key), host, port
        self._max_clients, self._closed = max_clients, False
        self._thread: threading.Thread | None = None
        self._wake: socket.socket | None = None

    def start(self) -> Server:
        """Bind, listen and serve in daemon threads."""
        where = f"{self._host}:{self._port}"
        if self._thread is not None or self._closed:
            raise TransferError(f"the server on {where} was started already")
        try:
            listener = socket.create_server((self._host, self._port), backlog=64)
        except OSError as exc:
            raise TransferError(f"cannot serve on {where}: {exc.strerror or exc}") from None
        listener.setblocking(False)
        self._port = listener.getsockname()[1]
        wake, self._wake = socket.socketpair()
        self._thread = threading.Thread(target=self._accept, args=(listener, wake), daemon=True)
        self._thread.start()
        return self

    @property
    def port(self) -> int:
        return self._port

    def close(self) -> None:
        """Stop accepting, close every connection, and wait for the serving threads."""
        if not self._closed and self._thread is not None and self._wake is not None:
            with contextlib.suppress(OSError):  # the accepting thread ended already
                self._wake.send(b"x")
            self._thread.join()
            self._wake.close()
        self._closed = True

    def __enter__(self) -> Server:
        return self if self._thread is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self, listener: socket.socket, wake: socket.socket) -> None:
        clients: dict[socket.socket, threading.Thread] = {}
        with selectors.DefaultSelector() as selector, listener, wake:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while not any(key.fileobj is wake for key, _ in selector.select()):
                try:
                    conn, peer = listener.accept()
                except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                    continue
                except OSError as exc:  # out of descriptors: let some client end first
                    LOG.warning("transfer on port %d cannot accept: %s", self._port, exc)
                    time.sleep(0.1)
                    continue
                clients = {c: t for c, t in clients.items() if t.is_alive()}
                if len(clients) >= self._max_clients:
                    LOG.debug("transfer on port %d: %s refused, too many", self._port, peer)
                    conn.close()
                    continue
                thread = threading.Thread(target=self._client, args=(conn, peer), daemon=True)
                clients[conn] = thread
                thread.start()
        for conn in clients:  # close() asked: end every connection, wait for its thread
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in clients.values():
            thread.join()

    def _client(self, conn: socket.socket, peer: object) -> None:
        try:
            with conn:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a digest goes at once
                conn.settimeout(HANDSHAKE_SECONDS)
                session, name = self._handshake(conn)
                conn.settimeout(STALL_SECONDS)
                try:
                    self._serve(conn, session, name.decode("ascii", "replace"))
                except _Refused as exc:
                    line = str(exc).encode()[:MAX_LINE]
                    conn.sendall(b"E" + len(line).to_bytes(4, "big") + line)
        except Exception as exc:  # noqa: BLE001 - no client, however bad, ends the server
            LOG.debug("transfer on port %d: %s: %s", self._port, peer, exc)

    def _handshake(self, conn: socket.socket) -> tuple[bytes, bytes]:
        """The nonces of both sides, which every later digest covers, and the name asked."""
        hello = _recv(conn, len(MAGIC) + NONCE, "before the client's hello")
        if hello[: len(MAGIC)] != MAGIC:
            raise TransferError("a client that does not speak this protocol")
        nc, ns = hello[len(MAGIC) :], secrets.token_bytes(NONCE)
        conn.sendall(MAGIC + ns + _mac(self._key, b"server", nc, ns).digest())
        proof = _recv(conn, TAG + 2, "before the client's proof")
        name = _recv(conn, int.from_bytes(proof[TAG:], "big"), "before the client's request")
        if not hmac.compare_digest(proof[:TAG], _mac(self._key, b"client", ns, nc, name).digest()):
            raise TransferError("a client whose proof is wrong (not our job's key)")
        return nc + ns, name

    def _serve(self, conn: socket.socket, session: bytes, name: str) -> None:
        if not NAME.fullmatch(name):
            raise _Refused(f"{name!r} is not one plain folder name")
        with contextlib.ExitStack() as stack:
            try:
                root = stack.enter_context(_opened(self._root, _DIR & ~os.O_NOFOLLOW))
                folder = stack.enter_context(_opened(name, _DIR, dir_fd=root))
                entries = list(_walk(folder, ""))
            except FileNotFoundError:
                raise _Refused(f"no folder named {name}") from None
            except OSError as exc:  # ELOOP for a link, ENOTDIR for a file: neither is served
                raise _Refused(f"{name} cannot be served: {exc.strerror}") from None
            if not entries:
                raise _Refused(f"the folder {name} holds no file")
            manifest = json.dumps(entries).encode()
            tag = _mac(self._key, b"manifest", session, manifest).digest()
            conn.sendall(b"M" + len(manifest).to_bytes(4, "big") + manifest + tag)
            buf = memoryview(bytearray(CHUNK))
            for index, (rel, size) in enumerate(entries):
                mac = _digest(self._key, session, index)
                _send_file(conn, folder, rel, size, mac, buf)
                conn.sendall(mac.digest())
        LOG.debug("transfer on port %d: served %s (%d files)", self._port, name, len(entries))


def _walk(fd: int, prefix: str) -> Iterator[tuple[str, int]]:
    """The regular files under the open folder ``fd``, sorted, with their sizes. Links, and
    whatever is neither a file nor a folder, are skipped: no link is ever followed."""
    for entry in sorted(os.scandir(fd), key=lambda e: e.name):  # read whole, then closed
        if entry.is_dir(follow_symlinks=False):
            with _opened(entry.name, _DIR, dir_fd=fd) as sub:
                yield from _walk(sub, f"{prefix}{entry.name}/")
        elif entry.is_file(follow_symlinks=False):
            yield f"{prefix}{entry.name}", entry.stat(follow_symlinks=False).st_size


def _send_file(
    conn: socket.socket, folder: int, rel: str, size: int, mac: hashlib.blake2b, buf: memoryview
) -> None:
    """Send exactly ``size`` bytes of ``rel``, opened under ``folder`` through no link at any
    level, and hash exactly those. Read and send, not sendfile: the bytes must be read to
    be hashed anyway, and sendfile would read the file again, perhaps changed since."""
    *dirs, leaf = rel.split("/")
    with contextlib.ExitStack() as stack:
        for part in dirs:
            folder = stack.enter_context(_opened(part, _DIR, dir_fd=folder))
        file = stack.enter_context(io.FileIO(os.open(leaf, _READ, dir_fd=folder), "r"))
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise TransferError(f"{rel!r} is no longer a regular file")
        left = size
        while left:
            n = file.readinto(buf[: min(left, len(buf))])
            if not n:
                raise TransferError(f"{rel!r} shrank while it was sent")
            mac.update(buf[:n])
            conn.sendall(buf[:n])
            left -= n
        if file.readinto(buf[:1]):
            raise TransferError(f"{rel!r} grew while it was sent")


def pull(
    host: str, port: int, key: bytes, name: str, dest: Path, *, timeout: float = 30.0
) -> Pulled:
    """Pull the folder ``name`` from the server at ``host:port`` into ``dest``, which must not
    exist: into a hidden folder beside it, checked file by file, then renamed to ``dest``
    at once. A failure leaves neither ``dest`` nor the hidden folder. ``timeout`` bounds
    the connect and each stall, not the whole transfer."""
    where = f"pull of {name if NAME.fullmatch(name) else repr(name)} from {host}:{port}"
    _check_key(key, where)
    dest = Path(dest)
    temp = dest.parent / f".pulling-{dest.name}-{os.getpid()}"
    start = time.monotonic()
    try:
        if not NAME.fullmatch(name):
            raise TransferError("the name is not one plain folder name")
        if os.path.lexists(dest):
            raise TransferError(f"{dest} exists (a pull never replaces a folder)")
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise TransferError(f"cannot connect: {exc.strerror or exc}") from None
        with sock:
            session, entries = _ask(sock, key, name)
            temp.mkdir(0o700)  # not if it exists: then it is another pull's, or a crashed one's
            try:
                _receive(sock, key, session, entries, temp)
                # A file, a link or a folder with something in it made at dest since is
                # not replaced (the rename fails); an empty folder is: it held nothing.
                temp.rename(dest)
            except BaseException:
                shutil.rmtree(temp, ignore_errors=True)
                raise
    except (TransferError, OSError) as exc:
        why = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else exc
        raise TransferError(f"{where} failed: {why}") from None
    return Pulled(len(entries), sum(size for _, size in entries), time.monotonic() - start)


def _ask(sock: socket.socket, key: bytes, name: str) -> tuple[bytes, _Entries]:
    """The client's handshake and request: the session (both nonces) and the manifest."""
    nc = secrets.token_bytes(NONCE)
    sock.sendall(MAGIC + nc)
    reply = _recv(sock, len(MAGIC) + NONCE + TAG, "during the handshake")
    ns = reply[len(MAGIC) : -TAG]
    if reply[: len(MAGIC)] != MAGIC:
        raise TransferError("the server does not speak this protocol")
    if not hmac.compare_digest(reply[-TAG:], _mac(key, b"server", nc, ns).digest()):
        raise TransferError("the server's proof is wrong (not our job's server, or not our key)")
    raw = name.encode()
    sock.sendall(_mac(key, b"client", ns, nc, raw).digest() + len(raw).to_bytes(2, "big") + raw)
    head = _recv(sock, 5, "before the server's answer (did it refuse our proof?)")
    kind, size = head[:1], int.from_bytes(head[1:], "big")
    if kind == b"E" and size <= MAX_LINE:
        line = _recv(sock, size, "during the server's answer").decode("utf-8", "replace")
        raise TransferError(f"the server says {line!r}")
    if kind != b"M" or size > MAX_MANIFEST:
        raise TransferError("the server's answer is malformed")
    manifest = _recv(sock, size + TAG, "during the manifest")
    manifest, tag = manifest[:-TAG], manifest[-TAG:]
    if not hmac.compare_digest(tag, _mac(key, b"manifest", nc + ns, manifest).digest()):
        raise TransferError("the manifest's proof is wrong")
    return nc + ns, _entries(manifest)


def _entries(manifest: bytes) -> _Entries:
    """The manifest's ``(relpath, size)`` pairs, each a path that stays inside the folder."""
    try:
        data = json.loads(manifest)
    except ValueError:
        raise TransferError("the manifest is not JSON") from None
    if not isinstance(data, list) or not data:
        raise TransferError("the manifest lists no file")
    entries: _Entries = []
    for item in data:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise TransferError("the manifest is not a list of [path, size]")
        rel, size = item
        if type(size) is not int or size < 0:
            raise TransferError(f"the manifest gives {rel!r} a size of {size!r}")
        if any(p in ("", ".", "..") or "\0" in p for p in rel.split("/")):
            raise TransferError(f"the manifest names an unsafe path {rel!r}")
        entries.append((rel, size))
    return entries  # a name given twice is caught when written: files are made O_EXCL


def _receive(
    sock: socket.socket, key: bytes, session: bytes, entries: _Entries, temp: Path
) -> None:
    """Receive each file into ``temp`` (folders 0700, files 0600), a buffer at a time, and
    check it against its digest. Paths are safe to follow here: ``temp`` is new, ours and
    closed to others, and nothing in it is a link, for only folders and files are made."""
    buf = memoryview(bytearray(CHUNK))
    for index, (rel, size) in enumerate(entries):
        for sub in reversed(Path(rel).parents[:-1]):
            with contextlib.suppress(FileExistsError):
                (temp / sub).mkdir(0o700)
        mac = _digest(key, session, index)
        with io.FileIO(os.open(temp / rel, _NEW, 0o600), "w") as file:
            left = size
            while left:
                n = min(left, len(buf))
                _recv_into(sock, buf[:n], f"within {rel!r} ({size - left} of {size} bytes in)")
                mac.update(buf[:n])
                view = buf[:n]
                while view:
                    view = view[file.write(view) or 0 :]
                left -= n
        if not hmac.compare_digest(_recv(sock, TAG, f"after {rel!r}"), mac.digest()):
            raise TransferError(f"{rel!r} does not match its digest (corrupt or forged)")
