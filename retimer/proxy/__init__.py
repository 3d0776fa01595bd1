"""The mitmproxy shell: the addons and the hooks between them, the pacing bridge (`bridge`) and
mitmproxy's other patches (`patches`), the only two packages on mitmproxy's internals, bounds
and faults, access control, PAC, reverse mode and the CA."""
