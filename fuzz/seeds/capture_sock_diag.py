#!/usr/bin/env python3
"""Captures sock_diag seeds from the running kernel (the real encoder): the
request src/drain.rs sends (all TCP sockets but listeners, with tcp_info),
while a connected pair has unread data. Of each reply datagram only the
messages of that pair are kept (other sockets of the machine are nobody's
business), as the kernel wrote them; one seed per datagram.

    python3 fuzz/seeds/capture_sock_diag.py fuzz/seeds/sock_diag
"""
import os, socket, struct, sys

out = sys.argv[1]
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1)
cli = socket.create_connection(srv.getsockname()); peer, _ = srv.accept()
cli.sendall(b"x" * 3000)  # unread by the peer: a non-empty receive queue

nl = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4)  # NETLINK_SOCK_DIAG
req = struct.pack("=BBBBI", socket.AF_INET, socket.IPPROTO_TCP, 1 << 1, 0, ~(1 << 10) & 0xffffffff)
req += b"\0" * 48  # inet_diag_sockid: any
hdr = struct.pack("=IHHII", 16 + len(req), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY, REQUEST|DUMP
nl.send(hdr + req)
os.makedirs(out, exist_ok=True)
n = 0
while True:
    data = nl.recv(65536)
    ports = {srv.getsockname()[1], cli.getsockname()[1]}
    kept, off = b"", 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        msg = data[off:off + length]
        if kind != 20 or {struct.unpack_from(">H", msg, 20)[0], struct.unpack_from(">H", msg, 22)[0]} <= ports:
            kept += msg + b"\0" * (-length % 4)
        off += (length + 3) & ~3
    data = kept
    with open(os.path.join(out, f"dump{n}"), "wb") as f:
        f.write(data)
    n += 1
    if struct.unpack_from("=H", data, 4)[0] == 3 or n > 4:  # NLMSG_DONE
        break
print(f"{n} datagrams")
