"""The GPU this example trains on: perseus's fake NVML (libperseus_fake_nvml.so, no GPU needed),
told by a model of a GPU how long each computation takes and how much energy it uses at the SM
clock it is locked to.

A CPU computes as fast whatever clock the fake GPU is locked to, so the model supplies what a GPU
would do: each stage's forward and backward take `instruction_time(stage, kind, clock)` (the
real computation, then sleeps for the rest of that time, progressing at the rate of the clock the
GPU runs at) and draw `busy_power(clock)`; waiting for another stage draws BLOCK_POWER_W. The fake NVML's energy counter is what perseus measures: it
runs at BLOCK_POWER_W all the time (PERSEUS_FAKE_NVML_POWER_W, which run.sh sets) and each
computation adds the rest of its energy (perseusFakeNvmlAddEnergy), by the model, whatever the
CPU's lateness. Timing noise is the operating system's: the real computation, the sleeps, the
processes' communication.
"""
from __future__ import annotations

import ctypes
import functools
import time
from typing import Any, Callable

TOP_CLOCK = 1410  # MHz, the fake GPU's top SM clock (as an A100's)
BLOCK_POWER_W = 75.0  # while blocked on another stage (measured: 83.64 W on A100, 70.38 W on A40)
# Per stage, (forward, backward) at the top clock in seconds: uneven, as real pipelines are (the
# last stage carries the output layer and the loss), so the other stages have time to spare.
STAGE_TIMES = [(0.018, 0.036), (0.022, 0.044), (0.014, 0.028), (0.030, 0.060)]
MEMORY_BOUND = 0.3  # the share of an instruction's time that does not scale with the clock
SLICE_S = 0.002  # how often a computation looks at the clock again


def instruction_time(stage: int, kind: str, clock: int, scale: float = 1.0) -> float:
    """Seconds a forward or backward of `stage` takes at `clock` MHz."""
    top = STAGE_TIMES[stage][0 if kind == "forward" else 1] * scale
    return top * ((1 - MEMORY_BOUND) * TOP_CLOCK / clock + MEMORY_BOUND)


def busy_power(clock: int) -> float:
    """Watts while computing at `clock` MHz: static power plus a dynamic part (300 W at the top)."""
    return 110.0 + 190.0 * (clock / TOP_CLOCK) ** 3


class SimulatedGpu:
    """GPU 0 of the fake NVML at `library` (the library perseus's client loaded: one per process)."""

    def __init__(self, library: str, stage: int, scale: float = 1.0) -> None:
        self._nvml = ctypes.CDLL(library)
        self._nvml.perseusFakeNvmlAddEnergy.argtypes = [ctypes.c_uint, ctypes.c_double]
        if self._nvml.nvmlInit_v2() != 0:
            raise RuntimeError(f"{library}: nvmlInit failed")
        self._device = ctypes.c_void_p()
        if self._nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self._device)) != 0:
            raise RuntimeError(f"{library}: no GPU 0")
        self.stage, self.scale = stage, scale

    def clock(self) -> int:
        """The SM clock the GPU runs at now (MHz)."""
        clock = ctypes.c_uint()
        self._nvml.nvmlDeviceGetClockInfo(self._device, 0, ctypes.byref(clock))  # NVML_CLOCK_GRAPHICS
        return clock.value

    def energy_j(self) -> float:
        """The GPU's energy counter (J)."""
        millijoules = ctypes.c_ulonglong()
        self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._device, ctypes.byref(millijoules))
        return millijoules.value / 1000.0

    def compute(self, kind: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Runs `function` as a `kind` of this stage on the GPU: the real computation, then the
        rest of the instruction at the rate the GPU's clock gives it, read every few milliseconds
        (a clock that perseus locks while it runs takes effect from then on, as on a GPU). The
        energy above the blocking power goes onto the counter by progress: each share of the
        instruction costs that share of its time at the clock it ran at, times the power above
        blocking. A CPU that is late (a slow real computation, a sleep that overruns) stretches
        the wall time, which the counter meters at the blocking power, as a GPU waiting would,
        but never the computation's energy."""
        began = time.perf_counter()
        result = function(*args, **kwargs)
        now = time.perf_counter()
        clock = self.clock()
        duration = instruction_time(self.stage, kind, clock, self.scale)
        done = min((now - began) / duration, 1.0)  # the real computation's share
        joules = (busy_power(clock) - BLOCK_POWER_W) * duration * done
        while done < 1:
            clock = self.clock()
            duration = instruction_time(self.stage, kind, clock, self.scale)
            time.sleep(min((1 - done) * duration, SLICE_S))
            slept = time.perf_counter()
            share = min((slept - now) / duration, 1 - done)
            now, done = slept, done + share
            joules += (busy_power(clock) - BLOCK_POWER_W) * duration * share
        self._nvml.perseusFakeNvmlAddEnergy(0, joules)
        return result

    def attach(self, pipeline_stage: Any) -> None:
        """Every forward and backward of a `torch.distributed.pipelining` stage runs on this GPU
        (attached before perseus's hooks, so that perseus measures the whole of each)."""
        for method, kind in (("forward_one_chunk", "forward"), ("backward_one_chunk", "backward")):
            setattr(pipeline_stage, method, self._on_gpu(kind, getattr(pipeline_stage, method)))

    def _on_gpu(self, kind: str, original: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(original)  # (perseus reads the method's arguments through __wrapped__)
        def on_gpu(*args: Any, **kwargs: Any) -> Any:
            return self.compute(kind, original, *args, **kwargs)

        return on_gpu
