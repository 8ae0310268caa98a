"""The live store's writes of one relayed call (claim: true), replayed on state/leo.db's schema
at a given page size: a park's transaction, then the result's (claim, ending, trim), then the
delivered-note sharing the next park's commit, as store/src/write.rs writes them; WAL,
synchronous=NORMAL, secure_delete=ON, no automatic checkpoint (a PASSIVE one every 64 calls,
as the checkpoint thread does off the commit path).

    bench/pagesize.py PAGE_SIZE CALLS ARG_BYTES [--time]

with --time: the p50 and p90 of the two commits of a call; without: run it under
`valgrind --tool=callgrind` at two CALLS and divide the difference of the totals (see
bench/results.md, 2026-12-05 22:40 UTC). Nothing of the broker runs: SQLite and this schema only.
"""
import os, re, shutil, sqlite3, sys, tempfile, time

page, calls, arg_bytes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
timing = "--time" in sys.argv
src = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "store", "src", "schema.rs")).read()
body = src[src.index("pub const MIGRATIONS"):src.index("];")]
migrations = re.findall(r'"((?:[^"\\]|\\.)*)"', body, re.S)
d = tempfile.mkdtemp()
db = sqlite3.connect(os.path.join(d, "leo.db"), isolation_level=None)
db.execute(f"PRAGMA page_size = {page}")
assert db.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
db.execute("PRAGMA synchronous = NORMAL")
db.execute("PRAGMA secure_delete = ON")
db.execute("PRAGMA wal_autocheckpoint = 0")
for m in migrations:
    db.executescript(m)
assert db.execute("PRAGMA page_size").fetchone()[0] == page
args = '{"text":"' + "x" * arg_bytes + '"}'
outcome = '{"content":[{"type":"text","text":"' + "y" * arg_bytes + '"}]}'
lat = []
pending = None
for n in range(calls):
    rid = f"req_{n:026d}"
    t0 = time.perf_counter()
    db.execute("BEGIN")
    if pending:
        db.execute("UPDATE ended SET outcome = NULL WHERE id = ?1", (pending,))
    db.execute("""INSERT OR REPLACE INTO live (id, agent, session, local_id, grp, tool, arguments,
        timeout_s, deadline_ms, created_at, claimed_by, approval)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)""",
        (rid, "bench-agent", "s_0123456789abcdef", n, "bench", "echo_small", args, None, None,
         "2026-12-05T22:00:00.000Z", None, None))
    db.execute("COMMIT")
    t1 = time.perf_counter()
    db.execute("BEGIN")
    db.execute("UPDATE live SET claimed_by = ?2 WHERE id = ?1", (rid, "c_0123456789abcdef"))
    db.execute("DELETE FROM live WHERE id = ?1", (rid,))
    db.execute("""INSERT OR REPLACE INTO ended (id, how, agent, session, local_id, outcome)
        VALUES (?1, ?2, ?3, ?4, ?5, ?6)""", (rid, "result", "bench-agent", "s_0123456789abcdef", n, outcome))
    db.execute("DELETE FROM ended WHERE n <= (SELECT MAX(n) FROM ended) - ?1", (4096,))
    db.execute("COMMIT")
    t2 = time.perf_counter()
    pending = rid
    lat.append((t1 - t0) + (t2 - t1))
    if n % 64 == 63:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
if timing:
    lat.sort()
    print(f"page {page} arg {arg_bytes}: p50 {lat[len(lat)//2]*1e6:.1f} us, p90 {lat[len(lat)*9//10]*1e6:.1f} us per call (two commits)")
db.close()
shutil.rmtree(d)
