"""Whole SET vs pieces (SETRANGE/APPEND into a temporary key, then RENAME) with raw sockets:
sendmsg straight from one buffer, 8 threads, same server, medians of 3 rounds."""
import socket, statistics, sys, threading, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from lmcache_resp_servers.server import RedisServer  # the benchmark's throwaway server
MiB = 1 << 20

def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)

def read_replies(sock, n, buf=bytearray(1 << 16)):
    seen = 0
    data = b""
    while seen < n:
        chunk = sock.recv(65536)
        assert chunk, "closed"
        data += chunk
        seen = data.count(b"\r\n")
        assert not data.startswith(b"-"), data
    return data

def bench(port, size, mode, piece=MiB, threads=8):
    per_thread = max(2, (1 << 30) // size // threads)
    value = memoryview(bytes(range(256)) * (size // 256))
    def work(t):
        s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(per_thread):
            key = f"{mode}:{t}:{i}".encode()
            if mode == "set":
                s.sendmsg([b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n" % (len(key), key, size), value, b"\r\n"])
                read_replies(s, 1)
            else:
                tmp = key + b":tmp"
                n = 0
                for off in range(0, size, piece):
                    part = value[off:off + piece]
                    if mode == "setrange":
                        head = b"*4\r\n$8\r\nSETRANGE\r\n$%d\r\n%s\r\n$%d\r\n%d\r\n$%d\r\n" % (len(tmp), tmp, len(str(off)), off, len(part))
                    else:
                        head = b"*3\r\n$6\r\nAPPEND\r\n$%d\r\n%s\r\n$%d\r\n" % (len(tmp), tmp, len(part))
                    s.sendmsg([head, part, b"\r\n"]); n += 1
                s.sendall(cmd(b"RENAME", tmp, key)); n += 1
                read_replies(s, n)
        s.close()
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for t in ts: t.start()
    for t in ts: t.join()
    dt = time.perf_counter() - t0
    c = socket.create_connection(("127.0.0.1", port)); c.sendall(cmd(b"FLUSHALL")); read_replies(c, 1); c.close()
    return threads * per_thread * size / dt / 1e9

kind = sys.argv[1]
with RedisServer(server=kind) as s:
    for size_mb in [8, 32, 80]:
        for mode in ["set", "setrange", "append", "set"]:
            rates = [bench(s.port, size_mb * MiB, mode) for _ in range(3)]
            print(f"{kind} {size_mb} MiB {mode}: {statistics.median(rates):.2f} GB/s ({' '.join(f'{r:.2f}' for r in rates)})", flush=True)
