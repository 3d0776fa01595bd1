"""`retimer`: run the re-timing proxy, or dispatch to a subcommand. Bad input gets one line,
never a traceback. Nothing imports this module but the entry point: the subcommands share the
proxy's options through retimer.cli.proxy.options and retimer.cli.proxy.runner."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable

from retimer.cli.cmdline import OneLineParser, fail, unknown_command
from retimer.cli.proxy.options import ProxyConfig, proxy_parser


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


def _profiles(_: str, argv: list[str]) -> None:
    from retimer.cli.records.profiles import print_profiles

    print_profiles(profiles_parser().parse_args(argv).names)


def _launch(command: str, argv: list[str]) -> None:
    from retimer.cli.launch import run as launch

    launch.main(command, argv)


def _browser(_: str, argv: list[str]) -> None:
    from retimer.cli.launch import browser_cmd

    browser_cmd.main(argv)


def _study(_: str, argv: list[str]) -> None:
    from retimer.cli.study import command as study_cmd

    study_cmd.main(argv)


def _demo(_: str, argv: list[str]) -> None:
    from retimer.cli.demo import command as demo_cmd

    demo_cmd.main(argv)


def _export(_: str, argv: list[str]) -> None:
    from retimer.cli.records import export

    export.main(argv)


def _whatif(_: str, argv: list[str]) -> None:
    from retimer.cli.records import whatif as whatif_cmd

    whatif_cmd.main(argv)


def _addon(_: str, argv: list[str]) -> None:
    print_addon_path(addon_parser().parse_args(argv))


def _fit(_: str, argv: list[str]) -> None:
    from retimer.cli.records import fit as fit_cmd

    fit_cmd.main(argv)


def _cassette(_: str, argv: list[str]) -> None:
    from retimer.cli.records import cassette

    cassette.main(argv)


def _report(_: str, argv: list[str]) -> None:
    from retimer.cli.records import report as report_cmd

    report_cmd.main(argv)


# every subcommand, by the word that names it (each imports its module when it runs: `retimer`
# alone starts the proxy without loading the others); cmdline.COMMANDS lists the same words
SUBCOMMANDS: dict[str, Callable[[str, list[str]], None]] = {
    "browser": _browser, "run": _launch, "env": _launch, "ca": _launch, "study": _study,
    "demo": _demo, "export": _export, "fit": _fit, "report": _report, "profiles": _profiles,
    "whatif": _whatif, "addon": _addon, "cassette": _cassette,
}


def main(argv: list[str] | None = None) -> None:
    try:
        _main(argv)
    except BrokenPipeError:  # `retimer export LOG | head`: the reader had enough
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error as Python flushes stdout
        sys.exit(1)


def _main(argv: list[str] | None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and (command := SUBCOMMANDS.get(argv[0])) is not None:
        command(argv[0], argv[1:])
        return
    if argv and not argv[0].startswith("-"):  # no subcommand, and the proxy takes no words
        fail(unknown_command(argv[0]))
    config = ProxyConfig.from_args(proxy_parser().parse_args(argv))
    if config.workers > 1:
        from retimer.cli.proxy.workers import run_workers

        raise SystemExit(asyncio.run(run_workers(config)))
    from retimer.cli.proxy.runner import run_proxy

    try:
        asyncio.run(run_proxy(config))
    except KeyboardInterrupt:
        pass
