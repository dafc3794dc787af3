#!/usr/bin/env python3
"""security.scan: a port scan of a running pool (tests/security/scan_target.cpp).

Starts the target with a join listener and object servers that copy objects between its agents,
finds every TCP port its processes listen on (/proc), and, while its rounds of work go on, sends
each port random bytes, a truncated handshake, a handshake under a wrong key, a byte a second and
200 connections at once; to the join listener also a real handshake (made here with the join
file's secret, which checks the listener's proof) and then a replay of it. fibra's own listeners
must be bound to one address, not every one, and must close every such connection within the
handshake's bound; every process of the run must still be alive; the target's results exact.
Prints the rounds' median time before and during the scan. Exit 0 with "PASS: ...", else "FAIL: ...".

usage: scan.py <scan_target binary> <work folder>
"""
import hashlib
import hmac
import json
import os
import random
import select
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

HELLO_BYTES, CHALLENGE_BYTES, ANSWER_BYTES = 48, 88, 56
HANDSHAKE_S = 2.0
CLOSE_BOUND_S = HANDSHAKE_S + 2.0


def fail(why):
    print("FAIL: " + why, flush=True)
    sys.exit(1)


def children_of(pid):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(d))
        except (OSError, IndexError, ValueError):
            pass
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(kids.get(p, []))
    return tree


def listening_sockets():
    """inode -> (address, port) of every listening TCP socket."""
    out = {}
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            lines = open(name).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A":
                continue
            addr_hex, port_hex = f[1].split(":")
            raw = bytes.fromhex(addr_hex)
            if v6:
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                addr = socket.inet_ntop(socket.AF_INET6, raw)
            else:
                addr = socket.inet_ntop(socket.AF_INET, raw[::-1])
            out[int(f[9])] = (addr, int(port_hex, 16))
    return out


def ports_of(pids):
    """[(pid, cmdline, address, port)] for the listening sockets these processes hold."""
    socks = listening_sockets()
    found = []
    for pid in pids:
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inode = int(link[8:-1])
                if inode in socks:
                    found.append((pid, cmd, *socks[inode]))
    return found


def target_of(addr):
    if addr in ("0.0.0.0", "::"):
        return "127.0.0.1" if addr == "0.0.0.0" else "::1"
    return addr


def connect(addr, port):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((target_of(addr), port))
    return s


def closed_within(s, bound):
    """Whether the peer closes (EOF or reset) within `bound` seconds, reading what it sends."""
    end = time.monotonic() + bound
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([s], [], [], left)
        if r:
            try:
                if not s.recv(65536):
                    return True
            except OSError:
                return True


def hello(role, pool, nonce):
    return b"fbra" + (1).to_bytes(2, "little") + bytes([role, 0]) + pool.to_bytes(8, "little") + nonce


def transcript(label, role, pool, nc, ns):
    return b"fibra-auth v1 " + label + b"\0" + bytes([role]) + pool.to_bytes(8, "little") + nc + ns


def proof_key(secret):
    """The subkey proofs are made under: libsodium's crypto_kdf_derive_from_key(1, "fbraauth")."""
    return hashlib.blake2b(b"", digest_size=32, key=secret, salt=(1).to_bytes(8, "little") + bytes(8),
                           person=b"fbraauth" + bytes(8)).digest()


def proof(key, t):
    return hmac.new(key, t, hashlib.sha512).digest()[:32]  # libsodium's crypto_auth: HMAC-SHA-512-256


def read_exact(s, n, bound=5.0):
    data = b""
    end = time.monotonic() + bound
    while len(data) < n and time.monotonic() < end:
        r, _, _ = select.select([s], [], [], max(0.0, end - time.monotonic()))
        if not r:
            break
        b = s.recv(n - len(data))
        if not b:
            break
        data += b
    return data


def real_handshake(addr, port, key):
    """A handshake as a joiner makes it; the bytes it sent. Fails the test if the listener's proof
    does not hold (the listener lacks the secret, or this script and fibra disagree)."""
    s = connect(addr, port)
    nc = os.urandom(32)
    sent = hello(1, 0, nc)
    s.sendall(sent)
    ch = read_exact(s, CHALLENGE_BYTES)
    if len(ch) != CHALLENGE_BYTES:
        fail(f"the join listener at {addr}:{port} did not answer a real handshake")
    ns, their = ch[:32], ch[32:64]
    if not hmac.compare_digest(their, proof(key, transcript(b"listener", 1, 0, nc, ns))):
        fail("the join listener's proof does not hold under the join file's secret")
    answer = proof(key, transcript(b"connector", 1, 0, nc, ns)) + os.urandom(24)
    s.sendall(answer)
    return s, sent + answer


def probes(addr, port, fibras, key, join_port, verdicts):
    """Every probe against one port; appends (port, probe, closed) to verdicts."""
    def note(name, s, bound=CLOSE_BOUND_S):
        verdicts.append((port, name, closed_within(s, bound) if fibras else True))
        s.close()

    s = connect(addr, port)
    s.sendall(os.urandom(4096))
    note("random bytes", s)
    s = connect(addr, port)
    s.sendall(hello(2, 0, os.urandom(32))[:20])
    note("a truncated hello", s)
    s = connect(addr, port)  # a wrong key: a hello, then a proof under another key
    s.sendall(hello(1 if port == join_port else 2, 0, os.urandom(32)))
    read_exact(s, CHALLENGE_BYTES, 3.0)
    try:
        s.sendall(os.urandom(ANSWER_BYTES))
    except OSError:
        pass
    note("a wrong key", s)
    if port == join_port:
        real, recorded = real_handshake(addr, port, key)
        real.close()
        s = connect(addr, port)
        s.sendall(recorded)
        note("a replayed handshake", s)
    s = connect(addr, port)  # a byte a second
    start, closed = time.monotonic(), False
    while time.monotonic() - start < CLOSE_BOUND_S + 1 and not closed:
        try:
            s.send(b"f")
        except OSError:
            closed = True
            break
        closed = closed_within(s, 1.0)
    verdicts.append((port, "a byte a second", closed if fibras else True))
    s.close()
    many = []
    for _ in range(200):
        try:
            many.append(connect(addr, port))
        except OSError:
            pass  # (the backlog full: refused, which is fine)
    end = time.monotonic() + CLOSE_BOUND_S + 2
    open_left = 0
    for c in many:
        if fibras and not closed_within(c, max(0.1, end - time.monotonic())):
            open_left += 1
        c.close()
    verdicts.append((port, f"200 connections at once ({open_left} left open)", open_left == 0))


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    binary, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    stop = os.path.join(work, "stop")
    join_file = os.path.join(work, "join")
    events = os.path.join(work, "events")
    env = dict(os.environ, FIBRA_JOIN_FILE=join_file, FIBRA_LANES="0", FIBRA_OBJECTS_AS_REMOTE="1",
               FIBRA_SECRET_DIR=os.path.join(work, "secrets"), FIBRA_PROGRESS="0", FIBRA_EVENTS=events)
    out = open(os.path.join(work, "target.out"), "w+")
    target = subprocess.Popen([binary, stop], env=env, stdout=out, stderr=subprocess.STDOUT)

    def lines():
        out.flush()
        return open(out.name).read().splitlines()

    def rounds():
        return [float(l.split()[2]) for l in lines() if l.startswith("ROUND ")]

    def wait_for(what, cond, bound):
        end = time.monotonic() + bound
        while time.monotonic() < end:
            if cond():
                return
            if target.poll() is not None:
                fail(f"the target ended (status {target.returncode}) before {what}:\n" + "\n".join(lines()[-30:]))
            time.sleep(0.1)
        target.kill()
        fail(f"no {what} within {bound} s:\n" + "\n".join(lines()[-30:]))

    try:
        wait_for("READY", lambda: "READY" in lines(), 120)
        wait_for("3 quiet rounds", lambda: len(rounds()) >= 3, 120)
        quiet = rounds()[:3]
        tree = children_of(target.pid)
        ports = ports_of(tree)
        text = open(join_file).read()
        key = proof_key(bytes.fromhex([l.split()[1] for l in text.splitlines() if l.startswith("secret ")][0]))
        join_port = int([l.split()[2] for l in text.splitlines() if l.startswith("hello ")][0])
        # The agents' object servers, as the event log's worker events give them ("objects": address:port).
        servers = set()
        for line in open(os.path.join(events, "events.jsonl")):
            e = json.loads(line)
            if e.get("ev") == "worker" and e.get("objects"):
                servers.add(int(e["objects"].rsplit(":", 1)[1]))
        fibra_ports = {p for (pid, cmd, a, p) in ports if p == join_port or p in servers}
        agents = {pid for (pid, cmd, a, p) in ports if p in servers}
        print(f"scan: {len(ports)} listening ports in {len(tree)} processes; fibra's: {sorted(fibra_ports)} "
              f"(the join listener {join_port}, {len(agents)} agents' object servers)", flush=True)
        for (pid, cmd, a, p) in ports:
            print(f"  {a}:{p} pid {pid} {cmd[:60]}", flush=True)
        if join_port not in fibra_ports or len(agents) != 2:
            fail("did not find the join listener and 2 object servers among the ports")
        for (pid, cmd, a, p) in ports:
            if p in fibra_ports and a in ("0.0.0.0", "::"):
                fail(f"fibra's listener {p} (pid {pid}) is bound to every address ({a})")
        scanned_from = len(rounds())
        verdicts = []
        only = os.environ.get("FIBRA_SCAN_ONLY", "")  # by hand: "fibra" or "mpi", to see which costs the run
        aimed = [(pid, cmd, a, p) for (pid, cmd, a, p) in ports
                 if not only or (only == "fibra" and p in fibra_ports) or (only == "mpi" and p not in fibra_ports)
                 or (only.startswith("cmd:") and p not in fibra_ports and only[4:] in cmd)]
        threads = [threading.Thread(target=probes, args=(a, p, p in fibra_ports, key, join_port, verdicts))
                   for (pid, cmd, a, p) in aimed]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if any(t.is_alive() for t in threads):
            fail("a probe did not end within 120 s")
        wait_for("2 rounds after the scan", lambda: len(rounds()) >= scanned_from + 2, 120)
        during = rounds()[scanned_from:]
        dead = [p for p in tree if not os.path.exists(f"/proc/{p}")]
        if dead:
            fail(f"processes of the run died during the scan: {dead}")
        bad = [(p, what) for (p, what, ok) in verdicts if not ok]
        if bad:
            fail(f"connections fibra's listeners kept open past {CLOSE_BOUND_S} s: {bad}")
        open(stop, "w").close()
        wait_for("PASS", lambda: any(l.startswith("PASS ") for l in lines()) or target.poll() is not None, 120)
        target.wait(60)
        result = [l for l in lines() if l.startswith("PASS ")]
        if target.returncode != 0 or not result:
            fail(f"the target ended with status {target.returncode}:\n" + "\n".join(lines()[-30:]))
        copies = int(result[0].split()[3])
        if copies < 1:
            fail("no object was copied between agents: the object servers were not exercised")
        n_probes = len([v for v in verdicts if v[0] in fibra_ports])
        print(f"scan: {n_probes} probes of fibra's {len(fibra_ports)} listeners, each closed; "
              f"{len(verdicts) - n_probes} of Open MPI's; rounds median {statistics.median(quiet):.3f} s quiet, "
              f"{statistics.median(during):.3f} s during the scan ({statistics.median(during) / statistics.median(quiet):.2f}x)",
              flush=True)
        print(f"PASS: {result[0][5:]}; every result exact, every process alive", flush=True)
    finally:
        if target.poll() is None:
            target.kill()
            target.wait(30)


if __name__ == "__main__":
    main()
