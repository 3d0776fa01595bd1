"""`retimer demo`: its server, its sources and its page's assets."""
