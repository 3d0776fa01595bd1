"""The timing model, sans-io: distributions, the per-stream model (prefill, context, reasoning,
stalls), the token clock, slow-upstream strategies, the pacer and per-stream metrics. No I/O."""
