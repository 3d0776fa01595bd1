"""The record log: one JSON line per re-timed stream (the writer) and reading logs back."""
