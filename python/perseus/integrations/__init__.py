"""Attach a :class:`perseus.Client` to a training framework's pipeline engine.

- :mod:`perseus.integrations.deepspeed`: ``attach(engine, client)`` for DeepSpeed's
  ``PipelineEngine``.
- :mod:`perseus.integrations.megatron`: ``attach(client)`` for Megatron-LM's pipeline schedules.
- :mod:`perseus.integrations.torchtitan`: ``enable(**client_options)`` (or torchtitan's override
  ``perseus.integrations.torchtitan.perseus``) for the pipeline schedules torchtitan builds.

The DeepSpeed and Megatron-LM ones wrap the methods and functions by name and import neither
framework; all are tested on the frameworks themselves.
"""
