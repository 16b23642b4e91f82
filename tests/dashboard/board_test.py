#!/usr/bin/python3
"""chorus-board as a process: event files written here by an independent writer (TF2-style
tensor scalars, and TF1/chorus-style simple_value scalars), served as curves over HTTP;
a file that grows shows its new points; garbage requests do not stop the server.

usage: board_test.py CHORUS_BOARD [EVENT_DIR...]  (EVENT_DIRs: more directories of event
files to serve, e.g. a real training's --logdir; each must give at least one chart)
"""
import os
import re
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", masked(n)) + data + struct.pack("<I", masked(data))


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    return key + varint(len(payload)) + payload if wire == 2 else key + payload


def event(step, value_msg):
    return (field(1, 1, struct.pack("<d", 1.7e9 + step)) + field(2, 0, varint(step)) +
            field(5, 2, field(1, 2, value_msg)))


def tf2_scalar(tag, value, step):
    tensor = field(1, 0, varint(1)) + field(5, 2, struct.pack("<f", value))
    meta = field(1, 2, field(1, 2, b"scalars"))
    return event(step, field(1, 2, tag) + field(9, 2, meta) + field(8, 2, tensor))


def simple_scalar(tag, value, step):
    return event(step, field(1, 2, tag) + field(2, 5, struct.pack("<f", value)))


def charts(port):
    with OPENER.open("http://127.0.0.1:%d/charts" % port, timeout=5) as r:
        html = r.read().decode()
    titles = re.findall(r'font-weight="bold">([^<]*)</text>', html)
    return html, titles


def main():
    board = sys.argv[1]
    extra = sys.argv[2:]
    tmp = tempfile.mkdtemp(prefix="chorus_board_test.")
    os.makedirs(tmp + "/tf2/train")
    os.makedirs(tmp + "/tf1")
    with open(tmp + "/tf2/train/events.out.tfevents.1700000000.host.1.v2", "wb") as f:
        f.write(record(event(0, b"")[:11] + field(3, 2, b"brain.Event:2")))
        for s in range(5):
            f.write(record(tf2_scalar(b"epoch_loss", 2.0 / (s + 1), s)))
    growing = tmp + "/tf1/events.out.tfevents.1700000000.host.2"
    with open(growing, "wb") as f:
        for s in range(3):
            f.write(record(simple_scalar(b"epoch_loss", 1.5 - 0.1 * s, s)))
    for i, d in enumerate(extra):
        os.symlink(os.path.abspath(d), "%s/extra%d" % (tmp, i))
    proc = subprocess.Popen([board, tmp, "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(re.search(r":(\d+)/", proc.stdout.readline()).group(1))
        html, titles = charts(port)
        print("board_test: charts", titles)
        assert "epoch_loss" in titles, titles
        loss = html[html.index("epoch_loss"):]
        loss = loss[:loss.index("</svg>")]
        assert loss.count("<polyline") >= 2, loss  # tf1 and tf2/train side by side
        assert ">tf2/train<" in loss and ">tf1<" in loss
        for d in extra:  # a real training's event files give their charts too
            assert len(titles) > 1, titles
        # garbage and a slow client do not stop it
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"\x00\xff garbage\r\n\r\n")
        s.recv(100)
        s.close()
        with open(growing, "ab") as f:
            f.write(record(simple_scalar(b"epoch_loss", 0.9, 3)))
            f.write(record(simple_scalar(b"new_tag", 1.0, 3)))
        deadline = time.time() + 10
        while time.time() < deadline and "new_tag" not in charts(port)[1]:
            time.sleep(0.5)
        assert "new_tag" in charts(port)[1], "the grown file was not re-read"
        print("board_test: PASS (a grown file re-read, garbage answered)")
    finally:
        proc.terminate()
        proc.wait()
        subprocess.run(["rm", "-rf", tmp])


if __name__ == "__main__":
    main()
