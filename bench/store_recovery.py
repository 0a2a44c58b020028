#!/usr/bin/env python3
"""How long `perseus serve` takes to start on a job store of N jobs (2 ranks, R rounds each), intact and
with one page overwritten by random bytes (then moved aside and salvaged row by row).

    python3 bench/store_recovery.py build/src/perseus [--jobs 1000] [--rounds 20]

Prints the store's size and, for the intact store and for each damaged page position, the seconds from
start to the server's ready line, how many jobs it resumed, and how many registrations a plain SQLite
reader gets back from the damaged file one rowid at a time (what the recovery must keep)."""
import argparse
import json
import os
import random
import shutil
import sqlite3
import subprocess
import tempfile
import time
import urllib.request



def make_store(perseus, folder, jobs, rounds):
    """A store as `perseus serve` makes it (started once on an empty folder), filled with jobs."""
    start(perseus, folder)
    db = sqlite3.connect(os.path.join(folder, ".perseus.db"))
    for j in range(jobs):
        job_id = f"2026-01-01-00-00-00+torch+model{j:05d}+uniform+dp1+pp2+tp1+mbs4+nmb8+AllMaxFrequency"
        info = {"job_id": job_id, "pp_degree": 2, "dp_degree": 1, "tp_degree": 1, "world_size": 2,
                "framework": "torch", "model_name": f"model{j:05d}", "partition_method": "uniform",
                "microbatch_size": 4, "num_microbatches": 8}
        db.execute("INSERT INTO jobs (job_id, info) VALUES (?, ?)", (job_id, json.dumps(info)))
        for r in range(2):
            rank = {"job_id": job_id, "rank": r, "dp_rank": 0, "pp_rank": r, "tp_rank": 0,
                    "pipe_schedule": ["forward", "backward"] * 8, "power_state_range": [1410, 1200, 1005]}
            db.execute("INSERT INTO ranks (job_id, rank, info) VALUES (?, ?, ?)", (job_id, r, json.dumps(rank)))
        for k in range(rounds):
            db.execute("INSERT INTO rounds (job_id, round, results) VALUES (?, ?, NULL)", (job_id, k))
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def start(perseus, folder):
    """Seconds to the ready line, and the jobs the server resumed."""
    begin = time.monotonic()
    proc = subprocess.Popen([perseus, "serve", "--port", "0", "--dump-dir", folder, "--log-level", "error",
                             "--max-jobs", "1000000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    took = time.monotonic() - begin
    url = line.split("listening on ")[1].split(" ")[0]
    jobs = json.load(urllib.request.urlopen(url + "/jobs"))
    proc.terminate()
    proc.wait()
    return took, len(jobs)


def readable_row_by_row(db_path, jobs):
    """Registrations a plain SQLite reader gets back from a copy of the store, one rowid at a time."""
    copy = db_path + ".oracle"
    shutil.copy(db_path, copy)
    readable = 0
    try:
        db = sqlite3.connect(copy)
        for rowid in range(1, jobs + 1):
            try:
                row = db.execute("SELECT job_id FROM jobs WHERE rowid = ?", (rowid,)).fetchone()
            except sqlite3.DatabaseError:
                row = None
            readable += row is not None
        db.close()
    except sqlite3.DatabaseError:
        pass
    for side in ("", "-wal", "-shm"):
        if os.path.exists(copy + side):
            os.remove(copy + side)
    return readable


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("perseus")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="perseus-store-recovery-")
    make_store(args.perseus, os.path.join(work, "made"), args.jobs, args.rounds)
    pristine = os.path.join(work, "made", ".perseus.db")
    size = os.path.getsize(pristine)
    pages = size // 4096
    print(f"{args.jobs} jobs, {args.rounds} rounds each: {size / 1e6:.1f} MB, {pages} pages")
    with open(pristine, "rb") as f:
        data = f.read()
    registrations = [p for p in range(2, pages) if b'"model_name"' in data[p * 4096:(p + 1) * 4096]]
    random.seed(1)
    for label, page in [("intact", None), ("page 1 (schema)", 0), ("page 2 (jobs table root)", 1),
                        ("a random page", random.randrange(2, pages)), ("another random page", random.randrange(2, pages)),
                        ("a page of registrations", random.choice(registrations))]:
        folder = os.path.join(work, "dump")
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        shutil.copy(pristine, os.path.join(folder, ".perseus.db"))
        if page is not None:
            with open(os.path.join(folder, ".perseus.db"), "r+b") as f:
                f.seek(page * 4096)
                f.write(os.urandom(4096))
        readable = readable_row_by_row(os.path.join(folder, ".perseus.db"), args.jobs)
        took, jobs = start(args.perseus, folder)
        print(f"{label:28s} start {took:6.2f} s, {jobs} jobs resumed ({readable} readable row by row)")
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
