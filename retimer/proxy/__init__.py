"""The mitmproxy shell: the addons, the pacing bridge (the only module that touches mitmproxy's
internals), WebSocket pacing, bounds and faults, access control, PAC, reverse mode and the CA."""
