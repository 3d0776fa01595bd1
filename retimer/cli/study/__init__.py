"""`retimer study` and `retimer study analyze`."""
