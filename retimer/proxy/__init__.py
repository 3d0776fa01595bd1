"""The mitmproxy shell: the addons and the hooks between them, the pacing bridge (the only code
that touches mitmproxy's internals), WebSocket pacing, bounds and faults, access control, PAC,
reverse mode and the CA."""
