"""Attach a :class:`perseus.Client` to a training framework's pipeline engine.

- :mod:`perseus.integrations.deepspeed`: ``attach(engine, client)`` for DeepSpeed's
  ``PipelineEngine``.
- :mod:`perseus.integrations.megatron`: ``attach(client)`` for Megatron-LM's pipeline schedules.

Neither imports its framework: they wrap the methods and functions by name, so they stay thin
and are tested against stand-ins with the same names and call order.
"""
