"""Entry file for `mitmdump -s addons/retimer.py --set retimer_profile=groq` (and mitmweb).

It needs the retimer package importable in mitmproxy's Python (pip install -e . in the same
environment). Unlike the `retimer` command it leaves `allow_hosts` as you set it.
"""

from retimer.addon import Retimer

addons = [Retimer()]
