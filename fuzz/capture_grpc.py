#!/usr/bin/python3
"""Writes fuzz/corpus/grpc: what Debian's grpcio sends for a few calls, as the
seeds of fuzz_grpc (which sends the HTTP/2 preface itself, so it is cut off).

A bare socket stands in for the server: it sends an empty SETTINGS frame and
its ACK, so that grpcio goes on to send the call, and records until grpcio
gives up on the deadline.
Usage: /usr/bin/python3 fuzz/capture_grpc.py"""
import os
import socket
import threading

import grpc

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS_AND_ACK = b"\0\0\0\x04\0\0\0\0\0" + b"\0\0\0\x04\x01\0\0\0\0"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "grpc")


def record(sock, got):
    conn, _ = sock.accept()
    conn.settimeout(0.5)
    conn.sendall(SETTINGS_AND_ACK)
    try:
        while chunk := conn.recv(65536):
            got.extend(chunk)
    except socket.timeout:
        pass
    conn.close()


def capture(name, method, payload, stream=False):
    path = f"/tmp/gpulet-capture-{os.getpid()}.sock"
    if os.path.exists(path):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.listen(1)
    got = bytearray()
    t = threading.Thread(target=record, args=(sock, got))
    t.start()
    channel = grpc.insecure_channel("unix://" + path)
    call = (channel.unary_stream if stream else channel.unary_unary)(method)
    try:
        reply = call(payload, timeout=0.3)
        if stream:
            list(reply)
    except grpc.RpcError:
        pass  # nobody answers: the deadline ends the call
    t.join()
    channel.close()
    sock.close()
    os.unlink(path)
    assert got.startswith(PREFACE), bytes(got[:24])
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(bytes(got[len(PREFACE):]))


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    capture("unary", "/t.S/Unary", b"\x0a\x03abc")
    capture("stream", "/t.S/Stream", b"hello", stream=True)
    capture("fail", "/t.S/Fail", b"bad % input\xff")
    capture("unknown", "/t.S/Nope", b"")
    capture("unary-large", "/t.S/Unary", b"x" * 3000)
