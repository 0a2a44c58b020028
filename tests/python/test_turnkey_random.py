"""bench/turnkey_random.py, the random scenarios the turnkey loop is judged on (docs/benchmarks.md): every
class draws scenarios of its kind (without running them: that is the benchmark's), and the per-class summary
counts what passed and names what failed."""
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fakegpu import BINARY

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import turnkey_random  # noqa: E402
import turnkey_truth  # noqa: E402
import whatif_saving  # noqa: E402


@pytest.fixture()
def drawn(tmp_path):
    if not BINARY:
        pytest.skip("no perseus binary")

    class Args:
        shared = os.environ.get("PERSEUS_SHARED", str(ROOT.parent / "shared"))

    turnkey_random.ARGS = Args
    if not Path(Args.shared, "data/sosp24/stage_profile").is_dir():
        pytest.skip("the measured profiles are not here")

    def draw(k, cls, schedule=None):
        return turnkey_random.scenario(k, BINARY, str(tmp_path), cls, schedule)
    return draw


def judged(scenario, as_ran=False):
    """The scenario run against its AllMaxFrequency twin: (the judge's outcome, the loop's decisions). The ideal is
    the undisturbed cluster's, which the instances below were found and written against, unless `as_ran` (the
    benchmark's: on the GPUs as they ran over the judged window)."""
    reports, status, decisions, gpu_speeds = turnkey_truth.run_simulation(BINARY, scenario, "Perseus")
    twin, _, _, _ = turnkey_truth.run_simulation(BINARY, scenario, "AllMaxFrequency")
    return turnkey_truth.judge(BINARY, scenario, reports, twin, status, decisions, gpu_speeds, as_ran), decisions


def judged_events(scenario):
    """The scenario judged against its twin: (the outcome, the events of the loop's decisions in order)."""
    outcome, decisions = judged(scenario)
    return outcome, [d["event"] for d in decisions]


def as_found(scenario):
    """The scenario with the baseline's precision it was found with (0.15%: fewer warm-up rounds than now) and no
    clocks measured once more before deploying, so that its disturbances fall in the phases they fell in then."""
    return dataclasses.replace(scenario, scheduler_args={**without_confirming(scenario).scheduler_args,
                                                         "baseline_precision": 0.0015})


def without_confirming(scenario):
    """The scenario with profiling as it was found with: no pass that measures the plan's clocks once more (those
    rounds would move its disturbances to other phases)."""
    return dataclasses.replace(scenario, scheduler_args={**scenario.scheduler_args, "confirm_passes": 0})


def judged_latencies(scenario):
    """The scenario judged against its twin: (the outcome, the clock latencies the loop measured, in ms)."""
    outcome, decisions = judged(scenario)
    return outcome, [float(re.search(r"takes effect ([0-9.]+) ms \(\+-([0-9.]+)\)", d["detail"]).group(1))
                     for d in decisions if d["event"] == "clock latency"]


def flag(scenario, name):
    args = scenario.simulate_args
    return [args[i + 1] for i, a in enumerate(args) if a == name]


def with_seed(scenario, seed):
    """The scenario with simulate's noise drawn from another seed."""
    args = list(scenario.simulate_args)
    args[args.index("--seed") + 1] = str(seed)
    return dataclasses.replace(scenario, simulate_args=args)


@pytest.mark.parametrize("cls", turnkey_random.CLASSES + sorted(turnkey_random.PINNED))
def test_every_class_draws_scenarios_of_its_kind(drawn, cls):
    for k in (1, 2, 3):
        s = drawn(k, cls)
        assert s.group == cls and Path(s.profile).is_file()
        assert s.pipelines == 2 and s.iterations == 1000
        assert 0 <= float(flag(s, "--noise")[0]) <= 0.02
        stragglers = flag(s, "--straggler")
        if cls in ("transient", "transient-early", "straggler", "permanent", "from-start", "spread+straggler",
                   "straggler-early"):
            assert len(stragglers) == 1 and s.disturbances, s.label
        if cls == "two-stragglers":  # the second on the other pipeline, while the first is on
            assert len(stragglers) == 2 and {x.split(":")[0] for x in stragglers} == {"0", "1"}, s.label
            first, second = (int(x.split("@")[1].split("-")[0]) for x in stragglers)
            assert "-" not in stragglers[0].split("@")[1] and first < second, s.label
        if cls in ("mild-straggler", "spread+mild-straggler"):  # below the straggler threshold, above half of it
            assert len(stragglers) == 1 and s.disturbances, s.label
            factor = float(stragglers[0].split(":")[1].split("@")[0])
            assert stragglers[0].split(":")[0] in ("0", "1") and 1.025 <= factor <= 1.049, s.label
        if cls == "straggler-early":  # one pipeline's, from within the warm-up or profiling
            assert stragglers[0].split(":")[0] in ("0", "1") and 2 <= s.disturbances[0][0] <= 300, s.label
        if cls == "transient-early":
            assert stragglers[0].startswith("all:") and s.disturbances[0][0] <= 120
        if cls == "drift+from-start":  # steps of the whole cluster, and one pipeline's from the first iteration
            assert stragglers[0].startswith("all:") and stragglers[-1].split("@")[1].split("-")[0] == "1", s.label
            assert stragglers[-1].split(":")[0] in ("0", "1") and s.disturbances[0][0] == 1, s.label
        if cls in ("spread", "spread+straggler", "spread+mild-straggler"):
            assert flag(s, "--gpu-speed-spread")
        if cls == "two-stage":
            assert s.stages == 2
        if cls.startswith("latency-"):
            assert flag(s, "--clock-latency") == [cls[len("latency-"):-2]]
            assert (s.min_share is None) == (cls == "latency-10ms")
        if cls in ("quiet", "two-stage"):
            assert not stragglers and not s.disturbances


def test_a_schedule_asked_for_is_every_scenarios(drawn):
    for schedule in ("interleaved", "dualpipev"):
        s = drawn(7, "quiet", schedule)
        assert s.schedule == schedule and "--split-backward" not in s.label


def test_the_summary_counts_each_class_and_names_its_failures(tmp_path, capsys):
    def record(k, group, problems, share=0.9, slowdown=0.001):
        label = f"#{k} 1f1b S=4 M=8 synthetic, noise 0.01, quiet"
        return {"scenario": {"group": group, "label": label, "min_share": 0.8, "schedule": "1f1b"},
                "share": share, "ideal": 0.1, "true_slowdown": slowdown, "history_saving_error": 0.001,
                "all_max_excess": 1, "problems": problems}
    path = tmp_path / "runs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [
        record(1, "quiet", []), record(2, "quiet", ["slowdown 0.70%"], 0.85, 0.007), record(3, "drift", [], 0.95)]))
    assert turnkey_random.summary(str(path)) == 0
    rows = {line.split(" | ")[0].strip("| "): line for line in capsys.readouterr().out.splitlines()[2:]}
    assert "| 1 of 2 | 85% / 90% | 0.70% |" in rows["quiet"] and "#2: slowdown 0.70%" in rows["quiet"]
    assert "| 1 of 1 | 95% / 95% |" in rows["drift"] and rows["drift"].endswith("| - |")


def test_scheduler_args_reach_every_scenarios_server_and_a_refusal_is_reported_with_the_servers_reason(
        drawn, tmp_path):
    out = tmp_path / "runs.jsonl"
    run = subprocess.run([sys.executable, str(ROOT / "bench/turnkey_random.py"), "--perseus", BINARY,
                          "--shared", turnkey_random.ARGS.shared, "--first", "601", "--count", "1",
                          "--only-class", "quiet", "--scheduler-args", '{"fill_gap": "wide"}', "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "0 of 1 passed" in run.stdout
    record = json.loads(out.read_text())
    assert record["scenario"]["scheduler_args"] == {"fill_gap": "wide"}
    assert "'fill_gap' must be a number" in record["error"], record["error"]


def test_a_straggler_during_profiling_that_recovers_costs_neither_the_truth_nor_the_saving(drawn):
    """Instance 1352 (interleaved, 3 stages, noise 0.0096): pipeline 1 turns 1.11x slow within the baseline's
    last round and stays so until iteration 204, then the cluster drifts. The baseline leaves that round out,
    and so does the profile (its top clock measured there read 1.4% slow: every plan near the frontier's fast
    end then ran 0.7-1.5% slower than predicted); after the recovery both pipelines run a plan with no
    instruction at the top clock, and the recovered one is calibrated at the others' conditions, not its own
    as a straggler (the reference stayed 9% slow: 1.5% slower than all-max, reported 7.9% faster)."""
    scenario = as_found(drawn(1352, None))
    assert "1:1.109@40-204" in scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "straggler recovered" for d in decisions), decisions
    assert outcome.passes() == [], outcome


def test_a_straggler_whose_own_plan_runs_slow_steps_that_plan_up(drawn):
    """Instance 1390 (2 stages, noise 0.0172): pipeline 1 is a 1.24x straggler from iteration 662, running
    the target plan, which measures about 1% slower than all-max at its pace. Pacing the other pipeline
    earlier cannot help once it ends before the straggler: the straggler's own plan steps up, at the first or
    second step. (Before, the other pipeline was paced earlier nine times while the job ran 0.69% slower than
    all-max over the straggler's rounds.)"""
    scenario = drawn(1390, None)
    assert "1:1.242@662-943" in scenario.simulate_args
    reports, status, decisions, _ = turnkey_truth.run_simulation(BINARY, scenario, "Perseus")
    events = [d["event"] for d in decisions]
    detected = events.index("straggler detected")
    during = [d["detail"] for d in decisions[detected:] if d["event"] == "stepped up"][:4]
    assert any(d.startswith("the followed straggler's own plan") for d in during[:2]), during


def test_a_clock_latency_next_to_a_pipeline_slow_since_the_start_leaves_the_report_true(drawn):
    """Instance 1578 (DualPipeV, 3 stages, Bloom on A100, noise 0.0065, 10 ms clock latency): pipeline 0 runs
    1.18x slow from the first iteration to 391, part of the baseline. The A100's fastest clock is one step
    below the top, so the plans run the top clock only right after changes of clock, and before the latency
    was known those instructions measured the conditions 1.3% slow; once the latency is known they are
    forgotten, slow pipeline or not (kept, they had the slowdown reported 1.1 points below the truth, as if
    training ran faster than all-max)."""
    scenario = drawn(1578, None)
    assert "0:1.181@1-391" in scenario.simulate_args and "10" in flag(scenario, "--clock-latency")
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "clock latency" in events, events
    assert outcome.history_slowdown_error <= 0.003 and not outcome.false_negative_slowdown, outcome
    assert outcome.passes() == [], outcome


def test_a_pipeline_slow_since_the_start_that_recovers_from_a_straggle_on_top_keeps_its_own_pace(drawn):
    """Instance 2846 (zb-h1, 5 stages, Bloom on A100): pipeline 1 runs 1.053x slow from the first iteration to
    334, part of the baseline, and 1.058x more from 243 on, a straggler followed until the first slowdown
    ends; it then runs 0.5% slower than in the baseline, as the all-max round after its recovery measures.
    Its plan runs nothing at the top clock: it is calibrated from that round, not from the other pipeline's
    conditions (which had the slowdown reported 0.4 points above the truth and the plans stepped up)."""
    scenario = drawn(2846, None)
    assert {"1:1.053@1-334", "1:1.058@243"} <= set(flag(scenario, "--straggler")), scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "straggler detected" in events, events
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_a_straggler_starting_on_the_plans_is_no_clock_latency(drawn):
    """Instance 3190 of `straggler` (1F1B, 7 stages, Bloom on A100, noise 0.0142, no clock latency): pipeline 0
    runs 1.20x slow from iteration 259 to 387. In the rounds before it is detected, every top-clock instruction
    of that pipeline runs slow, those right after a change of clock too: measured against the baseline's
    top-clock times as they were, they made a latency of 1-4 ms out of the straggler, and the plans were chosen
    again for it (the reported saving then 0.9 points off the truth). Against the baseline's times at how slow
    the pipeline's top-clock instructions ran that round, there is none."""
    scenario = drawn(3190, "straggler")
    assert "0:1.195@259-387" in flag(scenario, "--straggler") and not flag(scenario, "--clock-latency")
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events and "clock latency" not in events, events
    assert outcome.passes() == [], outcome


def test_a_slow_spell_from_the_round_both_plans_change_leaves_the_reference_true(drawn):
    """Instance 3278 (GPipe, 3 stages, GPT-3 on A100, noise 0.011): pipeline 1 straggles 1.16x from iteration 216
    on, followed; the cluster runs 1.09x slower over iterations 429-596. The loop retries both pipelines' plans
    in the round the spell begins: the other pipeline's paced plan runs nothing at the top clock, and the
    straggler's new plan too few instructions there. Calibrated by the conditions from before the spell, the
    paced plan took the spell for its own error, and with no all-max probe while a straggler is followed the
    reference stayed low to the end (the saving reported 1.05-1.28 points below the truth); the straggler's change
    that round, as its plan's ratio says, stands for the cluster's."""
    scenario = drawn(3278, None)
    assert {"all:1.089@429-596", "1:1.157@216"} <= set(flag(scenario, "--straggler")), scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events and "saving plan again" in events, events
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_straggler_detected_while_profiling_is_measured_over_its_rounds_on_the_plans(drawn):
    """Instance 3181 of `straggler` (1F1B, 3 stages, Bloom on A40, noise 0.0153): pipeline 0 runs 1.106x slow from
    iteration 94 to 306, detected while profiling at 1.113x from one noisy round. Its plan runs nothing at the top
    clock: its conditions are the other pipeline's times its slowdown. At the detected one the reference ran 0.6%
    long, the reported slowdown 0.3-0.55 points below the truth and the pace (0.85% slower than all-max) was never
    judged too slow; its rounds on the plans since, each its time over its plan's prediction against the other's,
    tell the slowdown within the plans' errors."""
    scenario = as_found(drawn(3181, "straggler"))
    assert "0:1.106@94-306" in flag(scenario, "--straggler"), scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events and "faster pace for the straggler" in events, events
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_a_pipeline_slow_from_the_start_under_noise_keeps_its_saving_once_it_recovers(drawn):
    """Instance 3408 (GPipe, 5 stages, GPT-3 on A100, noise 0.0181): pipeline 0 runs 1.14x slow from the first
    iteration to 297, part of the baseline, and recovers. The other pipeline, measured 0.5% faster, was paced to it
    with the pace setter's own draws of the noise: at its pace in every draw, where in truth the later of two
    independent draws ends the iteration. Its plans ran 0.55% slower than all-max and were stepped up and tried
    again to the end (62% of the ideal); drawn with noise of its own, it keeps 82%."""
    scenario = as_found(drawn(3408, None))
    assert "0:1.144@1-297" in flag(scenario, "--straggler"), scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "slow pipeline recovered" in events, events
    assert outcome.passes() == [], outcome


def test_a_clock_latency_near_the_threshold_is_not_dropped_and_taken_again_every_few_rounds(drawn):
    """Instance 3604 (ZBV, 2 stages, Bloom on A100, noise 0.0199, a 1 ms clock latency, pipeline 1 straggling 1.28x
    from iteration 607): the latency's fit sits near 3 standard errors from none, and was taken and dropped every
    few rounds (1.4 ms, 0, 1.5 ms, 0, ...), the plans chosen again each time; around the straggler's start those
    choices left rounds without measured conditions, and the reported saving and slowdown were 0.6 and 1.0 points
    off for 60 rounds. Dropped only below 2 standard errors, it is measured once and kept."""
    scenario = drawn(3604, None)
    assert "1" in flag(scenario, "--clock-latency") and "1:1.277@607" in flag(scenario, "--straggler")
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events, events
    assert outcome.passes() == [], outcome


def test_a_straggler_recovering_beside_another_runs_at_its_own_pace(drawn):
    """Instance 3896 (interleaved, 2 stages, Bloom on A40, noise 0.0179): pipeline 1 straggles 1.12x from iteration
    197 for good, pipeline 0 1.26x from 566 to 678. Once detection, comparing the two, followed pipeline 0 and let
    pipeline 1 go, pipeline 0 recovered onto the target plan, which runs nothing at the top clock, and was taken to
    run at the other pipeline's conditions (its 1.12x, followed by no one then): the reported saving ran 3.7
    points high to the end. Pipeline 1's own time did not fall: it stays followed, and pipeline 0 slows and
    recovers beside it at a pace of its own."""
    scenario = drawn(3896, None)
    assert flag(scenario, "--straggler") == ["1:1.124@197", "0:1.258@566-678"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    during = [(d["event"], d["detail"].split(",")[0].split(" runs")[0]) for d in decisions if d["round"] >= 566 // 5]
    assert ("pipeline slowed", "pipeline 0") in during and ("slow pipeline recovered", "pipeline 0") in during, during
    assert not any(event == "straggler recovered" for event, _ in during), during
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_plan_condemned_by_a_hair_steps_to_the_next_plan_not_to_all_max(drawn):
    """Instance 3863 (1F1B, 6 stages, synthetic, noise 0.018, a 2 ms clock latency): the plan ran 0.38% slower than
    all-max, condemned after 40 rounds with its interval's low end at the tolerance. Near the top of the frontier
    the next plans are a few hundredths of a point faster and save nearly as much; required to be predicted 0.15%
    faster than the plan that missed, only all-max was, and the last 100 iterations kept 19% of the ideal. The
    more cautious plan needs to be faster only by what the interval's low end is above the tolerance. With the top
    clock measured by every round of the baseline the plan runs 0.3% slower, within the default tolerance: asked
    for a quarter of a point, it is condemned with its interval's low end at 0.25%."""
    found = as_found(drawn(3863, None))
    scenario = dataclasses.replace(found, scheduler_args={**found.scheduler_args, "tolerance": 0.0025})
    assert flag(scenario, "--clock-latency") == ["2"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    stepped = [d["detail"] for d in decisions if d["event"] == "stepped up" and d["detail"].startswith("measured")]
    assert stepped and all(not d.split(" to ")[-1].startswith("all-max") for d in stepped), stepped
    assert outcome.passes() == [], outcome


def test_a_followed_straggler_given_another_plan_is_calibrated_on_it(drawn):
    """Instance 3831 (1F1B, 2 stages, 3 microbatches, GPT-3 on A100, noise 0.02): pipeline 0 straggles 1.20x from
    iteration 665 for good and runs all-max at first; a retry gives it a saving plan of its own with two
    instructions at the top clock, both right after a change, so its conditions come from its time over the
    plan's prediction. Calibrated as on all-max, the new plan's error under noise (it runs 0.4% slower than
    predicted) read as a straggler 1.207x slow: the reference stretched with it, the plan 0.7% slower than
    all-max was never judged too slow, and the reported slowdown ran 0.4 points below the truth. Settled at its
    slowdown, its conditions do not change with its plan: it is calibrated anew on it."""
    scenario = as_found(drawn(3831, None))
    assert flag(scenario, "--straggler") == ["0:1.202@665"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events, events
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_a_pipeline_slow_since_the_start_recovering_in_a_plans_first_round_is_not_counted_twice(drawn):
    """Instance 3983 (1F1B, 2 stages, Bloom on A100, noise 0.0162): pipeline 1 runs 1.17x slow from the first
    iteration, part of the baseline, and recovers at iteration 730, the round a retry's plans start. Its
    conditions, from its time over its plan's prediction, already read the recovery (0.848x its baseline pace)
    when the new plan was calibrated; taking the recovery in rebased that calibration as if it had come after,
    and took it twice: the pipeline read 0.72x, and the reported saving ran 4.7 points low to the end."""
    scenario = drawn(3983, None)
    assert flag(scenario, "--straggler") == ["1:1.174@1-730"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "slow pipeline recovered" in events, events
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_straggler_first_followed_does_not_move_the_clusters_conditions(drawn):
    """Instance 4209 (zb-h1, 2 stages, 2 microbatches, noise 0.0182): pipeline 0 runs 1.24x slow from the first
    iteration (part of the baseline), pipeline 1 straggles 1.25x from iteration 172 to 237. Its slowdown began in
    a plan's first round and hid in that plan's calibration; in the round it was first followed, its conditions
    last known did not hold it, and its change against them was read as the cluster's: pipeline 0, calibrated
    anew by it, stood at 1.25x, and so did pipeline 1 once it recovered (taken to run at the others'), until
    pipeline 0's recovery 28 rounds later (the reported saving and slowdown 4.3 and 2.6 points off)."""
    scenario = as_found(drawn(4209, None))
    assert flag(scenario, "--straggler") == ["1:1.249@172-237", "0:1.237@1-376"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events and "slow pipeline recovered" in events, events
    assert outcome.history_saving_error <= 0.005 and outcome.history_slowdown_error <= 0.003, outcome


def test_a_flat_energy_curve_under_noise_is_profiled_past_its_chance_rises(drawn):
    """Instance 4421 (DualPipeV, 2 stages, Bloom on A40, noise 0.018). The forwards' energy is flat near the top
    clock (within 1% from 1740 to 1440 MHz, then falling, 18% lower by 1155 MHz); under noise one coarse clock
    read 0.8% above the one before it, a rise after a 1% fall, which stopped three of the four forwards' scans at
    1440 MHz: planned on that profile, the loop kept 77% of the ideal. Only a rise beyond twice the error of the
    difference counts now."""
    scenario = drawn(4421, None)
    assert flag(scenario, "--straggler") == ["all:1.124@402-427"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert outcome.share >= 0.8 and outcome.true_slowdown <= 0.005, outcome


def test_a_probe_recalibrates_a_plan_that_runs_nothing_at_the_top_clock(drawn):
    """Instance 4589 (1F1B, 3 stages, 5 microbatches, noise 0.0176; the cluster 1% slower every 182 iterations from
    iteration 134). Pipeline 0's plan runs nothing at the top clock: its conditions are its time over the plan's
    prediction times a calibration from one round, carried from plan to plan, 1.5% off by iteration 620; the
    all-max probe then measured them at the top clock and the next round read them 1% off again. A step-up's
    first round then read the cluster's pace 1.8% changed (1% off the truth), the step-up was retried at once,
    and the retried plan, calibrated on that round, stayed 1% off: the reported saving 0.9 points high to the
    end. A plan's round after a probe now calibrates it anew on the probe's conditions. (With the top clock
    measured by every round of the baseline, the plan is no longer condemned: no step-up; the steps of drift and
    the probes remain.)"""
    scenario = without_confirming(drawn(4589, None))
    assert flag(scenario, "--straggler") == ["all:1.01@134", "all:1.01@316", "all:1.01@498", "all:1.01@680"]
    outcome, decisions = judged(scenario)
    assert outcome.history_saving_error <= 0.005 and outcome.history_slowdown_error <= 0.003, outcome
    assert outcome.passes() == [], outcome


def test_a_retry_halfway_never_goes_past_the_plan_stepped_up_to(drawn):
    """Instance 4798 (interleaved, 2 stages, 6 microbatches, noise 0.0193; pipeline 0 a 1.236x straggler from iteration
    146 to 373). The saving plan measured 0.88% slow over 4 rounds; the step-up, by what the interval said, went to
    a plan 0.05% faster; 40 rounds on, the retry halfway asked for half the miss measured then, 0.44%: only all-max
    met it, and the retries ran all-max for 11-12 rounds, twice (73% of the ideal). Halfway now lies between the plan
    stepped up to and the saving plan. (With the top clock measured by every round of the baseline the saving plan
    runs within the tolerance: no step-up, no retry; TurnkeyClasses' tests retry halfway.)"""
    scenario = drawn(4798, None)
    assert flag(scenario, "--straggler") == ["0:1.236@146-373"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    retries = [d["detail"] for d in decisions if d["event"] == "retrying"]
    assert not any("back to all-max" in r for r in retries), retries
    assert outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_the_clocks_a_plan_runs_are_measured_once_more_under_noise(drawn):
    """Instance 5158 (DualPipeV, 2 stages, 5 microbatches, GPT-3 on A40, noise 0.0154, nothing else). Profiling
    measured each clock in one round, to 0.2-0.3%; the planner picked the clocks that measured luckiest, and every
    plan near all-max's time ran 0.5-0.6% slower than all-max (six step-ups, three retries: 0.56% slow over the
    run's second half). The clocks below the top that the plan runs are now measured once more and the loop plans
    again (twice): 0.31%."""
    scenario = drawn(5158, None)
    assert flag(scenario, "--straggler") == [] and flag(scenario, "--noise") == ["0.0154"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "refining" in events
    assert outcome.true_slowdown <= 0.004 and outcome.share >= 0.8, outcome


def test_a_followed_straggler_that_recovers_within_a_round_is_measured_at_its_new_pace_at_once(drawn):
    """Instance 5418 (1F1B, 6 stages, Bloom on A100, noise 0.0083): pipeline 1 is a 1.27x straggler from
    iteration 101 to 153, detected while profiling and followed by the other pipeline's plan; its own plan runs
    nothing at the top clock, so its conditions are the others' times its slowdown as followed. It recovers
    within a round and is cleared a round later: in those two rounds the other pipeline still ran at its pace
    (9% and 27% slower than all-max), and they were measured against all-max at that pace, the reported slowdown
    0.6 points under the truth for the 60 rounds that counted them. A round whose ratio over the others' moved
    clearly from the followed slowdown is measured at that ratio."""
    scenario = drawn(5418, None)
    assert "1:1.267@101-153" in flag(scenario, "--straggler"), scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "straggler recovered" for d in decisions), decisions
    assert outcome.history_slowdown_error <= 0.003 and outcome.history_saving_error <= 0.005, outcome


def test_a_clock_latency_first_measured_as_a_straggler_starts_leaves_that_round_measured(drawn):
    """Instance 4864 (1F1B, 5 stages, noise 0.015, clock latency 10 ms): pipeline 1 turns 1.28x slow for good at
    iteration 171, in the round the latency is first measured. That round's conditions were left unmeasured (the
    latency had made them look slower), so it counted against all-max as it was before the straggler: 28% slower,
    the reported slowdown 0.37 points over the truth for the 60 rounds that counted it. The round's conditions
    are measured with the latency now known taken out."""
    scenario = drawn(4864, None)
    assert flag(scenario, "--clock-latency") == ["10"] and flag(scenario, "--straggler") == ["1:1.279@171"]
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "clock latency" for d in decisions), decisions
    assert outcome.history_slowdown_error <= 0.003 and outcome.history_saving_error <= 0.005, outcome


def test_a_straggler_that_begins_in_the_warm_up_is_the_baseline_from_then_on(drawn):
    """Instance 5843 (1F1B, 2 stages, 3 microbatches, noise 0.0185): pipeline 1 runs 1.05x slow for good from
    iteration 110, halfway through the warm-up. The baseline was the mean of the rounds before and after (2.6%
    slower than before, 2.4% faster than after), and the plans were judged against it: 0.67% slower than all-max
    and the reported saving 1.3 points over the truth. The rounds before a clear step in time are left out of the
    baseline: the straggler is part of it, as one present from the start."""
    scenario = drawn(5843, None)
    assert flag(scenario, "--straggler") == ["1:1.050@110"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    baseline = next(d["detail"] for d in decisions if d["event"] == "baseline")
    assert "after a step in time" in baseline, baseline
    assert any(d["event"] == "slow pipeline in the baseline" for d in decisions), decisions
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.005, outcome


def test_a_straggler_detected_while_profiling_is_no_measure_of_the_clusters_conditions(drawn):
    """Instance 5843 with its straggler from iteration 250, while profiling. Detected (1.06x), it still ran within
    the threshold of the other pipeline in the check rounds at all-max, and with two pipelines the median of their
    conditions is their mean: the cluster was taken to run 2.9% slow, the straggler's pace as deployed 8.3% over
    the baseline's (the truth 5%). Judged against that, the plans ran 2.1% slower than all-max for the rest of the
    run while the reported slowdown was -1.2%. A detected straggler is left out of the cluster's conditions."""
    scenario = drawn(5843, None)
    scenario = dataclasses.replace(scenario, simulate_args=[
        "1:1.050@250" if a == "1:1.050@110" else a for a in scenario.simulate_args])
    assert flag(scenario, "--straggler") == ["1:1.050@250"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "straggler detected" and "while profiling" in d["detail"] for d in decisions), decisions
    assert outcome.true_slowdown <= 0.004 and outcome.history_slowdown_error <= 0.003, outcome
    assert outcome.history_saving_error <= 0.005, outcome


def test_a_straggler_detected_while_profiling_is_measured_at_all_max_once_its_plans_ran(drawn):
    """Instance 6043 of `straggler-early` (1F1B, 2 stages, 6 microbatches, Bloom on A100, noise 0.0167): pipeline 1
    runs 1.165x slow for good from iteration 118, detected while profiling. Its plan (the target plan, many paths near
    its longest) runs nothing at the top clock and nothing had calibrated it: its pace was read against the other
    pipeline's plan, which has slack and ends closer to its prediction under noise, and the reference stood 0.5%
    above the truth (the reported slowdown 0.56 points under it). One all-max probe once its plans ran calibrates
    the straggler's plan."""
    scenario = drawn(6043, "straggler-early")
    assert flag(scenario, "--straggler") == ["1:1.165@118"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    detected = [d for d in decisions if d["event"] == "straggler detected"]
    assert detected and "while profiling" in detected[0]["detail"], decisions
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_the_round_after_a_disturbance_that_ends_just_before_the_window_is_left_out(drawn):
    """Instance 5889 (zb-h1, 2 stages): pipeline 0 straggles 1.21x over iterations 656-900 and the judged window is
    the last 100 iterations, 901-1000. The round after it ended (901-905) ran the other pipeline still paced to it,
    20% slower than all-max: no loop sees an end before a round of it has run, and a disturbance that ends within
    the window has that round left out; one that ends just before it has too."""
    scenario = drawn(5889, None)
    assert scenario.disturbances == [(656, 900)], scenario.disturbances
    twin = [{"first_iteration": i, "last_iteration": i + 4, "iteration_time": 1.0, "energy": 100.0}
            for i in range(1, 1001, 5)]
    reports = [dict(r, iteration_time=1.2 if r["first_iteration"] == 901 else 1.0) for r in twin]
    outcome = turnkey_truth.judge(BINARY, scenario, reports, twin, {}, [])
    assert outcome.window == (901, 1000) and abs(outcome.true_slowdown) < 1e-12, outcome
    late = [dict(r, iteration_time=1.2 if r["first_iteration"] == 906 else 1.0) for r in twin]  # a round later: counted
    assert turnkey_truth.judge(BINARY, scenario, late, twin, {}, []).true_slowdown > 0.005


def test_where_the_noise_costs_much_of_the_saving_its_allowance_widens(drawn):
    """Instance 3557 (GPipe, 5 stages of GPT-3 175B on A40, 6 microbatches, noise 0.0175, undisturbed). GPipe's rows of
    microbatches make many paths near-critical; within 0.15% of all-max's expected time the plans kept 2.8% of the
    noise-free 3.9% saving, and the loop 66% of the ideal. The allowance widens to 0.3% where the noise costs more
    than 8% of the saving and the time buys at least three times its share in energy."""
    scenario = drawn(3557, None)
    assert flag(scenario, "--noise") == ["0.0175"] and not scenario.disturbances, scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert outcome.share >= 0.8 and outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome
    assert "allowed for the noise" in outcome.reason, outcome.reason


def test_a_probe_recalibrates_a_paced_plan_that_ran_as_before_it(drawn):
    """Instance 6464 (ZBV, 3 stages, noise 0.0154): pipeline 0 runs 1.18x slow from the start (part of the baseline),
    1.10x slower on top from iteration 101, and recovers from the first at 322. In the round it recovered, before
    its change of pace was taken in, the other pipeline's new plan was calibrated on the cluster's conditions as the
    two measured them, 4.5% low; an all-max probe later measured that pipeline at 1.00, but 4.5% is far from what
    the plan read, so the probe was taken for a change of conditions and the reference's energy stayed 1.6% low
    (the reported saving 1.2 points under the truth). A plan that ran as in its round before the probe did not see
    its conditions change: it is calibrated anew on the probe's."""
    scenario = drawn(6464, None)
    assert flag(scenario, "--straggler") == ["0:1.182@1-322", "0:1.099@101"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert abs(outcome.reported_saving - outcome.true_saving) <= 0.005, outcome
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_probe_within_a_step_of_the_conditions_leaves_the_plans_calibration(drawn):
    """Instance 6642 (1F1B, 4 stages of Bloom on A100, noise 0.0112): the cluster 1.5% slower every 120 iterations from
    287, pipeline 1 a 1.156x straggler from 628. The other pipeline, paced to the straggler, runs nothing at the top
    clock; an all-max probe in iterations 646-650 measured its conditions with half of the step at 647 in them, and
    its plan's next round, 1.5% slower than its round before the probe, was calibrated on the probe: the step was
    calibrated away, the conditions read 1.7% low to the end and the reported saving 0.6 points under the truth. A
    plan that ran otherwise than before the probe keeps its calibration."""
    scenario = drawn(6642, None)
    assert flag(scenario, "--straggler") == ["all:1.015@287", "all:1.015@407", "all:1.015@527", "all:1.015@647",
                                             "1:1.156@628"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert abs(outcome.reported_saving - outcome.final_truth_saving) <= 0.005, outcome
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_short_pipelines_plan_is_calibrated_on_its_first_rounds_not_its_first(drawn):
    """Instance 6419 (1F1B, 2 stages of Bloom on A40, 2 microbatches, noise 0.0161, undisturbed). Its plans run (next
    to) nothing at the top clock, so each pipeline's conditions are its time over the plan's prediction times a
    calibration; taken from the plan's first round alone, one pipeline's was 0.47% off (one round of eight
    instructions is that noisy), its conditions read 1.005 for 1.000 and the reported slowdown was -0.33% where
    training ran 0.10% slower than all-max. A plan calibrated anew is calibrated on its first rounds' mean ratio."""
    scenario = drawn(6419, None)
    assert flag(scenario, "--noise") == ["0.0161"] and not scenario.disturbances, scenario.simulate_args
    assert scenario.stages == 2 and scenario.microbatches == 2
    outcome, _ = judged(scenario)
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_a_pipeline_falling_behind_the_straggler_runs_the_target_plan_until_it_is_confirmed(drawn):
    """Instance 6671 (zb-h1, 5 stages, noise 0.0162): pipeline 1 a 1.29x straggler from iteration 663, followed;
    pipeline 0, paced to it, slows 1.22x from 697 to 781 and ended every iteration after it, 17% and 22.5% slower
    than all-max in the two rounds the detector took to confirm it (0.64% slower over the run's second half). From
    the first such round every pipeline but the straggler runs the target plan until the detector's verdict."""
    scenario = drawn(6671, None)
    assert flag(scenario, "--straggler") == ["0:1.221@697-781", "1:1.293@663"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "unpaced behind the straggler" in events
    assert outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome


def test_a_plan_started_in_the_round_its_pipeline_recovers_is_not_calibrated_on_that_round(drawn):
    """Instance 3131 (1F1B, 6 stages of Bloom on A100, noise 0.0081): pipeline 0 a 1.29x straggler from iteration 224;
    pipeline 1, paced to it, 1.11x slow from 431 to 599. A step-up gave pipeline 1 a new plan in the round it
    recovered: calibrated anew on that round (half recovered) from its conditions before, its conditions read 1.027
    for 1.000 to the end and the reported saving stayed 0.7 points above the truth. A new plan whose second round
    moves on, clearly, the way its first moved from what the plan before's calibration expected keeps that
    calibration."""
    scenario = drawn(3131, "two-stragglers")
    assert flag(scenario, "--straggler") == ["0:1.289@224", "1:1.107@431-599"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_slow_spell_that_ends_within_profiling_leaves_no_clock_at_its_conditions(drawn):
    """Instance 6947 (interleaved, 3 stages of Bloom on A100, noise 0.0056): the whole cluster 1.057x slow from
    iteration 99 to 141, while profiling. Its start and its step took three rounds of measuring again; the round
    after it ended ran 0.946x off the clocks' curves, and its check found the cluster back at the baseline's pace,
    but the redos were spent: that round's clocks stayed measured at the spell's conditions (5% fast), every plan ran
    2.4% slower than predicted and the loop kept 11% of the ideal, stepping up and retrying for good. The round off
    its curves, where the rounds before ran on theirs, is measured again."""
    scenario = drawn(6947, "transient-early")
    assert flag(scenario, "--straggler") == ["all:1.057@99-141"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "profiling conditions changed" and "x0.9" in d["detail"] and "its 12 clocks" in d["detail"]
               for d in decisions), decisions
    assert outcome.step_ups == 0 and outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_a_profile_that_bends_where_no_exponential_does_is_planned_on_its_measured_points(drawn):
    """Instance 7439 of `two-stage` (GPipe, 2 stages, 2 microbatches, Bloom on A40, noise 0.0183, quiet): the
    forward runs faster and cheaper at 1710, 1680 and 1560 MHz than at the top clock. The exponential fits `auto`
    chose everywhere miss that bend: its plan at all-max's time saves 0.2%, and the loop, its plans 2.4% slow, kept
    12% of the ideal and ran all-max for 129 rounds past any disturbance. Planned with the piecewise-linear model
    too, its frontier (its plan 1.5% cheaper at the target, beyond twice the profile's measurement error) is the
    one deployed."""
    scenario = drawn(7439, "two-stage")
    assert scenario.schedule == "gpipe" and scenario.stages == 2 and scenario.microbatches == 2, scenario.label
    outcome, decisions = judged(scenario)
    planned = [d["detail"] for d in decisions if d["event"] == "planned"]
    assert planned and "pwl's frontier kept" in planned[-1], planned
    assert outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_a_pipeline_slow_from_the_start_that_spread_half_hid_is_seen_to_recover(drawn):
    """Instance 7627 (ZB-H1, 5 stages, Bloom on A100, noise 0.0012, GPU spread 0.018): pipeline 1 runs 1.045x slow
    from the first iteration to 491, in the baseline, which measured it only 1.022x the other's time (the spread
    hid the rest). Recovery was looked for only in pipelines more than half the straggler threshold slower: once
    it recovered, the other pipeline, paced to it, ran 4% slower than it, which the detector kept suspecting for
    good (below the threshold), and a suspicion holds the plans' verdicts: 2.1% slower than all-max to the end.
    Slower by less, it recovers where it then runs no faster than the other by more than half the threshold."""
    scenario = drawn(7627, None)
    assert flag(scenario, "--straggler") == ["1:1.045@1-491"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "slow pipeline recovered" and "pipeline 1, 1.02" in d["detail"] for d in decisions), \
        decisions
    assert outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome


def test_a_pipeline_slow_from_the_start_on_faster_gpus_recovers_past_the_others_pace(drawn):
    """Instance 19015 of `spread+mild-straggler` (DualPipeV, 3 stages, noise 0.007, GPU spread 0.029): pipeline 0
    runs 1.044x slow from the first iteration to 317, in the baseline, on GPUs faster than the other's. Recovered,
    it ran 2.8% faster than the other, a recovery refused beyond half the straggler threshold (as likely the others
    slowing, by the pipelines' times alone): the other pipeline, paced to the old pace, ended every iteration 1.2%
    late, and stepping the target plan up to all-max bought none of it back (47% of the ideal, 0.79% slower). Its
    own top-clock instructions show the speed-up, and the others' not moving, so it is taken."""
    scenario = drawn(19015, "spread+mild-straggler")
    assert flag(scenario, "--straggler") == ["0:1.044@1-317"], scenario.simulate_args
    outcome, decisions = judged(scenario, as_ran=True)
    assert any(d["event"] == "slow pipeline recovered" and "pipeline 0," in d["detail"] for d in decisions), decisions
    assert outcome.passes() == [] and outcome.step_ups == 0, outcome


def test_a_run_with_no_clock_latency_measures_none_however_often_it_looks(drawn):
    """Instance 6467 (DualPipeV, 2 stages, noise 0.0162, a slow spell of the cluster): the clocks take effect at
    once. The latency's estimate is looked at every round as changes accumulate; at a fixed 3 standard errors,
    counting each change as independent, it "measured" 2.00 ms (+-1.32 over 345 changes) and the plans were chosen
    again for a latency that is not there. Its boundary holds however often it is looked at, and its standard
    error counts a round's changes, which share their references, as one."""
    scenario = drawn(6467, None)
    assert not flag(scenario, "--clock-latency"), scenario.label
    outcome, decisions = judged(scenario)
    assert not any(d["event"] == "clock latency" for d in decisions), decisions
    assert outcome.passes() == [], outcome


def test_a_mild_straggler_next_to_a_pipeline_slow_since_the_start_leaves_that_ones_plan_judged(drawn):
    """Instance 7751 of `spread+mild-straggler` (1F1B, 4 stages, GPT-3 on A100, noise 0.0179, GPU spread 0.030):
    pipeline 0's GPUs are 1.09x slower from the start (the baseline's pace), and pipeline 1 turns 1.034x slow
    from iteration 76, while the clocks are profiled, where it measured 1.07x. Followed at 1.07x, it read 1.03x
    next to the other, which therefore looked 1.04x slow: suspected for good, and every verdict held (0.65% slower
    than all-max to the end, reported so). Followed at the slowdown it then runs at, the other's plan is judged;
    and where that pipeline, not the straggler, computes longest, its own plan steps up rather than the pace."""
    scenario = drawn(7751, "spread+mild-straggler")
    assert flag(scenario, "--straggler") == ["1:1.034@76"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "stepped up" and "following the straggler" not in d["detail"] for d in decisions), \
        decisions
    assert outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome


def test_a_straggler_below_the_threshold_for_good_is_the_paced_pipelines_new_speed(drawn):
    """Instance 7741 of `spread+mild-straggler` (ZBV, 3 stages, GPT-3 on A40, noise 0.0062, GPU spread 0.012):
    pipeline 0, paced to pipeline 1 (the slower in the baseline), runs 1.034x slow from iteration 465 to the end,
    between half the straggler threshold and the threshold: never a straggler, but suspected every round as one
    that might be starting, and a suspicion holds the verdicts on the plans (0.57% slower than all-max to the end
    where nothing else acts). A paced pipeline that runs slower than its plan predicts by less than a straggler
    is how the cluster runs now: its plan is paced to its GPUs as they run, and the job runs as fast as all-max."""
    scenario = drawn(7741, "spread+mild-straggler")
    assert flag(scenario, "--straggler") == ["0:1.034@465"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert not any(d["event"] == "straggler detected" for d in decisions), decisions
    assert any(d["event"] == "pipeline slowed" and d["round"] > 465 // 5 and "pipeline 0" in d["detail"]
               for d in decisions), decisions
    assert outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome


def test_a_pipeline_on_the_target_plan_slower_by_less_than_a_straggler_for_good_gives_the_others_its_slack(drawn):
    """Instance 17001 of `mild-straggler` (GPipe, 8 stages, a synthetic GPU, noise 0.0059): both pipelines run the
    target plan (GPUs alike), and pipeline 0 turns 1.040x slow from iteration 426 to the end, less than a
    straggler. The other ended every iteration 4% before it on a plan paced to the pace before: 2.2% saved where
    planning each pipeline on its GPUs as they ran saves 11.9% (19% of that ideal). Taken as pipeline 0's new
    pace, the other's plan is paced to it."""
    scenario = drawn(17001, "mild-straggler")
    assert flag(scenario, "--straggler") == ["0:1.040@426"], scenario.simulate_args
    outcome, decisions = judged(scenario, as_ran=True)
    assert not any(d["event"] == "straggler detected" for d in decisions), decisions
    assert any(d["event"] == "pipeline slowed" and d["round"] > 426 // 5 and "pipeline 0, on the target plan" in
               d["detail"] for d in decisions), decisions
    assert outcome.ideal > 0.1 and outcome.passes() == [], outcome


def test_a_followed_stragglers_calibration_stops_at_a_change_of_the_clusters_pace(drawn):
    """Instance 7856 (1F1B, 2 stages, 3 microbatches, Bloom on A100, noise 0.0021): pipeline 1 turns 1.132x slow
    at iteration 174, and the whole cluster 1% slower every 174 iterations from 196. The straggler's plan runs
    nothing at the top clock, so an all-max probe calibrates it over its next rounds; the first drift step came
    within them, and averaged in, it read as the plan's error: the straggler's conditions 0.7% low for good, its
    reference 0.7% fast, nine step-ups to all-max of a plan that ran as fast as all-max, and the reported
    slowdown 0.73 points above the truth. Two rounds off those rounds' mean the same way end the calibration
    (one is left out: #6898, a short noisy pipeline, needs its five rounds)."""
    scenario = drawn(7856, None)
    assert flag(scenario, "--straggler")[:2] == ["1:1.132@174", "all:1.01@196"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert sum(d["event"] == "stepped up" for d in decisions) <= 3, decisions
    assert outcome.passes() == [], outcome


def test_a_followed_stragglers_calibration_leaves_out_one_noisy_round(drawn):
    """Instance 6898 of `spread+straggler` (GPipe, 2 stages, 3 microbatches, Bloom on A40, noise 0.0143, GPU spread
    0.027): pipeline 0 turns 1.072x slow at iteration 191 and its plan, calibrated on an all-max probe over its
    next rounds, reads them 1.070, 1.075, 1.081, 1.075, 1.076 times its prediction. Ending the calibration at the
    first round off the mean of those before left it on the first, low one: the straggler's conditions 0.5% high
    and the reported slowdown 0.68 points off."""
    scenario = drawn(6898, "spread+straggler")
    assert flag(scenario, "--straggler") == ["0:1.072@191"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert outcome.passes() == [], outcome


def test_a_followed_stragglers_noisy_round_on_another_plan_does_not_become_its_calibration(drawn):
    """Instance 8867 of `spread+straggler` (GPipe, 3 stages, 7 microbatches, GPT-3 on A100, noise 0.0172, GPU spread
    0.012): pipeline 1 turns 1.11x slow at iteration 139, while the clocks are profiled, and is followed. A step-up
    gives it a plan whose few top-clock instructions right after changes of clock read its conditions 1.4% slow in
    one round, and the retry right after calibrated its plan, which runs nothing at the top clock, on that round
    for good: the reference 1% slow, training 0.5% slower than all-max reported 0.46% faster. A followed
    straggler's conditions known count as the rounds they are the mean of next to such a round."""
    scenario = drawn(8867, "spread+straggler")
    assert flag(scenario, "--straggler") == ["1:1.110@139"], scenario.simulate_args
    outcome, _ = judged(scenario)
    assert outcome.history_slowdown_error <= 0.004 and outcome.history_saving_error <= 0.005, outcome
    assert outcome.true_slowdown <= 0.005, outcome


def test_a_pipeline_slow_in_the_baseline_that_recovers_while_profiling_makes_no_straggler_of_the_other(drawn):
    """Instance 9151 of `straggler` (1F1B, 3 stages, 4 microbatches, Bloom on A40, noise 0.0121): pipeline 1 runs
    1.23x slow from iteration 62, within the warm-up (part of the baseline, the other paced to it), to 232, while
    the clocks are profiled. To the straggler detector pipeline 0 then ran 1.23x slower than pipeline 1 (two
    pipelines' ratios cannot tell a straggler from the other recovering): profiled and deployed as if it were
    one, then paced to pipeline 1's recovery once deployed, the rounds in between were reported slower than
    all-max by 24% (history saving 1.08 and slowdown 0.98 points off). The all-max check round tells the two
    apart: pipeline 0 runs as in the baseline, pipeline 1 faster than it did."""
    scenario = drawn(9151, "straggler")
    assert flag(scenario, "--straggler") == ["1:1.235@62-232"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    recovered = [d for d in decisions if d["event"] == "slow pipeline recovered"]
    assert recovered and "while profiling" in recovered[0]["detail"], decisions
    assert not any(d["event"] == "straggler recovered" for d in decisions), decisions
    assert outcome.passes() == [], outcome


def test_a_pipeline_recovered_while_profiling_is_measured_at_its_new_pace_by_a_plan_that_runs_no_top_clock(drawn):
    """Instance 9148 of `straggler` (1F1B, 4 stages, 7 microbatches, Bloom on A40, noise 0.0037): pipeline 1 runs
    1.27x slow in iterations 10-35, the warm-up's (the baseline paced to it), and recovers while profiling, which
    takes its change of pace in. Its plan runs nothing at the top clock, so its conditions are its time over the
    plan's prediction times a calibration from the conditions known when the plans are deployed: taken as the
    cluster's alone, its recovery was forgotten, the reference stayed at the slow baseline's time and the
    reported slowdown read -17% for 60 rounds. The conditions known at deployment carry each pipeline's change of
    pace."""
    scenario = drawn(9148, "straggler")
    assert flag(scenario, "--straggler") == ["1:1.274@10-35"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "slow pipeline recovered" for d in decisions), decisions
    assert outcome.passes() == [], outcome


def test_a_pipeline_paced_to_one_slow_in_the_baseline_that_falls_behind_it_runs_the_target_plan_at_once(drawn):
    """Instance 9505 (1F1B, 4 stages, 6 microbatches, synthetic, noise 0.016): pipeline 0 runs 1.18x slow from the
    first iteration (the baseline's pace, pipeline 1 paced to it), pipeline 1 1.15x slower than its own baseline
    from iteration 626: on its paced plan it then ended every iteration 15% after pipeline 0, for the two rounds
    the detector takes (0.52% slower than all-max over the run's second half). From the first such round it runs
    the target plan until the detector's verdict, as beside a detected straggler."""
    scenario = drawn(9505, None)
    assert flag(scenario, "--straggler") == ["0:1.178@1", "1:1.150@626"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "unpaced behind the straggler" in events, events
    assert outcome.true_slowdown <= 0.005 and outcome.passes() == [], outcome


def test_a_pipeline_recovered_beside_a_followed_straggler_onto_a_plan_with_no_top_clock_is_measured_at_all_max(drawn):
    """Instance 3119 (1F1B, 2 stages and 4 microbatches of Bloom on A100, noise 0.0149): pipeline 1 a 1.20x
    straggler from iteration 207, followed; pipeline 0, paced to it, 1.16x slow from 336 to 530. When it recovered
    its new plan ran nothing at the top clock and carried the paced plan's calibration with that plan's error: its
    conditions read 0.6% off and the reported saving stood 0.54 points above the truth to the end. While a straggler
    is followed, any pipeline whose calibration is carried from another plan is measured in one all-max round once
    its plan ran a round."""
    scenario = drawn(3119, "two-stragglers")
    assert flag(scenario, "--straggler") == ["1:1.198@207", "0:1.159@336-530"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "slow pipeline recovered" for d in decisions), decisions
    assert outcome.history_saving_error <= 0.005 and outcome.passes() == [], outcome


def test_a_gpipe_plan_on_a40s_is_planned_on_the_measured_points_where_they_save_more_than_their_noise(drawn):
    """Instance 8030 (GPipe, 8 stages and 10 microbatches of GPT-3 on A40, noise 0.0152, quiet): an A40's backward
    runs 1-2% cheaper 30 MHz below a coarse point than an exponential through the coarse points says. The
    piecewise-linear model's plan at the target cost 0.30% less than the fit's, and was kept out by a margin of twice
    the profile's median measurement error (0.34%): 75% of the ideal. The hull is about one standard error too good
    (it picks the luckiest of a few neighbours, each noisy by that much), and that is the margin."""
    scenario = drawn(8030, "quiet", "gpipe")
    assert flag(scenario, "--noise") == ["0.0152"] and scenario.stages == 8, scenario.label
    outcome, decisions = judged(scenario)
    planned = [d["detail"] for d in decisions if d["event"] == "planned"]
    assert planned and "pwl's frontier kept" in planned[-1], planned
    assert outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_a_balanced_1f1b_pipeline_under_a_clock_latency_keeps_its_saving_for_the_latencys_own_delay(drawn):
    """Instance 9486 (1F1B, 3 equal stages of GPT-3 on A100, 9 microbatches, noise 0.0003, 2 ms clock latency): the
    saving lies in a few forwards of the warm-up and backwards of the cool-down; the changes back to the top clock
    delay the critical instructions after them by about 0.1% of the iteration, which no top clock wins back. Within
    all-max's own time (the noise allows nothing) the plan chosen for the latency kept 47% of the ideal; the
    allowance takes in the latency's delay within 0.15%."""
    scenario = drawn(9486, None)
    assert flag(scenario, "--clock-latency") == ["2"] and flag(scenario, "--noise") == ["0.0003"], scenario.label
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "chosen for the clock latency" for d in decisions), decisions
    assert outcome.share >= 0.8 and outcome.true_slowdown <= 0.0015 and outcome.passes() == [], outcome


def test_a_pipeline_slow_since_the_start_that_recovers_after_the_cluster_drifted_leaves_no_straggler_behind(drawn):
    """Instance 9642 of `drift` (GPipe, 4 stages of Bloom on A40, noise 0.0025, the cluster 1.5% slower every 134
    iterations from 287) with pipeline 1 1.24x slow from the first iteration to 705: when it recovered, the detector
    compared it with the baseline's pace (1.0) rather than the drifted cluster's (1.06), so the other pipeline, running
    at the cluster's pace, read 1.062x slower than it: detected as a straggler, and the recovered pipeline's pace taken
    as 1.062x the others'. Both then ran near-all-max plans: 26% of the ideal."""
    drift = drawn(9642, "drift")
    scenario = dataclasses.replace(drift, simulate_args=drift.simulate_args + ["--straggler", "1:1.240@1-705"],
                                   disturbances=drift.disturbances + [(1, 705)])
    assert flag(drift, "--straggler")[0] == "all:1.015@287", drift.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline recovered" in events and "straggler detected" not in events, events
    assert outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_one_round_of_a_short_pipelines_conditions_off_by_its_own_noise_does_not_restart_them(drawn):
    """Instance 10003 of `spread+mild-straggler` (GPipe, 2 stages of GPT-3 on A40, noise 0.0188, GPU spread 0.013,
    pipeline 1 1.049x slow from the first iteration): pipeline 1's plans run only six instructions at the top clock,
    so one round measures its conditions to about 1%. A round that read them 1.1% slow (a draw of the noise, the
    cluster unchanged) restarted its conditions from that round alone, the plan tried next was calibrated on it,
    and for 30 rounds the reference read 1.5-2% slow: the reported slowdown ended at -0.53% where the truth was
    +0.37%. A round off by less than three of its own standard errors restarts them only when the next round is
    off the same way."""
    scenario = drawn(10003, "spread+mild-straggler")
    assert "1:1.049@1" in flag(scenario, "--straggler") and flag(scenario, "--gpu-speed-spread"), scenario.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events, events
    assert outcome.history_slowdown_error <= 0.003 and outcome.passes() == [], outcome


def test_a_target_fitted_to_one_pipelines_gpus_is_chosen_anew_when_another_sets_the_pace(drawn):
    """Instance 10008 of `spread+mild-straggler` (1F1B, 5 stages of GPT-3 on A100, GPU spread 0.018): pipeline 0
    runs 1.029x slow from the first iteration to 291, so the target plan, the one without slack, is fitted to its
    GPUs. When it recovers, pipeline 1 sets the pace; its stages run at other relative speeds, and the target it
    inherited cost it 2.8% more energy than one fitted to its own GPUs (77% of the ideal). The target is chosen anew
    for the GPUs that set the pace now."""
    scenario = drawn(10008, "spread+mild-straggler")
    assert "0:1.029@1-291" in flag(scenario, "--straggler") and flag(scenario, "--gpu-speed-spread"), scenario.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline recovered" in events, events
    assert outcome.share >= 0.8 and outcome.passes() == [], outcome


def test_a_pipeline_that_recovers_in_the_plans_first_round_is_not_held_at_its_slow_pace_by_that_calibration(drawn):
    """Instance 10058 of `straggler-early` (GPipe, 4 stages of Bloom on A100, noise 0.0133): pipeline 0 runs 1.30x
    slow from iteration 14 to 186, in the baseline from its third round, and recovers in the plans' first round. That
    round calibrated its plan with the recovery in it, and the recovery taken in two rounds later did not move the
    calibration: its conditions stayed at the slow pace, and so did the reference (the reported slowdown -20% for
    40 rounds, the saving 21% where the truth was 6%). The two rounds before the recovery was found ran the other
    pipeline's plan paced to the slow one, 25% slower than all-max: reported again against the new pace once found
    (reported on time, the history's slowdown read 0.45 points low)."""
    scenario = drawn(10058, "straggler-early")
    assert "0:1.298@14-186" in flag(scenario, "--straggler"), scenario.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline recovered" in events, events
    assert outcome.history_saving_error <= 0.003 and outcome.history_slowdown_error <= 0.002, outcome
    assert outcome.passes() == [], outcome


def test_a_straggler_that_starts_in_the_plans_first_round_does_not_lower_the_others_reference(drawn):
    """Instance 10050 of `permanent` (1F1B, 4 stages of Bloom on A100, noise 0.0097): pipeline 0 runs 1.27x slow from
    iteration 144, two iterations into the plans' first round. That round calibrated its plan with part of the
    slowdown in it, its conditions read 1.12x, and the other pipeline's paced plan was calibrated from them at 0.79x
    of its own: the reference's energy read 2.3% low for the rest of the run, the saving 1.9 points low."""
    scenario = drawn(10050, "permanent")
    assert "0:1.268@144" in flag(scenario, "--straggler"), scenario.label
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events, events
    assert outcome.passes() == [], outcome
    assert abs(outcome.reported_error) <= 0.003 and outcome.history_saving_error <= 0.005, outcome


def test_a_latency_measured_where_plans_run_few_steady_top_clock_instructions_is_not_read_short(drawn):
    """Instance 10053 of `latency-10ms` (DualPipeV, 4 stages of Bloom on A40): the plans run two instructions per
    pipeline at the top clock after another at it, and eight right after a change to it. A change into the top clock
    was compared with the baseline's time times the conditions those ten measured, eight of them slowed by the very
    latency measured: 7.4 ms where it is 10, the conditions read 0.4% slow from then on, and with them the
    reference (the reported slowdown -0.3% where the truth was +0.1%)."""
    scenario = drawn(10053, "latency-10ms")
    assert flag(scenario, "--clock-latency") == ["10"], scenario.label
    outcome, measured = judged_latencies(scenario)
    assert measured and all(abs(m - 10) <= 2 for m in measured), measured
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.003, outcome


def test_a_latency_is_measured_where_a_plan_runs_one_steady_top_clock_instruction(drawn):
    """Instance 10818 of the mixed classes (zb-h1, 2 stages of Bloom on A100, noise 0.0197, 2 ms latency): each
    pipeline's plan runs one instruction at the top clock after another at it, and two right after a change to it,
    one of them from 960 MHz. With fewer than three steady ones to read the conditions by, no change into the top
    clock had anything to compare with: the latency was never measured, the conditions were read off those three,
    0.4% slow, and the reported slowdown was -0.15% where the truth was +0.18%."""
    scenario = drawn(10818, None)
    assert flag(scenario, "--clock-latency") == ["2"], scenario.label
    outcome, measured = judged_latencies(scenario)
    assert measured and all(abs(m - 2) <= 0.5 for m in measured), measured
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.002, outcome


def test_the_conditions_of_plans_paced_to_a_straggler_are_probed_now_and_then(drawn):
    """Instance 10864 of the mixed classes (1F1B, 4 stages of Bloom on A40, noise 0.0162, 1 ms latency): pipeline 0
    runs 1.174x slow from iteration 198 to the end, followed as a straggler, and the other's paced plan runs nothing
    at the top clock. Without all-max probes while a straggler was followed, its conditions came from calibrations
    carried from plan to plan, 0.5% slow after 50 rounds, and the reported slowdown 0.33 points under the truth."""
    scenario = drawn(10864, None)
    assert flag(scenario, "--straggler") == ["0:1.174@198"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.003, outcome


def test_every_probe_of_a_followed_straggler_is_weighed_into_its_calibration(drawn):
    """Instance 15005 of `spread+straggler` (ZBV, 2 stages, Bloom on A100, noise 0.0188, GPU spread 0.021): pipeline
    1 runs 1.30x slow from iteration 310 to the end, followed as a straggler, on a plan that runs nothing at the top
    clock. Its conditions came from the first all-max probe after it was followed and its plan's next rounds; the
    probes after it, each within the noise of that calibration, were left out, and the history's slowdown lay 0.34
    points off the truth. Each is weighed in as much as the estimates before it."""
    scenario = drawn(15005, "spread+straggler")
    assert flag(scenario, "--straggler") == ["1:1.295@310"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler detected" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.003, outcome


def test_the_probes_while_a_straggler_is_followed_leave_the_one_after_its_recovery_in_place(drawn):
    """Instance 10876 of the mixed classes (1F1B, 2 stages, 2 microbatches, noise 0.003): pipeline 1 runs 1.24x slow
    from the start to iteration 789 (in the baseline) and 1.086x more from 198, followed as a straggler. Its recovery
    is measured by the all-max probe due once no probe ran for probe_every rounds; where the straggler's own probes
    made that wait start again, no probe came for five rounds, the recovered pipeline's conditions read 1.0 where it
    ran at 0.875 (and 0.91 after), and the reported slowdown went 3.2 points under the truth."""
    scenario = drawn(10876, None)
    assert flag(scenario, "--straggler") == ["1:1.241@1-789", "1:1.086@198"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler recovered" in events and "slow pipeline recovered" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.003, outcome


def test_rounds_stepped_up_to_all_max_are_all_max_rounds_for_a_latency_measured_after_them(drawn):
    """Instance 11009 of the mixed classes (1F1B, 3 stages, noise 0.0007, 10 ms latency; the cluster 1% slower every
    112 iterations from 229): stepped up to all-max for 40 rounds, the saving plan tried again measured the latency
    and fell back to the conditions of the last all-max round, which was taken to be the probe before those 40
    rounds, a step of drift earlier: its rounds were restated 1% slow, and the reported slowdown read 0.4 points over
    the truth for 60 rounds."""
    scenario = drawn(11009, None)
    assert flag(scenario, "--clock-latency") == ["10"], scenario.label
    outcome, events = judged_events(scenario)
    assert events.count("stepped up") >= 2 and "clock latency" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.001, outcome


def test_a_pipeline_slow_in_the_baseline_that_slows_further_lends_the_others_no_conditions(drawn):
    """Instance 11255 of the mixed classes (DualPipeV, 2 stages, noise 0.0055): pipeline 0 1.18x slow from the start,
    part of the baseline, and 1.26x slower on top from iteration 139, as the plans were deployed. Pipeline 1's
    paced plan ran nothing at the top clock; in the round before the detector confirmed the straggler, pipeline 0's
    conditions were taken as the cluster's, pipeline 1's plan was calibrated on them (1.26x), and the reference's
    energy read 7% high: the history's saving 4 points over the truth for a hundred rounds."""
    scenario = drawn(11255, None)
    assert flag(scenario, "--straggler") == ["0:1.177@1", "0:1.257@139"], scenario.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "straggler detected" in events, events
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.005, outcome


def test_a_probe_whose_next_round_strays_with_the_noise_still_calibrates_the_plan(drawn):
    """Instance 10887 of the mixed classes (1F1B, 2 stages of Bloom on A40, noise 0.0161; the cluster 1.5% slower
    every 186 iterations from 199, pipeline 1 1.153x slow from 564 to 609): both plans run nothing at the top
    clock, and pipeline 0's calibration missed the drift step at 385 (its conditions 1.4% low). The probe at
    iteration 540 measured them, but the round after it ran 0.63% off the one before, within the noise, and the
    probe was left out: the history's slowdown read 0.31 points off the truth."""
    scenario = drawn(10887, None)
    assert "all:1.015@385" in flag(scenario, "--straggler") and "1:1.153@564-609" in flag(scenario, "--straggler")
    outcome, events = judged_events(scenario)
    assert "straggler recovered" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.0025, outcome


def test_a_recovery_restated_after_the_cluster_slowed_keeps_the_conditions_of_its_own_rounds(drawn):
    """Instance 11358 of the mixed classes (1F1B, 7 stages of GPT-3 on A40, noise 0.0138): pipeline 0 1.114x slow
    from the start, part of the baseline, recovers at iteration 510; the whole cluster runs 1.118x slower from 522.
    The other pipeline's plan, paced to the slow one, ran 11% slower than all-max in the rounds before the recovery
    was confirmed; those rounds were restated under the conditions after the cluster slowed, and the history's
    slowdown read 0.38 points under the truth for 60 rounds."""
    scenario = drawn(11358, None)
    assert flag(scenario, "--straggler") == ["0:1.114@1-510", "all:1.118@522-743"], scenario.label
    outcome, events = judged_events(scenario)
    assert "slow pipeline in the baseline" in events and "slow pipeline recovered" in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.001, outcome


def test_a_straggler_recovering_beside_a_pipeline_that_slowed_does_not_take_that_slowdown_as_its_conditions(drawn):
    """Instance 11664 of the mixed classes (interleaved, 2 stages of Bloom on A40, noise 0.007): pipeline 0 a 1.11x
    straggler from iteration 607 to 689; pipeline 1 1.29x slower for good from 671, taken in as its pace while
    pipeline 0 was followed. Pipeline 0 recovered onto a plan that runs nothing at the top clock and was calibrated
    at pipeline 1's conditions, its slowdown included: the reference's energy 9% high, the history's saving up to
    5.6 points over the truth."""
    scenario = drawn(11664, None)
    assert flag(scenario, "--straggler") == ["1:1.290@671", "0:1.106@607-689"], scenario.label
    outcome, events = judged_events(scenario)
    assert "pipeline slowed" in events and "straggler recovered" in events, events
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.002, outcome


def test_a_plan_deployed_after_a_step_of_drift_that_profiling_measured_starts_at_its_conditions(drawn):
    """Instance 11572 of the mixed classes (interleaved, 2 stages of Bloom on A100, noise 0.0126; the cluster 1.5%
    slower every 180 iterations from 149). Profiling's check round measured the first step (x1.0151), but only a
    move of 2% counted at deployment: the plans, which run nothing at the top clock, were calibrated at the
    baseline's conditions, the step read as their error, the reference 1.5% fast until a probe, and the saving plan
    condemned four times: 71% of the ideal."""
    scenario = drawn(11572, None)
    assert flag(scenario, "--straggler")[:2] == ["all:1.015@149", "all:1.015@329"], scenario.label
    outcome, events = judged_events(scenario)
    assert "profiling conditions changed" in events, events
    assert outcome.passes() == [] and outcome.step_ups == 0, outcome


def test_a_plan_deployed_after_a_step_of_drift_starts_at_its_conditions_where_profiling_measured_no_clock_again(drawn):
    """Instance 11572 as above with simulate's seed 1: profiling's last check round measured the step (x1.015) and
    had no clock to measure again; the plans were calibrated at the baseline's conditions all the same, the first
    probe moved them two thirds of the way, the plan was condemned on a slowdown it did not have, and the history's
    slowdown read 0.33 points over the truth. (Clocks are measured again for a move of the conditions beyond the
    tolerance: profiling here measures some again, and the plans start at the step's
    conditions either way.)"""
    scenario = with_seed(drawn(11572, None), 1)
    assert flag(scenario, "--seed") == ["1"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert outcome.passes() == [] and outcome.step_ups == 0 and outcome.history_slowdown_error <= 0.002, outcome


def test_a_pipeline_whose_conditions_lie_apart_from_the_others_keeps_them_on_a_change_of_plan(drawn):
    """Instance 10058 of `spread+mild-straggler` (GPipe, 4 stages of Bloom on A100, spread 0.029): pipeline 0, 1.05x
    slow from the start, recovered while profiling; the loop reads it as its conditions (0.954 of its baseline
    pace), not as a change of pace. Stepped up, its new plan was calibrated at the cluster's conditions (the other
    pipeline's, 1.0): the reference's energy 1.9% high over the plan's 20 rounds (the history's saving 0.6 points
    high)."""
    scenario = drawn(10058, "spread+mild-straggler")
    assert "0:1.049@1-173" in flag(scenario, "--straggler"), scenario.label
    outcome, events = judged_events(scenario)
    assert "faster plan" in events, events
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.003, outcome



def test_a_plan_about_to_be_condemned_is_judged_against_a_probes_conditions_first(drawn):
    """Instance 10005 of `drift` (DualPipeV, 2 stages of Bloom on A100, noise 0.0029): the cluster 1% slower from
    iteration 119, in the plans' second round. Half the step went into the plans' calibration, so the reference
    stayed half a point low and the plans, 0.2% faster than all-max in truth, read 1.005x of it: condemned and
    stepped up three times, the history's slowdown 0.36 points off. One all-max probe before the verdict measures
    the conditions the rounds ran in, and against them the plans meet the target."""
    scenario = drawn(10005, "drift")
    assert "all:1.01@119" in flag(scenario, "--straggler"), scenario.label
    outcome, events = judged_events(scenario)
    assert "stepped up" not in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.003, outcome


def test_another_pipeline_slowing_past_a_followed_straggler_is_not_its_recovery(drawn):
    """Instance 10061 of `two-stragglers` (ZBV, 4 stages, Bloom on A100, noise 0.0033): pipeline 1 runs 1.161x
    slow from iteration 218 to the end, and pipeline 0 1.299x from 404 to 629. Against each other, pipeline 1
    looked back within the threshold: read as its recovery, the calibrations started anew on that verdict read
    pipeline 1's conditions 12% low, and for four rounds the job, as fast as all-max, was reported 13% slower;
    the reported slowdown stood 0.86 points above the truth and the saving 0.92 below it. The straggler's own
    time did not fall: it stays followed, and pipeline 0 is a pipeline that slowed beside it."""
    scenario = drawn(10061, "two-stragglers")
    assert flag(scenario, "--straggler") == ["1:1.161@218", "0:1.299@404-629"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    during = [d for d in decisions if 404 // 5 <= d["round"] <= 629 // 5]
    assert not any(d["event"] == "straggler recovered" for d in during), decisions
    assert any(d["event"] == "pipeline slowed" and "pipeline 0" in d["detail"] for d in during), decisions
    assert outcome.passes() == [], outcome


def test_a_slow_spell_ending_within_a_profiling_round_leaves_no_clock_measured_fast(drawn):
    """Instance 10134 of `transient-early` (1F1B, 5 stages, noise 0.0042): the whole cluster 1.075x slow from
    iteration 57 to 79, while profiling. The round of iterations 76-80 ran four of its five at the spell's pace:
    0.982x off the clocks' curves, within what reads as on them, and the check found the change in the round after
    it. Only that round's clocks were measured again; the round before stayed 1.4% fast, the plan ran 0.78% slower
    than predicted, and the loop stepped up to all-max and retried it for good (6% of the ideal). The round before
    the off one, where it leaned the way of the change, is measured again too."""
    scenario = drawn(10134, "transient-early")
    assert flag(scenario, "--straggler") == ["all:1.075@57-79"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "profiling conditions changed" and "part of the change" in d["detail"]
               for d in decisions), decisions
    assert outcome.step_ups == 0 and outcome.passes() == [], outcome


def test_a_plan_condemned_again_on_the_same_evidence_is_not_retried_after_rounds_alone(drawn):
    """Instance 10121 of `two-stage` (GPipe, 2 stages, 2 microbatches, noise 0.0196, quiet): the saving plan ran
    0.5% slower than all-max; stepped up to a plan within the tolerance, it came back every 20 rounds and was
    condemned again each time (1.0053x, 1.0049x, 1.0058x), 0.55% slower over the run's second half. Condemned
    twice on evidence rounds do not age, it waits for the evidence to go stale. (The faster pipeline, paced to the
    other, computing longest in between is paced earlier: a step of its pace, not of the plan.)"""
    scenario = drawn(10121, "two-stage")
    assert scenario.schedule == "gpipe" and flag(scenario, "--noise") == ["0.0196"], scenario.label
    outcome, decisions = judged(scenario)
    stepped = [d for d in decisions if d["event"] == "stepped up" and "paced to others computed" not in d["detail"]]
    assert len(stepped) == 2 and "missed twice" in stepped[-1]["detail"], stepped
    assert not any(d["event"] == "retrying" and d["round"] > stepped[-1]["round"] for d in decisions), decisions
    assert outcome.true_slowdown <= 0.005 and outcome.share >= 0.8, outcome


def test_a_pipeline_at_the_pace_setters_pace_on_slower_gpus_is_not_held_at_all_max(drawn):
    """Instance 10139 of `spread+mild-straggler` (1F1B, 3 stages, noise 0.0191, GPU spread 0.012): pipeline 0 runs
    1.03x slow from the first iteration to 147, in the baseline. Once it recovered, the two pipelines ran at about
    the same pace, pipeline 0 a hair slower without noise: it set the pace on the target plan, and pipeline 1, whose
    GPUs are slow where that plan keeps no slack, was held to that plan's time under the noise, which only all-max
    met: all-max for good, 41% of the ideal. Its own all-max under the noise bounds its deadline, as it does for
    pipelines slower than the pace setters. (The recovery is now taken in by profiling's all-max check of round 35,
    before the plans: no pipeline is paced to another after it, and none to all-max.)"""
    scenario = drawn(10139, "spread+mild-straggler")
    assert flag(scenario, "--straggler") == ["0:1.030@1-147"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    recovered = [d["round"] for d in decisions if d["event"] == "slow pipeline recovered"]
    assert recovered, decisions
    paced = [d for d in decisions if d["round"] >= recovered[0] and d["event"] == "paced to the pipelines' new speeds"]
    assert not any("all-max" in d["detail"] for d in paced), paced
    assert outcome.true_slowdown <= 0.005 and outcome.share >= 0.7, outcome


def test_a_probe_recalibrates_a_followed_straggler_whose_calibration_another_plan_set(drawn):
    """Instance 10219 of `two-stragglers` (1F1B, 4 stages, synthetic, noise 0.0121): pipeline 0 runs 1.09x slow from
    iteration 120 on, and pipeline 1 1.246x from 226 to 272. While pipeline 1 was slow, the straggler ran a plan paced
    to it, which ran 1% slower than predicted: carried from plan to plan, that calibration read the straggler 1.3%
    slower than it is, the reference stood that much late, and its plan ran 0.84% slower than all-max to the end,
    reported 0.41% faster. The probe after the spell measured the straggler's conditions at all-max; where they lie
    off its calibration beyond the noise, the plan is calibrated on the probe."""
    scenario = drawn(10219, "two-stragglers")
    assert flag(scenario, "--straggler") == ["0:1.090@120", "1:1.246@226-272"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert outcome.passes() == [], outcome
    assert outcome.history_slowdown_error <= 0.003 and outcome.true_slowdown <= 0.003, outcome


def test_a_pipeline_slow_in_the_baseline_recovering_in_a_probe_does_not_make_the_other_a_straggler(drawn):
    """Instance 10223 of `from-start` (1F1B, 4 stages of GPT-3 on A100, noise 0.0091): pipeline 1 runs 1.162x slow
    from the first iteration to 352, in the baseline. The all-max probe of iterations 356-360 measured it at 0.895 of
    its baseline pace, and that was taken for the cluster's conditions then: against them pipeline 0, on its plan as
    predicted, ran 1.12x slower than the recovered pipeline, was followed as a straggler, and the loop swung between
    that verdict and pipeline 1's recovery every few rounds, 12.4% slower than all-max to the end. A probe that
    already ran a pipeline slow in the baseline faster, the others as in the baseline, measured the cluster by the
    others."""
    scenario = drawn(10223, "from-start")
    assert flag(scenario, "--straggler") == ["1:1.162@1-352"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert not any(d["event"] == "straggler detected" for d in decisions), decisions
    assert outcome.passes() == [], outcome


def test_a_pipeline_that_set_the_baselines_pace_recovering_while_profiling_is_no_change_of_the_cluster(drawn):
    """Instance 10283 of `straggler-early` (zb-h1, 2 stages, 4 microbatches, synthetic, noise 0.0175): pipeline 1 runs
    1.27x slow from iteration 109 to 214, so the baseline, retaken after the step, is its pace. Profiling's all-max
    check after its recovery measured the iteration 0.79x the baseline's and took that for the cluster's conditions:
    pipeline 0, at 1.0, then read 1.27x slow on the plans and was followed as a straggler, and the loop swung between
    that and pipeline 1's recovery (38% of the ideal; with four passes that measure the plan's clocks again, 22%
    slower than all-max for good). Where the pipelines not slow in the baseline run as in it, the check takes in the
    recovery of those that were."""
    scenario = drawn(10283, "straggler-early")
    assert flag(scenario, "--straggler") == ["1:1.269@109-214"], scenario.simulate_args
    for passes in (2, 4):
        case = dataclasses.replace(scenario, scheduler_args={**scenario.scheduler_args, "confirm_passes": passes})
        outcome, decisions = judged(case)
        assert not any(d["event"] == "profiling conditions changed" for d in decisions), decisions
        assert not any(d["event"] == "straggler detected" for d in decisions), decisions
        assert any(d["event"] == "slow pipeline recovered" and "the others run as in the baseline" in d["detail"]
                   for d in decisions), decisions
        assert outcome.passes() == [], (passes, outcome)


def test_a_pipeline_on_faster_gpus_that_slowed_and_recovered_is_paced_back(drawn):
    """Instance 10325 of `spread+mild-straggler` (1F1B, 7 stages of GPT-3 on A100, noise 0.017, GPU spread 0.024):
    pipeline 1, on GPUs 3.9% faster than pipeline 0's, runs 1.03x slow from iteration 383 to 585. Its slowdown is
    taken in (its plan is paced to its GPUs as they then run, at 11% more energy), yet it stays no slower than
    pipeline 0: its recovery was taken for no change (a pipeline not slower than the others in the first place),
    and it kept the costlier plan to the end (77% of the ideal). Its own slowdown explains the speed-up: it is
    paced back."""
    scenario = drawn(10325, "spread+mild-straggler")
    assert flag(scenario, "--straggler") == ["1:1.030@383-585"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    slowed = [d["round"] for d in decisions if d["event"] == "pipeline slowed" and d["detail"].startswith("pipeline 1")]
    recovered = [d["round"] for d in decisions
                 if d["event"] == "slow pipeline recovered" and d["detail"].startswith("pipeline 1")]
    assert slowed and recovered and slowed[0] < recovered[0] <= 585 // 5 + 5, decisions
    assert outcome.passes() == [], outcome


def test_a_straggler_that_began_within_a_round_is_not_read_as_the_clusters_change(drawn):
    """Instance 10343 of `spread+straggler` (1F1B, 3 stages, 4 microbatches, synthetic, noise 0.015, GPU spread
    0.013): pipeline 0 runs 1.102x slow from iteration 573, within round 114. Its conditions known when it was first
    followed were the mean of that partly slow round and the next (1.086x): its first round on the straggler's plan,
    at 1.11x, read as the cluster 2.3% slower, and the other pipeline's paced plan was calibrated on that for the
    whole spell, the all-max reference's energy 0.6-0.9% high (the reported saving 0.52 points off the truth). In
    that round the straggler's conditions known are the others' times its slowdown as detected."""
    scenario = drawn(10343, "spread+straggler")
    assert flag(scenario, "--straggler") == ["0:1.102@573-857"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "straggler detected" and d["detail"].startswith("pipeline 0") for d in decisions), decisions
    assert outcome.history_saving_error < 0.003, outcome
    assert outcome.passes() == [], outcome


def test_a_step_of_drift_in_a_plans_first_round_is_taken_from_what_the_others_measure_since(drawn):
    """Instance 10350 of `drift+from-start` (zb-h1, 3 stages, 9 microbatches, synthetic, noise 0.0183): pipeline 0
    runs 1.07x slow from the start and the cluster slows 1.5% every 193 iterations. Pipeline 1, paced to pipeline 0,
    runs nothing at the top clock; a plan it was given in the round after a step was calibrated on the conditions
    known before it (the step, within one round's noise at the top clock, was not taken as a change): its
    conditions, and the reference's energy, stayed 0.6% low to the next step (the reported saving 0.5 points off
    the truth). Pipeline 0's measurements at the top clock over the plan's first rounds move its calibration."""
    scenario = drawn(10350, "drift+from-start")
    assert flag(scenario, "--straggler") == ["all:1.015@242", "all:1.015@435", "all:1.015@628", "all:1.015@821",
                                             "0:1.070@1"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert outcome.history_saving_error < 0.004, outcome
    assert outcome.passes() == [], outcome


def test_a_plan_given_as_a_straggler_recovers_is_not_moved_by_the_others_settling_since(drawn):
    """Instance 10366 of `spread+straggler` (ZBV, 2 stages of Bloom on A40, noise 0.0091, GPU spread 0.013):
    pipeline 1 runs 1.052x slow from iteration 427 to 472. As it recovered, pipeline 0 went back to the target plan,
    calibrated anew on the conditions known; pipeline 1's were still 1.3% slow from its spell (its window of rounds
    held them), and its measurements at the top clock over the next rounds, read as a step of the cluster's,
    moved pipeline 0's calibration 1.3% fast (the reported saving 0.31 points off the truth, from 0.03)."""
    scenario = drawn(10366, "spread+straggler")
    assert flag(scenario, "--straggler") == ["1:1.052@427-472"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler recovered" in events, events
    assert outcome.history_saving_error < 0.001, outcome
    assert outcome.passes() == [], outcome


def test_a_pipeline_that_slowed_within_the_warm_up_and_recovers_does_not_make_the_other_a_straggler(drawn):
    """Instance 10557 of the mixed classes (1F1B, 2 stages, 2 microbatches, noise 0.0145): pipeline 1 runs 1.19x
    slow from iteration 159, pipeline 0 1.08x from 185 to 433, four rounds into the warm-up's baseline, which held
    part of it; the rest was taken in as its pace later (1.04x). Its recovery fell past what that explains, was
    refused, and pipeline 1, running as predicted, was followed as a 1.07x straggler: the other pipeline's plan
    paced to it. And profiling's last all-max round measured the cluster at 1.028, the mean of pipeline 0's 1.055
    and pipeline 1's 1.0: pipeline 1, deployed at those conditions, read 1.8% slow for good and hid its plan's
    slowdown (1.28% slower than all-max, reported 0.38%). Each pipeline now starts at its own."""
    scenario = drawn(10557, None)
    assert flag(scenario, "--straggler") == ["1:1.191@159", "0:1.076@185-433"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "slow pipeline recovered" in events, events
    assert "straggler detected" not in events, events
    assert outcome.passes() == [], outcome


def test_a_straggler_that_recovers_as_the_others_plan_changes_is_no_change_of_the_cluster(drawn):
    """Instance 10669 of the mixed classes (GPipe, 2 stages, 2 microbatches, noise 0.0145): pipeline 1 runs 1.09x
    slow from iteration 147 to 341 (in the warm-up's baseline, as its pace) and 1.055x more from 288, followed as a
    straggler. It recovered in the round its paced partner's plan changed (a step-up): pipeline 0 ran nothing at the
    top clock, so the cluster's change in that round was read off the straggler, 8% faster, and pipeline 0's new
    plan was calibrated so: its conditions read 0.91 where they were 1.0, and the reported saving 1.8 points under the
    truth for a hundred rounds."""
    scenario = drawn(10669, None)
    assert flag(scenario, "--straggler") == ["1:1.055@288", "1:1.091@147-341"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "straggler recovered" in events, events
    assert outcome.history_saving_error < 0.004, outcome
    assert outcome.passes() == [], outcome


def test_a_plan_calibrated_anew_on_a_probe_leaves_one_round_that_strays_with_the_noise_out(drawn):
    """Instance 12012 of the quiet class (1F1B, 3 stages of Bloom on A40, noise 0.0135): nothing changes. The plans
    run nothing at the top clock; after a probe, pipeline 1's plan was calibrated anew on its next rounds, the two
    first 0.45% fast by chance and the third 0.6% off their mean, which ended the calibration: the conditions read
    0.5% slow until the next probe and the history's slowdown 0.31 points under the truth."""
    scenario = drawn(12012, "quiet")
    assert scenario.disturbances == [] and flag(scenario, "--noise") == ["0.0135"], scenario.label
    outcome, events = judged_events(scenario)
    assert "stepped up" not in events, events
    assert outcome.passes() == [] and outcome.history_slowdown_error <= 0.0025, outcome


def test_a_plan_calibrated_anew_judges_a_round_against_the_few_rounds_it_has_by_their_mean_s_own_noise(drawn):
    """Instance 12033 of the quiet class (GPipe, 2 stages, 2 microbatches, noise 0.0182): nothing changes. A plan
    calibrated anew on a probe compared each next round with the mean of the rounds since by one round's noise, where
    its difference from a mean of one or two rounds varies by up to 1.4 times that: the calibration ended on a
    round or two, its conditions read off, the saving plan was condemned three times and the run kept 56% of the
    ideal."""
    scenario = drawn(12033, "quiet")
    assert scenario.disturbances == [] and scenario.schedule == "gpipe", scenario.label
    outcome, events = judged_events(scenario)
    assert "stepped up" not in events, events
    assert outcome.passes() == [], outcome


def test_a_step_of_drift_within_profilings_band_that_two_checks_measured_starts_the_plans_at_its_conditions(drawn):
    """Instance 12034 of the drift+from-start class (1F1B, 2 stages, 2 microbatches, noise 0.0146; pipeline 1
    1.23x slow from the start, the cluster 1% slower every 186 iterations from 225): profiling's last two check
    rounds measured the cluster 0.78% and 0.85% slower, within profiling's 1% band, and the plans started at the
    baseline's conditions. Pipeline 0's, paced to pipeline 1 and running nothing at the top clock, took the step as
    its error: the history's saving 0.42 points off the truth."""
    scenario = drawn(12034, "drift+from-start")
    assert "all:1.01@225" in flag(scenario, "--straggler") and "1:1.228@1-648" in flag(scenario, "--straggler")
    outcome, events = judged_events(scenario)
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.0035, outcome


def test_a_baseline_left_few_rounds_by_a_late_step_gains_profilings_check_rounds(drawn):
    """Instance 12033 of the permanent class (GPipe, 2 stages, 2 microbatches, noise 0.0182): pipeline 0 runs 1.23x
    slow for good from iteration 186, in the warm-up's last rounds. The baseline was the 3 rounds after that step,
    1% wide, and a plan 0.7% slower than all-max ran under it to the end, never judged too slow. Profiling's
    all-max check rounds that agree with such a baseline join it: the plan is stepped up."""
    scenario = drawn(12033, "permanent")
    assert flag(scenario, "--straggler") == ["0:1.228@186"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    baseline = next(d["detail"] for d in decisions if d["event"] == "baseline")
    assert "over 3 rounds" in baseline and "after a step in time" in baseline, baseline
    slow = next(d["detail"] for d in decisions if d["event"] == "slow pipeline in the baseline")
    assert "from warm-up round 35 on (after a step in time)" in slow, slow
    assert any(d["event"] == "stepped up" for d in decisions), decisions
    assert outcome.true_slowdown <= 0.006, outcome


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "zbv"])
def test_the_ideal_on_gpus_of_different_speeds_plans_each_pipeline_on_its_own_gpus(drawn, schedule):
    """Under a GPU speed spread the ideal is planned on each pipeline's profile as its GPUs run it, the slowest
    pipeline's all-max time the iteration's: each scaled profile's all-max time is what simulate's pipeline takes
    at all-max on those GPUs (the model stages mapped to the GPUs that run them, interleaved and V-shaped too), and
    on GPUs all alike the ideal is whatif's own."""
    scenario = drawn(4, "spread", schedule)
    spread = flag(scenario, "--gpu-speed-spread")
    assert spread, scenario.simulate_args
    quiet = dataclasses.replace(scenario, iterations=10,
                                simulate_args=["--seed", flag(scenario, "--seed")[0], "--gpu-speed-spread", spread[0]])
    reports, _, _, speeds = turnkey_truth.run_simulation(BINARY, quiet, "AllMaxFrequency")
    assert len(speeds) == quiet.pipelines and all(len(s) == quiet.stages for s in speeds), speeds
    unit_time = 1e-3
    for d, per_stage in enumerate(speeds):
        path = os.path.join(os.path.dirname(scenario.profile), f"pipeline-{d}.csv")
        whatif_saving.scaled_profile(scenario.profile, [ranks[0] for ranks in per_stage], scenario.schedule, path)
        top = whatif_saving.whatif_rows(BINARY, path, scenario.shape(), scenario.p_block, unit_time, 1.0)["all-max"]
        simulated = reports[-1]["pipelines"][d]["compute_time"]
        assert abs(top[0] / simulated - 1) < 1e-7, (d, top, simulated)  # whatif writes 9 digits
    alike = [[[1.0]] * quiet.stages] * quiet.pipelines
    plain = whatif_saving.whatif_saving(BINARY, scenario.profile, scenario.shape(), scenario.p_block, unit_time)
    on_gpus = whatif_saving.whatif_saving_on_gpus(BINARY, scenario.profile, scenario.shape(), scenario.schedule,
                                                  scenario.p_block, unit_time, alike)
    assert abs(on_gpus - plain) < 1e-4, (on_gpus, plain)  # whatif prints its saving to 0.01%
    spread_ideal = whatif_saving.whatif_saving_on_gpus(BINARY, scenario.profile, scenario.shape(), scenario.schedule,
                                                       scenario.p_block, unit_time, speeds)
    assert abs(spread_ideal - plain) > 1e-4, "GPUs of different speeds have another ideal"


def test_a_straggler_over_the_whole_judged_window_is_in_the_ideal_and_one_over_part_of_it_is_not(drawn):
    """A straggler active over every judged iteration is how the cluster ran there: the ideal plans the slowed
    pipeline on its slower GPUs and gives the others its slack (more to save than the undisturbed cluster has);
    one that ends or begins within the window leaves the undisturbed ideal."""
    scenario = dataclasses.replace(drawn(6, "quiet", "1f1b"), pipelines=3, simulate_args=[
        "--straggler", "1:1.1@1", "--straggler", "all:1.01@145", "--straggler", "0:1.2@100-600",
        "--straggler", "2:1.3@1-1000", "--straggler", "2:1.5@900"])
    assert turnkey_truth.window_slowdowns(scenario, 501, 1000) == pytest.approx([1.01, 1.111, 1.313])
    assert turnkey_truth.window_slowdowns(scenario, 101, 600) == pytest.approx([1.2, 1.1, 1.3])
    unit_time = 1e-3
    undisturbed = turnkey_truth.ideal_saving(BINARY, scenario, unit_time)
    slowed = turnkey_truth.ideal_saving(BINARY, scenario, unit_time, slowdowns=[1.0, 1.1, 1.0])
    assert slowed == pytest.approx(whatif_saving.whatif_saving_on_gpus(
        BINARY, scenario.profile, scenario.shape(), scenario.schedule, scenario.p_block, unit_time,
        [[[1.0]] * scenario.stages, [[1.1]] * scenario.stages, [[1.0]] * scenario.stages]))
    assert slowed > undisturbed + 0.01, (slowed, undisturbed)
    assert turnkey_truth.ideal_saving(BINARY, scenario, unit_time, slowdowns=[1.0, 1.0, 1.0]) == undisturbed


def test_a_pipeline_recovering_beside_a_followed_straggler_reads_its_conditions_back_at_the_cluster(drawn):
    """Instance 19001 of `two-stragglers` (1F1B, 2 stages, 3 microbatches, GPT-3 on A40, noise 0.0171): pipeline 1
    runs 1.086x slow from iteration 322 on, followed as a straggler, and pipeline 0 1.063x from 499 to 554, taken in
    as its change of pace. Its plan, changed in the round it recovered, was calibrated on that round as if nothing
    had changed; the recovery, weighed against the other pipeline's conditions (the straggler's, 1.085x), read as
    already held in that calibration, so pipeline 0's conditions stayed 4% slow for 30 rounds and the reference's
    energy with them: the saving reported 0.7 points over the truth. The cluster beside a pipeline is the
    pipelines that follow no straggler, or the straggler over its slowdown."""
    scenario = drawn(19001, "two-stragglers")
    assert flag(scenario, "--straggler") == ["1:1.086@322", "0:1.063@499-554"], scenario.simulate_args
    outcome, events = judged_events(scenario)
    assert "slow pipeline recovered" in events, events
    assert outcome.passes() == [] and outcome.history_saving_error <= 0.005, outcome


def test_a_pipeline_paced_to_a_slower_one_takes_the_slack_a_tenth_of_a_percent_buys(drawn):
    """Instance 19001 of `mild-straggler` (1F1B, 2 stages, 3 microbatches, GPT-3 on A40, noise 0.0171): pipeline 0
    runs 1.028x slow from iteration 475 on, less than a straggler, and the other pipeline is paced to it. Held to
    make the iteration end no later than at all-max, its plan kept two or three spreads of the noise clear of the
    pace setter's (it computed in 1.578 s where the pace setter took 1.609 s): 76% of the ideal. A plan that ends
    the iteration up to 0.1% later is taken where it saves five times the share of time it adds."""
    scenario = drawn(19001, "mild-straggler")
    assert flag(scenario, "--straggler") == ["0:1.028@475"], scenario.simulate_args
    outcome, decisions = judged(scenario, as_ran=True)  # the ideal on the GPUs as they ran: pipeline 0 slow
    assert not any(d["event"] == "straggler detected" for d in decisions), decisions
    assert outcome.passes() == [] and outcome.share >= 0.85, outcome


def test_a_pipeline_paced_to_another_that_ends_the_iteration_is_paced_earlier(drawn):
    """Instance 21010 of `from-start` (1F1B, 2 stages, 3 microbatches, noise 0.0134): pipeline 1 runs 1.106x slow
    from the first iteration to 714, part of the baseline, and recovers; measured over a few rounds at 0.996x the
    other's time, it was paced to pipeline 0 as if 0.4% faster, and it, not the target plan, ended every iteration
    0.3-0.8% after pipeline 0. Stepping the target plan up moved nothing (0.48% slower than all-max over the judged
    window); the paced pipeline is paced earlier by how much longer it computed instead."""
    scenario = drawn(21010, "from-start")
    assert flag(scenario, "--straggler") == ["1:1.106@1-714"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["event"] == "slow pipeline recovered" for d in decisions), decisions
    assert any("the pipelines paced to others computed" in d["detail"] for d in decisions), decisions
    assert any(d["event"] == "paced earlier" for d in decisions), decisions
    assert outcome.passes() == [] and outcome.true_slowdown <= 0.003, outcome


def test_a_straggler_whose_own_plan_runs_slow_gives_up_its_allowance(drawn):
    """Instance 19001 of `permanent` (1F1B, 2 stages, 3 microbatches, GPT-3 on A40, noise 0.0171): pipeline 0 runs
    1.122x slow from iteration 545 to the end, followed as a straggler. Its own plan, chosen on its GPUs with the
    allowance a plan may take (0.15%), ran 0.45-0.55% slower than it at all-max, 0.7% after the other pipeline: the
    target plan's step-ups moved it one frontier point, and each retry after rounds brought it back (0.51% slower
    than all-max over the run). Condemned while it computes longest, it is chosen again without the allowance until
    the straggler changes, retries or not."""
    scenario = drawn(19001, "permanent")
    assert flag(scenario, "--straggler") == ["0:1.122@545"], scenario.simulate_args
    outcome, decisions = judged(scenario)
    assert any(d["detail"].startswith("the followed straggler's own plan measured") for d in decisions), decisions
    assert outcome.passes() == [] and outcome.true_slowdown <= 0.0047, outcome
