"""The proxy's start: options, the banner, trust, workers, the live view."""
