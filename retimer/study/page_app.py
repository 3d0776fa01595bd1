"""The hosted study page's HTML. Pure: strings only.

The page loads its script and style from `/study/` itself (retimer/study/page_assets, with
marked and highlight.js from the demo's assets): no CDN, and a Content-Security-Policy with no
inline script. It knows nothing of conditions: it asks the server for the participant's
progress (`api/state`), sends a message (`api/chat`, answered by the real model's stream through
retimer's pacing), renders the reply as it arrives, asks the study's scales, and moves on
(`api/next`) until the completion code. Everything it shows comes back from the server on a
reload, so a reload or a dropped connection loses nothing.
"""

from __future__ import annotations

import html

__all__ = ["ASSETS", "admin_page", "app_page", "message_page"]

# what /study/NAME serves: (file, content type); the files are read by the shell
ASSETS = {
    "app.js": ("study/page_assets/app.js", "text/javascript; charset=utf-8"),
    "app.css": ("study/page_assets/app.css", "text/css; charset=utf-8"),
    "marked.js": ("cli/demo/assets/marked.umd.js", "text/javascript; charset=utf-8"),
    "highlight.js": ("cli/demo/assets/highlight.min.js", "text/javascript; charset=utf-8"),
    "highlight.css": ("cli/demo/assets/github.min.css", "text/css; charset=utf-8"),
}


def _head(title: str) -> str:
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width,initial-scale=1">'
            f'<title>{html.escape(title)}</title><link rel="stylesheet" href="app.css">'
            '<link rel="stylesheet" href="highlight.css"></head><body>')


def app_page(title: str) -> str:
    """The study page: everything else comes from `api/state`."""
    return (
        f'{_head(title)}<header><h1 id="title">{html.escape(title)}</h1></header>'
        '<main id="main"></main>'
        '<footer id="foot" hidden><div id="status" role="status"></div>'
        '<form id="f"><textarea id="text" rows="2" maxlength="4000" '
        'placeholder="Write a message..." aria-label="Message"></textarea>'
        '<button type="submit" id="send">Send</button>'
        '<button type="button" class="alt" id="next" hidden>Next task</button></form></footer>'
        '<script src="marked.js"></script><script src="highlight.js"></script>'
        '<script src="app.js"></script></body></html>'
    )


def message_page(title: str, message: str) -> str:
    """A page of one sentence (a link without a participant, an id that is not valid)."""
    return (f'{_head(title)}<header><h1>{html.escape(title)}</h1></header><main>'
            f'<div class="consent"><p>{html.escape(message)}</p></div></main></body></html>')


def admin_page(study: str, lines: list[str]) -> str:
    """The experimenter's view: retimer.study.status's lines (it names the conditions)."""
    body = html.escape("\n".join(lines))
    return (f'{_head(f"{study}: status")}<header><h1>Study {html.escape(study)}: status</h1>'
            f'</header><main><pre class="status">{body}</pre></main></body></html>')
