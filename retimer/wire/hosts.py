"""Which hosts get TLS interception: the LLM services, and nothing else by default.

Everything not listed is tunnelled untouched (mitmproxy `allow_hosts`), so banking sites and
certificate-pinned apps keep working and nothing else is slowed. Plain-HTTP requests are seen
whatever their host, which is how self-hosted OpenAI-compatible servers get re-timed.
"""

from __future__ import annotations

import re

LLM_HOSTS: tuple[str, ...] = (
    # first-party APIs
    "api.openai.com",
    "api.anthropic.com",
    "generativelanguage.googleapis.com",
    "aiplatform.googleapis.com",  # Vertex AI, with regional prefixes
    "openai.azure.com",  # Azure OpenAI resources: <name>.openai.azure.com
    "services.ai.azure.com",
    # OpenAI-compatible providers
    "openrouter.ai",
    "api.groq.com",
    "api.cerebras.ai",
    "api.sambanova.ai",
    "api.together.xyz",
    "api.together.ai",
    "api.fireworks.ai",
    "api.deepseek.com",
    "api.mistral.ai",
    "api.x.ai",
    "api.perplexity.ai",
    "api.moonshot.ai",
    "api.z.ai",
    "api.cohere.com",
    "api.cohere.ai",
    "router.huggingface.co",
    "api-inference.huggingface.co",
    "api.hyperbolic.xyz",
    "api.deepinfra.com",
    "api.novita.ai",
    "dashscope.aliyuncs.com",
    "dashscope-intl.aliyuncs.com",
    # chat web apps
    "chatgpt.com",
    "chat.openai.com",
    "claude.ai",
    "gemini.google.com",
    "chat.deepseek.com",
    "chat.mistral.ai",
    "chat.z.ai",
    "grok.com",
    "www.doubao.com",
    "copilot.microsoft.com",
    # IDE and CLI agents
    "api.githubcopilot.com",
    "api.individual.githubcopilot.com",
    "api.business.githubcopilot.com",
    "api2.cursor.sh",
    "api.cursor.sh",
    "api.codeium.com",
    "server.codeium.com",
    "portal.qwen.ai",  # Qwen Code signed in with Qwen OAuth (OpenAI-compatible)
    # JetBrains AI Assistant and Junie: SSE of {"type": "Content", "content": ...} events on
    # /user/v5/llm/chat/stream/vN (paced by the generic adapter), and vendor-native passthroughs
    "api.jetbrains.ai",
    "api.app.prod.grazie.aws.intellij.net",
    "ingrazzio-cloud-prod.labs.jb.gg",
)

# hosts whose model output travels beside their other traffic (sign-in, accounts, analytics):
# intercepted like the LLM hosts, but only requests an adapter knows (by path and body, such as
# .../chat/completions) are re-timed; their other JSON answers are never held
MIXED_HOSTS: tuple[str, ...] = (
    "api.cline.bot",  # Cline's own provider (OpenAI-compatible, .../api/v1)
    "api.kilo.ai",  # Kilo Code's gateway (OpenRouter-compatible, /api/openrouter, /api/gateway)
    "api.continue.dev",  # Continue's hub models (OpenAI-compatible, /model-proxy/v1)
    "chat.qwen.ai",  # Qwen's web chat and its OAuth sign-in
    # Cursor's agent backends (agent.api5, agentn.api5 and regional ones; api4): Connect-RPC
    # streams. Not all of *.cursor.sh: Cursor asks that its sign-in hosts keep their certificate
    "api5.cursor.sh",
    "api4.cursor.sh",
    "inference.codeium.com",  # Windsurf (Codeium): Connect-RPC from its language server
    "server.self-serve.windsurf.com",
)


# hosts whose region sits inside the name: bedrock-runtime.us-east-1.amazonaws.com,
# bedrock-runtime-fips.us-west-2.amazonaws.com, us-central1-aiplatform.googleapis.com
LLM_HOST_PATTERNS: tuple[str, ...] = (
    r"bedrock-runtime(?:-fips)?\.[a-z0-9-]+\.amazonaws\.com",
    r"[a-z0-9-]+-aiplatform\.googleapis\.com",
)
_LLM_HOST_RE = re.compile("|".join(f"(?:{p})" for p in LLM_HOST_PATTERNS))


def host_pattern(host: str) -> str:
    """A regex for `allow_hosts` matching the host and its subdomains, on any port."""
    return rf"^(?:[^:]+\.)?{re.escape(host)}:\d+$"


def allow_hosts(extra: list[str]) -> list[str]:
    """mitmproxy `allow_hosts` value: the default LLM and mixed hosts plus user regexes, as given."""
    return (
        [host_pattern(h) for h in (*LLM_HOSTS, *MIXED_HOSTS)]
        + [rf"^{p}:\d+$" for p in LLM_HOST_PATTERNS]
        + list(extra)
    )


def is_llm_host(host: str) -> bool:
    host = host.lower().rstrip(".")
    return any(host == h or host.endswith("." + h) for h in LLM_HOSTS) or bool(
        _LLM_HOST_RE.fullmatch(host)
    )
