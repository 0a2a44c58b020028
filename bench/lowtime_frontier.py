#!/usr/bin/env python3
"""The Perseus time-energy frontier planned by lowtime (the Perseus authors' planner library, `pip install
lowtime`), as its example planner does it: the profile's Pareto options per (stage, instruction), an
a*exp(b*q)+c cost model fitted by lowtime (the grid of starting points, keeping the best fit, as the
reference planner), synchronous 1F1B, then PhillipsDessouky until it stops. Writes `quant_time,cost`
per frontier point (cost: the effective energy perseus reports as `effective_cost`).

bench/lowtime_side_by_side.py runs it beside `perseus optimize`.

Usage: lowtime_frontier.py PROFILE.csv --stages S --microbatches M --p2p-power W [--unit-time 0.001] --out FILE.csv"""
import argparse
import csv
import logging
import warnings
from typing import Dict, List, Tuple

import networkx as nx
from lowtime.cost_model import ExponentialModel
from lowtime.graph_utils import add_sink_node, add_source_node
from lowtime.operation import CandidateExecutionOptions, ExecutionOption, OperationSpec
from lowtime.perseus.instruction import Backward, Forward
from lowtime.perseus.schedule import Synchronous1F1B
from lowtime.solver import PhillipsDessouky


def pipeline_dag(stages: int, microbatches: int,
                 specs: Dict[Tuple[int, str], OperationSpec]) -> Tuple[nx.DiGraph, List[List[int]]]:
    """lowtime's DAG of a synchronous 1F1B iteration (specs by (stage, "forward" or "backward")); the node
    ids of each stage in schedule order."""
    dag = nx.DiGraph()
    node, stage_nodes, by_key = 2, [], {}
    for stage in range(stages):
        spec_map = {Forward: specs[(stage, "forward")], Backward: specs[(stage, "backward")]}
        ids = []
        for instruction in Synchronous1F1B(num_stages=stages, num_micro_batches=microbatches, stage_id=stage,
                                           operation_spec_map=spec_map):
            dag.add_node(node, op=instruction)
            by_key[(type(instruction), stage, instruction.micro_batch_id)] = node
            ids.append(node)
            node += 1
        dag.add_edges_from(zip(ids, ids[1:]))
        stage_nodes.append(ids)
    for (kind, stage, microbatch), node in by_key.items():
        after = (kind, stage + 1, microbatch) if kind is Forward else (kind, stage - 1, microbatch)
        if after in by_key:
            dag.add_edge(node, by_key[after])
    add_source_node(dag, 0)
    add_sink_node(dag, 1)
    dag.graph["source_node"], dag.graph["sink_node"] = 0, 1
    return dag, stage_nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--stages", type=int, required=True)
    parser.add_argument("--microbatches", type=int, required=True)
    parser.add_argument("--p2p-power", type=float, required=True)
    parser.add_argument("--unit-time", type=float, default=0.001)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    logging.disable(logging.INFO)
    warnings.simplefilter("ignore")  # scipy on grid starts that do not converge, as the reference sees them

    with open(args.profile) as f:
        rows = [(int(r["stage"]), r["instruction"], int(r["frequency"]), float(r["time"]), float(r["energy"]))
                for r in csv.DictReader(f)]
    specs = {}
    for stage in range(args.stages):
        for name in ("forward", "backward"):
            options = [ExecutionOption(real_time=t, unit_time=args.unit_time, cost=e, knob=f)
                       for s, i, f, t, e in rows if s == stage and i == name]
            candidates = CandidateExecutionOptions(options=options)
            for option in candidates.options:  # effective energy: what blocking on communication would use
                option.cost -= args.p2p_power * option.quant_time * option.unit_time
            specs[(stage, name)] = OperationSpec(options=candidates,
                                                 cost_model=ExponentialModel(candidates, search_strategy="best"))

    dag, _ = pipeline_dag(args.stages, args.microbatches, specs)

    with open(args.out, "w") as out:
        out.write("quant_time,cost\n")
        for result in PhillipsDessouky(dag).run():
            out.write(f"{result.quant_time},{float(result.cost)!r}\n")


if __name__ == "__main__":
    main()
