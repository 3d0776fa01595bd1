"""Session cassettes: a session's LLM calls recorded once, replayed at any speed (issue 40).
`shape` and `match` are pure (the record and replay shells come with the proxy)."""
