"""Entry file for `mitmdump -s addons/retimer.py --set retimer_profile=groq` (and mitmweb).

It uses the retimer package installed in mitmproxy's Python, or else the checkout this file
sits in (numpy, pyyaml and rich must be importable). It loads the addons the `retimer` command
loads (retimer.proxy.addons); unlike that command it leaves `allow_hosts` as you set it:
mitmproxy then intercepts TLS for every host.
"""

import os
import sys

# mitmproxy puts this folder first on sys.path, where `import retimer` would find this file
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
if getattr(sys.modules.get("retimer"), "__path__", None) is None:
    sys.modules.pop("retimer", None)
try:
    import retimer  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.dirname(_here))

from retimer.proxy.addons import retimer_addons  # noqa: E402

addons = retimer_addons()
