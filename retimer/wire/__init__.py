"""The wire, sans-io: framing (SSE, NDJSON, AWS event stream), content encodings, the tokenizer,
what a request asks for, and one adapter per LLM wire format. Bytes in, events out; no I/O."""
