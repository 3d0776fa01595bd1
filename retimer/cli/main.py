"""`retimer`: run the re-timing proxy, or dispatch to a subcommand. Bad input gets one line,
never a traceback. Nothing imports this module but the entry point: the subcommands share the
proxy's options through retimer.cli.proxy_options and retimer.cli.proxy_runner."""

from __future__ import annotations

import argparse
import asyncio
import sys

from retimer.cli.cmdline import OneLineParser, fail, unknown_command
from retimer.cli.proxy_options import ProxyConfig, proxy_parser


def profiles_parser() -> argparse.ArgumentParser:
    """`retimer profiles [NAME ...]`: so --help helps and a flag is not taken for a name."""
    p = OneLineParser(prog="retimer profiles",
                      description="The built-in profiles as a table, or the named ones in full.")
    p.add_argument("names", nargs="*", metavar="NAME",
                   help="a profile name, alias or YAML file to show in full")
    return p


def addon_parser() -> argparse.ArgumentParser:
    """`retimer addon`: where the addon script is, for mitmproxy's own tools."""
    return OneLineParser(prog="retimer addon",
                         description="Print the path of retimer's mitmproxy addon script, for "
                         '`mitmdump -s "$(retimer addon)" --set retimer_profile=groq` (and '
                         "mitmproxy, mitmweb) run from the same Python environment.")


def print_addon_path(_: argparse.Namespace) -> None:
    from retimer import addon_script

    print(addon_script.__file__)


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "profiles":
        from retimer.cli.profiles_cmd import print_profiles

        print_profiles(profiles_parser().parse_args(argv[1:]).names)
        return
    if argv and argv[0] in ("run", "env", "ca"):
        from retimer.cli import launch

        launch.main(argv[0], argv[1:])
        return
    if argv and argv[0] == "browser":
        from retimer.cli import browser_cmd

        browser_cmd.main(argv[1:])
        return
    if argv and argv[0] == "study":
        from retimer.cli import study_cmd

        study_cmd.main(argv[1:])
        return
    if argv and argv[0] == "demo":
        from retimer.cli import demo_cmd

        demo_cmd.main(argv[1:])
        return
    if argv and argv[0] == "export":
        from retimer.cli import export

        export.main(argv[1:])
        return
    if argv and argv[0] == "whatif":
        from retimer.cli import whatif_cmd

        whatif_cmd.main(argv[1:])
        return
    if argv and argv[0] == "addon":
        print_addon_path(addon_parser().parse_args(argv[1:]))
        return
    if argv and argv[0] in ("fit", "report"):
        from retimer.cli import fit_cmd, report_cmd

        (fit_cmd if argv[0] == "fit" else report_cmd).main(argv[1:])
        return
    if argv and not argv[0].startswith("-"):  # no subcommand, and the proxy takes no words
        fail(unknown_command(argv[0]))
    config = ProxyConfig.from_args(proxy_parser().parse_args(argv))
    if config.workers > 1:
        from retimer.cli.workers import run_workers

        raise SystemExit(asyncio.run(run_workers(config)))
    from retimer.cli.proxy_runner import run_proxy

    try:
        asyncio.run(run_proxy(config))
    except KeyboardInterrupt:
        pass
