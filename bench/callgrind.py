#!/usr/bin/env python3
"""Instructions per call by phase, from two callgrind runs of bench/callgrind.sh.

    callgrind.py RUN_SHORT RUN_LONG CALLS LABEL

Each RUN holds callgrind.out files `leo.PID` (the broker) and `leo-mcp.PID` (every sidecar the
run started). For each binary the files are summed, then (long - short) / CALLS is the cost of
one call. A phase is the sum of the inclusive counts of the functions it maps to (PHASES,
matched as regular expressions on callgrind_annotate's demangled names, hash suffixes
dropped); the functions of one phase never call one another, so nothing is counted twice
within a phase. Phases may overlap only where said.
"""

import collections
import glob
import os
import re
import subprocess
import sys

# (phase, binary, functions counted, functions subtracted): a phase is the inclusive count of
# the first list minus that of the second (a phase nested in another is subtracted from it).
# Patterns are regular expressions on the whole demangled name.
R = r"\{\{closure\}\}"
PHASES = [
    # The call frame parsed, before the core sees it (Session::on_frame without Broker::call).
    ("parse", "leo",
     [r"leo_broker::ipc::session::Session::on_frame"],
     [r"leo_broker::core::calls::<impl leo_broker::core::Broker>::call"]),
    # Every policy check, the request built and parked, the journal handed to the store.
    ("park", "leo",
     [r"leo_broker::core::calls::<impl leo_broker::core::Broker>::call"],
     [r"leo_broker::events::EventBus::publish"]),
    # The event on the bus, then written to the app's SSE stream.
    ("publish", "leo",
     [r"leo_broker::events::EventBus::publish", r"leo_broker::http::events::forward::" + R,
      r"leo_broker::http::events::sse"],
     []),
    # The store's writer thread: the batch, the transaction, SQLite, the WAL writes (not the
    # kernel). The one writer's loop is async (`leo_store::writer::Writer<B>`, B the backend)
    # and its `batch` is inlined into its `run`, so the phase is that loop's future (its
    # waits for jobs included; the runtime's own park is not).
    ("store (writer thread: its loop, each batch's transaction)", "leo",
     [r"leo_store::writer::Writer<.*>::run::" + R],
     []),
    # The WAL moved into the files by the checkpoint threads (`sqlite::writer::Checkpointer`,
    # the store's and the history's, each on its own connection, off the commit path). They
    # run 100 ms after commits came, so how many calls one checkpoint covers depends on how
    # long a call takes: under valgrind (a call takes milliseconds) it is a few, at full speed
    # a few hundred, and this row is then much smaller than here.
    ("checkpoints (checkpoint threads)", "leo", [r"sqlite3Checkpoint"], []),
    # The claim and result routes: their bodies, the core, the wait for the commit (the HTTP
    # parse is not in it). A release build inlines each route's future into axum's handler
    # for five extractors, which both routes share, so this row is both routes together (with
    # `claim: true` only the result route runs).
    ("claim and result (routes)", "leo",
     [r"<F as axum::handler::Handler<\(M,T1,T2,T3,T4,T5\),S>>::call::" + R], []),
    # The result frame encoded and written to run/sidecar.sock (hold/release are inlined in
    # the session's loop; the frame's bytes are in result_line and the socket's flush).
    ("frame to the sidecar", "leo",
     [r"leo_broker::ipc::session::result_line", r"leo_broker::ipc::session::flush::" + R],
     []),
    # hyper: the app's requests read and their heads parsed, the answers' heads encoded and
    # flushed (the routes' own work is in claim and result above).
    ("HTTP/1.1 of the app's requests (hyper)", "leo",
     [r"<hyper::proto::h1::role::Server as hyper::proto::h1::Http1Transaction>::(parse|encode)",
      r"hyper::proto::h1::io::Buffered<.*>::(poll_read_from_io|poll_flush)"],
     []),
    # The history of ended calls (state/history.db), its own writer thread.
    ("history (writer thread)", "leo",
     [r"<leo_broker::history::Writer as leo_store::sqlite::writer::Batches>::batch"], []),
    # leo-mcp: the result frame read and decoded into rmcp's blocks.
    ("sidecar: frame from the broker", "leo-mcp",
     [r"leo_mcp::frames::decode", r"leo_mcp::frames::parse_broker_frame"], []),
    # leo-mcp: the call (the call frame sent, the wait for its result).
    ("sidecar: the call", "leo-mcp", [r"leo_mcp::call::run::" + R], []),
    # leo-mcp: the harness's JSON-RPC read from stdin and the answer written to stdout.
    ("sidecar to the harness (stdio)", "leo-mcp",
     [r"<rmcp::transport::async_rw::AsyncRwTransport<.*> as rmcp::transport::Transport<.*>>::(send|receive)::" + R],
     []),
]

# (what, binary, function pattern): how many times per call the function is called, from the
# call counts callgrind records (its `calls=` lines), e.g. how many transactions a call costs.
COUNTS = [
    ("store commits (one transaction each)", "leo", r"leo_store::write::commit"),
    ("SQLite statements stepped (BEGIN and COMMIT included)", "leo", r"sqlite3_step"),
    ("history batches (one transaction each)", "leo",
     r"<leo_broker::history::Writer as leo_store::sqlite::writer::Batches>::batch"),
    ("write, writev and pwrite calls (all threads)", "leo", r"write|writev|pwrite|pwrite64"),
    ("epoll_wait calls (the runtime going to sleep)", "leo", r"epoll_wait"),
    ("syscall() calls (futex waits and wakes: thread handoffs)", "leo", r"syscall"),
    ("leo-mcp: epoll_wait calls", "leo-mcp", r"epoll_wait"),
]

LINE = re.compile(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(?:\S*?:)?(.*?)(?:\s+\[.*\])?\s*$")
HASH = re.compile(r"::h[0-9a-f]{16}")


def annotate(path):
    """Inclusive instructions by function name in one callgrind.out file, and its total."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        check=True, capture_output=True, text=True,
    ).stdout
    total = 0
    by = collections.Counter()
    for line in text.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        m = LINE.match(line)
        if m:
            by[HASH.sub("", m.group(2))] += int(m.group(1).replace(",", ""))
    return total, by


def calls_to(path, pattern):
    """How many calls the functions matching `pattern` received, summed over one file."""
    regex = re.compile(pattern)
    names, total, target = {}, 0, False
    with open(path) as f:
        for line in f:
            if line.startswith("cfn="):
                m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m:
                    if m.group(2):
                        names[m.group(1)] = HASH.sub("", m.group(2))
                    target = bool(regex.fullmatch(names.get(m.group(1), "")))
                else:
                    target = bool(regex.fullmatch(HASH.sub("", line[4:].strip())))
            elif line.startswith("fn="):
                m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
                if m and m.group(2):
                    names[m.group(1)] = HASH.sub("", m.group(2))
            elif line.startswith("calls=") and target:
                total += int(line[6:].split()[0])
                target = False
    return total


def count(run, binary, pattern):
    return sum(calls_to(p, pattern) for p in glob.glob(os.path.join(run, binary + ".*"))
               if os.path.getsize(p) > 0)


def load(run, binary):
    total, by = 0, collections.Counter()
    for path in glob.glob(os.path.join(run, binary + ".*")):
        if os.path.getsize(path) == 0:
            continue
        t, b = annotate(path)
        total += t
        by.update(b)
    return total, by


def matched(by, patterns):
    regexes = [re.compile(p) for p in patterns]
    return sum(n for name, n in by.items() if any(r.fullmatch(name) for r in regexes))


def phase(by, plus, minus):
    return matched(by, plus) - matched(by, minus)


def main():
    short, long_, calls, label = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    data = {b: (load(short, b), load(long_, b)) for b in ("leo", "leo-mcp")}
    print(f"\n{label}: instructions per call ({calls} calls: {long_} minus {short})\n")
    print("| phase | binary | functions (inclusive) | instructions per call |")
    print("|---|---|---|---|")
    for name, binary, plus, minus in PHASES:
        (_, a), (_, b) = data[binary]
        per = (phase(b, plus, minus) - phase(a, plus, minus)) / calls
        what = " + ".join(f"`{p}`" for p in plus) + "".join(f" − `{p}`" for p in minus)
        print(f"| {name} | {binary} | {what} | {per:,.0f} |")
    for binary in ("leo", "leo-mcp"):
        (ta, _), (tb, _) = data[binary]
        print(f"| **{binary}: everything** | {binary} | program totals | {(tb - ta) / calls:,.0f} |")
    print("\n| per call | binary | function called | times per call |")
    print("|---|---|---|---|")
    for what, binary, pattern in COUNTS:
        per = (count(long_, binary, pattern) - count(short, binary, pattern)) / calls
        print(f"| {what} | {binary} | `{pattern}` | {per:.2f} |")
    if os.environ.get("CG_TOP"):
        for binary in ("leo", "leo-mcp"):
            (_, a), (_, b) = data[binary]
            diff = collections.Counter({k: (b[k] - a.get(k, 0)) / calls for k in b})
            print(f"\n{binary}: top inclusive per call")
            for name, n in diff.most_common(int(os.environ["CG_TOP"])):
                print(f"{n:>12,.0f}  {name[:160]}")


if __name__ == "__main__":
    main()
