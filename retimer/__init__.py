"""retimer: re-time real LLM token streams to a target speed profile, through mitmproxy."""

__version__ = "0.2.0"
