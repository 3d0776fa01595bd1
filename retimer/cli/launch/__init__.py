"""The launchers: `retimer run` and `retimer browser`."""
