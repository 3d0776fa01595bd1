"""`retimer report`: a self-contained HTML page (and optional PNGs) from a record log."""
