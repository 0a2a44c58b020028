#!/usr/bin/env python3
"""Coupled ranks against a server that goes away: `perseus simulate` (8 pipeline stages of GPT-3 175B
on A100s, 2.84 s per iteration, paced with --time-scale) against `perseus serve`, run undisturbed, with
the server SIGKILLed at round 8 and restarted 0.5 s later, and with the server SIGSTOPped at round 8 for
15 s (longer than the clients' --request-timeout). Prints per run the training wall time against the
undisturbed run's, the job's end (phase, rounds) and how many ranks gave perseus up.

    python3 bench/coupled_faults.py [--binary build/src/perseus] [--iterations 700] [--time-scale 0.005]
"""
import argparse
import json
import os
import sys
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_server import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]



def start_server(binary, port, work, scheduler):
    log = open(work / "serve.err", "a")
    proc = subprocess.Popen([binary, "serve", "--port", str(port), "--dump-dir", str(work / "dump"),
                             "--scheduler", scheduler], stdout=subprocess.DEVNULL, stderr=log)
    for _ in range(500):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return proc
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("the server did not start")


def job_round(url):
    try:
        with urllib.request.urlopen(url + "/jobs", timeout=0.5) as reply:
            jobs = json.load(reply)
        return jobs[0]["round"] if len(jobs) == 1 else -1
    except Exception:
        return -1


def run(args, fault):
    work = Path(tempfile.mkdtemp(prefix="perseus-coupled-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(args.binary, port, work, args.scheduler)
    command = [args.binary, "simulate", str(ROOT / "examples" / "gpt3-175b-a100.csv"), "--stages", "8",
               "--microbatches", "12", "--p2p-power", "83.64", "--round-iterations", "5", "--time-scale",
               str(args.time_scale), "--iterations", str(args.iterations), "--report-every", str(args.iterations),
               "--request-timeout", str(args.request_timeout), "--json", "--server", url]
    simulate = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    at_fault = None
    if fault != "none":
        while (at_fault := job_round(url)) < args.fault_round:
            time.sleep(0.002)
        if fault == "kill":
            server.send_signal(signal.SIGKILL)
            server.wait()
            time.sleep(args.restart_after)
            server = start_server(args.binary, port, work, args.scheduler)
        else:
            server.send_signal(signal.SIGSTOP)
            time.sleep(args.pause)
            server.send_signal(signal.SIGCONT)
    out, _ = simulate.communicate()
    summary = json.loads(out.strip().splitlines()[-1])["summary"]
    server.send_signal(signal.SIGTERM)
    server.wait()
    failed = "[job-failed]" in (work / "serve.err").read_text()
    subprocess.run(["rm", "-rf", str(work)])
    status = summary["server"] or {}
    return {"fault": fault, "training_s": summary["training_seconds"], "round_at_fault": at_fault,
            "phase": status.get("phase"), "rounds": status.get("round"), "disabled_ranks": summary["disabled_ranks"],
            "job_failed_logged": failed}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default=str(ROOT / "build" / "src" / "perseus"))
    parser.add_argument("--iterations", type=int, default=700)
    parser.add_argument("--time-scale", type=float, default=0.005)
    parser.add_argument("--request-timeout", type=float, default=5)
    parser.add_argument("--fault-round", type=int, default=8)
    parser.add_argument("--restart-after", type=float, default=0.5)
    parser.add_argument("--pause", type=float, default=15)
    parser.add_argument("--scheduler", default="AllMaxFrequency")
    args = parser.parse_args()
    base = None
    for fault in ("none", "kill", "stop"):
        r = run(args, fault)
        base = base or r["training_s"]
        within = r["training_s"] <= 1.1 * base + 2
        print(f"{fault:5}  training {r['training_s']:6.2f} s ({r['training_s'] / base:5.3f}x undisturbed, "
              f"{'within' if within else 'NOT within'} 10% + 2 s)  fault at round {r['round_at_fault']}  "
              f"job {r['phase']} after {r['rounds']} rounds  ranks without perseus {r['disabled_ranks']}  "
              f"[job-failed] logged: {r['job_failed_logged']}", flush=True)


if __name__ == "__main__":
    main()
