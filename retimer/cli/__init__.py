"""The `retimer` command: argparse subcommands, the live view, and the launchers (`retimer run`,
`retimer env`, `retimer browser`)."""
