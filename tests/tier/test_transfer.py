"""Pulling a checkpoint over TCP: real sockets on 127.0.0.1, a real server, and fake
servers and clients that speak the protocol (spelled here again, from the module's
docstring) to play the hostile user on the same network."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import stat
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from slurmpre.errors import TransferError
from slurmpre.tier import transfer
from slurmpre.tier.transfer import KEY_BYTES, Server, pull

MAGIC = b"SPTIER1\n"
NAME = "step-00000012"
HOST = "127.0.0.1"


def h(key: bytes, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, b"".join((label, MAGIC, *parts)), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        assert chunk, f"the connection ended after {len(data)} of {size} bytes"
        data += chunk
    return data


def recv_all(sock: socket.socket) -> bytes:
    """Everything until the other side closes (a reset counts as a close)."""
    data = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(1 << 16):
            data += chunk
    return data


def tree(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith(".pulling-"))


@pytest.fixture
def key() -> bytes:
    return secrets.token_bytes(KEY_BYTES)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A served root holding one checkpoint: nested folders, an empty file, a few MB."""
    folder = tmp_path / "local" / NAME
    (folder / "optim" / "shard-0").mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(os.urandom(5 << 20) + b"tail")
    (folder / "empty").write_bytes(b"")
    (folder / "optim" / "state.pt").write_bytes(os.urandom(70_000))
    (folder / "optim" / "shard-0" / "rank 0.bin").write_bytes(b"rank zero")
    (folder / "meta.json").write_text('{"step": 12}\n')
    return tmp_path / "local"


@pytest.fixture
def server(root: Path, key: bytes) -> Iterator[Server]:
    with Server(root, key, host=HOST) as running:
        yield running


@pytest.fixture
def pulled(tmp_path: Path) -> Path:
    (tmp_path / "successor").mkdir()
    return tmp_path / "successor" / NAME


def refused(port: int, key: bytes, dest: Path, name: str = NAME, **kw: Any) -> str:
    """Pull and expect a refusal: its message, once checked that nothing was left."""
    with pytest.raises(TransferError) as info:
        pull(HOST, port, key, name, dest, **kw)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"pull of {name} from {HOST}:{port} failed: "), message
    assert not dest.exists()
    assert leftovers(dest.parent) == []
    return message


@contextlib.contextmanager
def fake_server(act: Callable[[socket.socket], Any]) -> Iterator[tuple[int, Future[Any]]]:
    """A server that accepts one connection and does ``act`` with it, in a thread whose
    result (or exception) the test reads from the future."""
    with socket.create_server((HOST, 0)) as listener, ThreadPoolExecutor(1) as pool:
        listener.settimeout(30)  # a client that never comes fails the test, not hangs it

        def run() -> Any:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(30)
                return act(conn)

        future = pool.submit(run)
        yield listener.getsockname()[1], future
        future.result(timeout=30)


def handshake(conn: socket.socket, key: bytes) -> tuple[bytes, bytes]:
    """The server's side of the handshake, as a server that knows the key does it."""
    hello = recv_exact(conn, len(MAGIC) + 32)
    assert hello[: len(MAGIC)] == MAGIC
    nc, ns = hello[len(MAGIC) :], os.urandom(32)
    conn.sendall(MAGIC + ns + h(key, b"server", nc, ns))
    proof = recv_exact(conn, 34)
    name = recv_exact(conn, int.from_bytes(proof[32:], "big"))
    assert hmac.compare_digest(proof[:32], h(key, b"client", ns, nc, name))
    return nc, ns


def send_manifest(conn: socket.socket, key: bytes, nc: bytes, ns: bytes, entries: object) -> None:
    raw = json.dumps(entries).encode()
    conn.sendall(b"M" + len(raw).to_bytes(4, "big") + raw + h(key, b"manifest", nc, ns, raw))


def file_mac(key: bytes, nc: bytes, ns: bytes, index: int, data: bytes) -> bytes:
    prefix = b"file" + MAGIC + nc + ns + index.to_bytes(8, "big")
    return hashlib.blake2b(prefix + data, key=key, digest_size=32).digest()


def ask(port: int, key: bytes, name: bytes, proof_key: bytes | None = None) -> bytes:
    """A client that checks the server's proof, proves itself with ``proof_key`` (the
    key by default), asks for ``name`` and returns all the server sends after that."""
    with socket.create_connection((HOST, port), timeout=30) as sock:
        nc = os.urandom(32)
        sock.sendall(MAGIC + nc)
        reply = recv_exact(sock, len(MAGIC) + 64)
        ns = reply[len(MAGIC) : -32]
        assert reply[-32:] == h(key, b"server", nc, ns)
        proof = h(proof_key or key, b"client", ns, nc, name)
        sock.sendall(proof + len(name).to_bytes(2, "big") + name)
        return recv_all(sock)


# -- what a pull brings ----------------------------------------------------------------


def test_a_pulled_folder_equals_its_source_byte_for_byte(
    server: Server, root: Path, key: bytes, pulled: Path
) -> None:
    got = pull(HOST, server.port, key, NAME, pulled)
    source = tree(root / NAME)
    assert tree(pulled) == source
    assert set(source) >= {"empty", "optim/shard-0/rank 0.bin", "model.safetensors"}
    assert (got.files, got.bytes) == (len(source), sum(map(len, source.values())))
    assert got.seconds > 0
    assert leftovers(pulled.parent) == []
    for path in [pulled, *pulled.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_a_server_serves_one_client_after_another(server: Server, key: bytes, pulled: Path) -> None:
    pull(HOST, server.port, key, NAME, pulled)
    again = pulled.parent / "again"
    pull(HOST, server.port, key, NAME, again)
    assert tree(again) == tree(pulled)


def test_an_existing_dest_is_left_untouched(server: Server, key: bytes, pulled: Path) -> None:
    pulled.mkdir()
    (pulled / "mine").write_text("keep me")
    with pytest.raises(TransferError, match="exists"):
        pull(HOST, server.port, key, NAME, pulled)
    assert tree(pulled) == {"mine": b"keep me"}
    assert leftovers(pulled.parent) == []


def test_a_missing_or_empty_folder_is_named_as_such(
    server: Server, root: Path, key: bytes, pulled: Path
) -> None:
    assert "no folder named step-00000099" in refused(server.port, key, pulled, "step-00000099")
    (root / "step-00000013" / "only-a-folder").mkdir(parents=True)
    assert "holds no file" in refused(server.port, key, pulled, "step-00000013")


# -- who may ask, who may answer -------------------------------------------------------


def test_a_client_with_another_key_gets_nothing(server: Server, pulled: Path) -> None:
    other = secrets.token_bytes(KEY_BYTES)
    assert "the server's proof is wrong" in refused(server.port, other, pulled)


def test_a_client_whose_proof_is_wrong_is_served_nothing(server: Server, key: bytes) -> None:
    other = secrets.token_bytes(KEY_BYTES)
    assert ask(server.port, key, NAME.encode(), proof_key=other) == b""
    assert ask(server.port, key, NAME.encode())[:1] == b"M"  # the same request, proven


def test_an_impostor_server_is_refused_and_learns_only_a_nonce(pulled: Path, key: bytes) -> None:
    def impostor(conn: socket.socket) -> bytes:
        heard = recv_exact(conn, len(MAGIC) + 32)
        conn.sendall(MAGIC + os.urandom(32) + os.urandom(32))  # it cannot make the proof
        return heard + recv_all(conn)

    with fake_server(impostor) as (port, heard):
        assert "the server's proof is wrong" in refused(port, key, pulled)
    assert heard.result()[: len(MAGIC)] == MAGIC
    assert len(heard.result()) == len(MAGIC) + 32  # a random nonce: nothing keyed, no name


def test_a_server_of_another_key_is_refused(root: Path, key: bytes, pulled: Path) -> None:
    with Server(root, secrets.token_bytes(KEY_BYTES), host=HOST) as impostor:
        message = refused(impostor.port, key, pulled)
    assert "the server's proof is wrong (not our job's server" in message


@pytest.mark.parametrize("name", ["..", "../outside", "a/b", ".hidden", "", "step\n1", "é"])
def test_names_other_than_one_plain_folder_are_refused(
    server: Server, root: Path, key: bytes, pulled: Path, name: str
) -> None:
    (root / ".hidden").mkdir()
    (root / ".hidden" / "f").write_text("hidden")
    (root.parent / "outside").mkdir()
    (root.parent / "outside" / "f").write_text("outside")
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("nested")
    with pytest.raises(TransferError, match="not one plain folder name"):
        pull(HOST, server.port, key, name, pulled)
    answer = ask(server.port, key, name.encode())
    assert answer[:1] == b"E" and b"not one plain folder name" in answer
    assert not pulled.exists()


def test_links_and_what_is_not_a_file_are_never_served(
    server: Server, root: Path, key: bytes, pulled: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "another-user"
    outside.mkdir()
    (outside / "secret").write_bytes(b"SECRET-OF-ANOTHER-USER")
    folder = root / NAME
    (folder / "link-to-file").symlink_to(outside / "secret")
    (folder / "optim" / "link-to-folder").symlink_to(outside)
    os.mkfifo(folder / "fifo")  # a FIFO would hang a reader
    (root / "step-00000014").symlink_to(outside)  # a whole checkpoint that is a link

    pull(HOST, server.port, key, NAME, pulled)
    assert tree(pulled) == tree(folder)  # which skips links: the files, and only them
    assert not any(p.is_symlink() for p in pulled.rglob("*"))
    assert not (pulled / "fifo").exists()
    assert b"SECRET-OF-ANOTHER-USER" not in ask(server.port, key, NAME.encode())
    other = pulled.parent / "other"
    assert "cannot be served" in refused(server.port, key, other, "step-00000014")


# -- a transfer that goes wrong --------------------------------------------------------


def test_a_server_closed_midway_through_a_big_file_fails_the_pull(
    root: Path, key: bytes, pulled: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (root / NAME / "model.safetensors").write_bytes(os.urandom(48 << 20))
    real = transfer._recv_into
    seen: list[int] = []

    def close_after_the_first_buffer(sock: socket.socket, view: memoryview, what: str) -> None:
        real(sock, view, what)
        if len(view) == transfer.CHUNK:  # only the client reads whole buffers
            seen.append(len(view))
            old.close()  # the client has a part of the big file, the rest is unsent

    monkeypatch.setattr(transfer, "_recv_into", close_after_the_first_buffer)
    with Server(root, key, host=HOST) as old:
        message = refused(old.port, key, pulled)
    assert seen, "the client never read a whole buffer"
    assert "model.safetensors" in message or "reset" in message, message


@pytest.mark.parametrize(("change", "says"), [(+10, "within 'f'"), (-10, "after 'f'")])
def test_a_file_that_changed_size_while_sent_aborts_the_transfer(
    root: Path, key: bytes, pulled: Path, monkeypatch: pytest.MonkeyPatch, change: int, says: str
) -> None:
    """The server sends exactly the size in its manifest or aborts: a file that is
    shorter (it shrank) or longer (it grew) than its manifest says is not sent."""
    (root / "flat").mkdir()
    (root / "flat" / "f").write_bytes(os.urandom(100_000))
    real = transfer._walk

    def stale(fd: int, prefix: str) -> Iterator[tuple[str, int]]:
        for rel, size in real(fd, prefix):
            yield rel, size + change

    monkeypatch.setattr(transfer, "_walk", stale)
    with Server(root, key, host=HOST) as server:
        assert says in refused(server.port, key, pulled, "flat")


def test_a_refused_connection_or_a_silent_server_fails_the_pull(key: bytes, pulled: Path) -> None:
    with socket.create_server((HOST, 0)) as closed:
        port = closed.getsockname()[1]
    assert "cannot connect" in refused(port, key, pulled)
    with fake_server(recv_all) as (port, _):
        assert "no answer within 0.2 s" in refused(port, key, pulled, timeout=0.2)


# -- a hostile server that knows the key (or plays one) --------------------------------


@pytest.mark.parametrize(
    "rel", ["../escaped", "ABSOLUTE", "a/../../escaped", "a//b", "./x", "a/", "x\0y"]
)
def test_a_manifest_that_leads_outside_is_refused(
    key: bytes, pulled: Path, tmp_path: Path, rel: str
) -> None:
    rel = rel.replace("ABSOLUTE", str(tmp_path / "escaped"))
    before = sorted(tmp_path.rglob("*"))

    def hostile(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        send_manifest(conn, key, nc, ns, [["fine", 2], [rel, 3]])
        with contextlib.suppress(OSError):  # the client hangs up first
            conn.sendall(b"ok" + file_mac(key, nc, ns, 0, b"ok") + b"bad")
            conn.sendall(file_mac(key, nc, ns, 1, b"bad"))

    with fake_server(hostile) as (port, _):
        assert "unsafe path" in refused(port, key, pulled)
    assert sorted(tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    ("entries", "says"),
    [
        ([["a", -1]], "a size of -1"),
        ([["a", "3"]], "a size of '3'"),
        ([], "lists no file"),
        ({"a": 1}, "lists no file"),
    ],
)
def test_a_malformed_manifest_is_refused(
    key: bytes, pulled: Path, entries: object, says: str
) -> None:
    def hostile(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        send_manifest(conn, key, nc, ns, entries)
        recv_all(conn)

    with fake_server(hostile) as (port, _):
        assert says in refused(port, key, pulled)


def test_a_file_named_twice_is_not_written_over(key: bytes, pulled: Path) -> None:
    def hostile(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        send_manifest(conn, key, nc, ns, [["a", 1], ["a", 1]])
        with contextlib.suppress(OSError):  # the client hangs up first
            conn.sendall(b"1" + file_mac(key, nc, ns, 0, b"1") + b"2")
            conn.sendall(file_mac(key, nc, ns, 1, b"2"))

    with fake_server(hostile) as (port, _):
        assert "File exists" in refused(port, key, pulled)


def test_a_flipped_byte_is_refused(key: bytes, pulled: Path) -> None:
    data = os.urandom(3 << 20)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1

    def forger(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        send_manifest(conn, key, nc, ns, [["model.bin", len(data)]])
        conn.sendall(bytes(flipped) + file_mac(key, nc, ns, 0, data))
        recv_all(conn)

    with fake_server(forger) as (port, _):
        assert "'model.bin' does not match its digest" in refused(port, key, pulled)


def test_a_manifest_with_a_wrong_proof_is_refused(key: bytes, pulled: Path) -> None:
    def forger(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        raw = json.dumps([["a", 1]]).encode()
        conn.sendall(b"M" + len(raw).to_bytes(4, "big") + raw + h(key, b"manifest", ns, nc, raw))
        recv_all(conn)

    with fake_server(forger) as (port, _):
        assert "the manifest's proof is wrong" in refused(port, key, pulled)


def test_a_fake_server_speaking_the_protocol_is_understood(key: bytes, pulled: Path) -> None:
    """The protocol the hostile tests speak is the module's: a faithful fake is pulled from."""

    def faithful(conn: socket.socket) -> None:
        nc, ns = handshake(conn, key)
        send_manifest(conn, key, nc, ns, [["x/y", 3], ["z", 0]])
        conn.sendall(b"abc" + file_mac(key, nc, ns, 0, b"abc") + file_mac(key, nc, ns, 1, b""))

    with fake_server(faithful) as (port, _):
        got = pull(HOST, port, key, NAME, pulled)
    assert tree(pulled) == {"x/y": b"abc", "z": b""}
    assert (got.files, got.bytes) == (2, 3)


# -- the server itself -----------------------------------------------------------------


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_bad_client_does_not_end_the_server(server: Server, key: bytes, pulled: Path) -> None:
    for garbage in (b"GET / HTTP/1.0\r\n\r\n".ljust(40, b" "), b"", MAGIC):
        with socket.create_connection((HOST, server.port), timeout=30) as sock:
            sock.sendall(garbage)
            sock.shutdown(socket.SHUT_WR)
            assert recv_all(sock) == b""
    pull(HOST, server.port, key, NAME, pulled)
    assert tree(pulled)


def test_clients_beyond_max_clients_are_closed_at_once(root: Path, key: bytes) -> None:
    with Server(root, key, host=HOST, max_clients=2) as server, contextlib.ExitStack() as stack:
        for _ in range(2):  # two clients in the handshake: each holds a serving thread
            sock = stack.enter_context(socket.create_connection((HOST, server.port), timeout=30))
            sock.sendall(MAGIC + os.urandom(32))
            assert recv_exact(sock, len(MAGIC) + 64)[: len(MAGIC)] == MAGIC
        with socket.create_connection((HOST, server.port), timeout=30) as third:
            with contextlib.suppress(OSError):  # closed before the hello is written
                third.sendall(MAGIC + os.urandom(32))
            assert recv_all(third) == b""


def test_close_is_idempotent_and_ends_the_service(root: Path, key: bytes, pulled: Path) -> None:
    with Server(root, key, host=HOST) as server:
        port = server.port
        assert port > 0
    server.close()
    assert "cannot connect" in refused(port, key, pulled)


def test_a_key_of_the_wrong_length_is_refused_at_once(root: Path, pulled: Path) -> None:
    with pytest.raises(TransferError, match="the key must be 32 bytes, not 16"):
        Server(root, b"k" * 16)
    with pytest.raises(TransferError, match="the key must be 32 bytes, not 16"):
        pull(HOST, 1, b"k" * 16, NAME, pulled)
