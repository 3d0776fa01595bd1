"""retimer's addons as a mitmproxy addon script, from the installed package.

`mitmdump -s "$(retimer addon)"` (and mitmproxy, mitmweb) load this file by path; so does
mitmproxy-addon-launcher, which finds it through the `mitmproxy_addon_launcher.addon_script`
entry point. It loads the addons the `retimer` command loads (retimer.proxy.addons); unlike
that command it leaves `allow_hosts` as you set it. The addons are built only when mitmproxy
loads the file as a script: the launcher imports this module once just to learn its path.
"""

from __future__ import annotations

import os
import sys

# mitmproxy puts a script's folder first on sys.path: this package's folder there would make
# retimer's subpackages top-level names (`profile` would hide the standard library's).
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

if __name__.startswith("__mitmproxy_script__."):  # loaded by mitmproxy as a script
    from retimer.proxy.addons import retimer_addons

    addons = retimer_addons()
