"""The fake LLM API (fakeapi) and the mitmproxy script that points real hosts at it."""
