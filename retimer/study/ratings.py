"""The rating page: one self-contained HTML page, its form and the rating record. Pure: no I/O.

Why a page served by the proxy: a participant rates the response they just saw without
leaving their tool, in one click per scale, and the rating lands in the records next to the
stream. The page names the response by when it finished and its host only: nothing on it
says which condition the participant is in. No external assets, so it works offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from urllib.parse import parse_qsl

from retimer.records.schema import Rating

__all__ = ["PATH", "SCALES", "RatingError", "parse_rating", "rating_page", "rating_record", "score_of"]

PATH = "/rate"
SCALES = {"speed": ("very slow", "very fast"), "quality": ("very poor", "excellent")}
LOW, HIGH = 1, 7
STUDY_FIELDS = ("study", "participant", "condition", "unit")


class RatingError(ValueError):
    """A rating that cannot be recorded; str() is one line for the participant."""


def parse_rating(body: bytes, content_type: str) -> tuple[str, dict[str, int | bool | None]]:
    """(stream id, {"speed": 1-7 or None, "quality": ..., "slow": True/False if answered}) from a
    form or JSON body."""
    fields: Mapping[str, object]
    if "json" in content_type.lower():
        try:
            obj = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            raise RatingError("the rating is not valid JSON") from None
        if not isinstance(obj, dict):
            raise RatingError("the rating is not a JSON object")
        fields = obj
    else:
        try:
            fields = dict(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise RatingError("the rating is not UTF-8 form data") from None
    stream = fields.get("stream")
    if not isinstance(stream, str) or not stream:
        raise RatingError("no response named: reload the page")
    scores: dict[str, int | bool | None] = {}
    slow = fields.get("slow")
    if slow not in (None, ""):
        answers = {"yes": True, "no": False, True: True, False: False}
        if not isinstance(slow, str | bool) or slow not in answers:
            raise RatingError("slow: expected yes or no")
        scores["slow"] = answers[slow]
    for name in SCALES:
        scores[name] = score_of(name, fields.get(name))
    if all(v is None for v in scores.values()):
        raise RatingError("choose a number on at least one scale")
    return stream, scores


def score_of(name: str, value: object, *, strict: bool = False) -> int | None:
    """One scale's answer, LOW-HIGH: from a form (text; blank is None), or with `strict` from
    the study page's JSON (a whole number, required). One rule for both rating pages."""
    if strict:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RatingError(f"{name}: expected a whole number {LOW}-{HIGH}")
    elif value is None or value == "":
        return None
    try:
        score = int(str(value))
    except ValueError:
        raise RatingError(f"{name}: expected a whole number {LOW}-{HIGH}") from None
    if not LOW <= score <= HIGH:
        raise RatingError(f"{name}: expected {LOW}-{HIGH}, got {score}")
    return score


def rating_record(stream: Mapping[str, object], scores: Mapping[str, int | bool | None],
                  time_iso: str) -> Rating:
    """The rating of `stream` (its rateable entry: id, index and study fields)."""
    def text(key: str) -> str | None:
        return value if isinstance(value := stream.get(key), str) else None

    def count(key: str) -> int | None:
        value = stream.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    slow = scores.get("slow")
    return Rating(
        stream=str(stream["id"]), time=time_iso,
        scores={name: v if isinstance(v := scores.get(name), int) and not isinstance(v, bool)
                else None for name in SCALES},
        slow=slow if isinstance(slow, bool) else None, stream_index=count("stream"),
        study=text("study"), participant=text("participant"), condition=text("condition"),
        unit=count("unit"),
    )


def latest_json(latest: Mapping[str, object] | None) -> str:
    """What the page polls: the response to rate now (id, finish time, host), or nulls."""
    if latest is None:
        return json.dumps({"stream": None})
    return json.dumps({"stream": latest["id"], "finished": latest.get("finished", ""),
                       "host": latest.get("host", "")})


_STYLE = """
body{font:16px/1.4 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
main{max-width:34rem;margin:2rem auto;padding:0 1rem}
h1{font-size:1.3rem}fieldset{border:0;margin:1.2rem 0;padding:0}
legend{font-weight:600;margin-bottom:.4rem}
.scale{display:flex;align-items:center;gap:.3rem;flex-wrap:wrap}
.end{font-size:.8rem;color:#666;width:5rem}.end.hi{text-align:right}
.scale label{display:inline-block}
.scale input{position:absolute;opacity:0}
.scale span.n{display:inline-block;width:2.4rem;line-height:2.4rem;text-align:center;
border:1px solid #999;border-radius:.4rem;background:#fff;cursor:pointer}
.scale span.n.w{width:4rem}
.scale input:checked+span.n{background:#2b5;color:#fff;border-color:#2b5}
.scale input:focus-visible+span.n{outline:2px solid #25a}
#status{min-height:1.4rem;color:#2b5}#status.err{color:#b22}
button{font:inherit;padding:.4rem 1rem}
"""

_SCRIPT = """
(function(){
var f=document.getElementById('f'),st=document.getElementById('status'),
about=document.getElementById('about');
function say(t,err){st.textContent=t;st.className=err?'err':'';}
f.addEventListener('change',function(e){
 var t=e.target;if(!t.name||t.name==='stream')return;
 var body=new URLSearchParams();body.set('stream',f.elements.stream.value);body.set(t.name,t.value);
 fetch(location.pathname+location.search,{method:'POST',headers:{'Accept':'application/json'},body:body})
 .then(function(r){return r.json().then(function(j){
   if(r.ok)say('Saved: '+t.name+' '+t.value+'. Thank you.');
   else say(j.error||'Not saved',true);});})
 .catch(function(){say('Not saved: is retimer still running?',true);});
});
function poll(){
 var q=new URLSearchParams(location.search);q.set('latest','1');
 fetch(location.pathname+'?'+q,{headers:{'Accept':'application/json'}})
 .then(function(r){return r.json();}).then(function(j){
  if(j.stream&&j.stream!==f.elements.stream.value){
   f.elements.stream.value=j.stream;f.reset();f.elements.stream.value=j.stream;
   about.textContent='The response that finished at '+j.finished+' ('+j.host+').';
   f.hidden=false;say('A newer response is ready to rate.');}
 }).catch(function(){});
}
setInterval(poll,2000);
})();
"""


def _scale(name: str) -> str:
    low, high = SCALES[name]
    buttons = "".join(
        f'<label><input type="radio" name="{name}" value="{i}" aria-label="{name} {i}">'
        f'<span class="n">{i}</span></label>'
        for i in range(LOW, HIGH + 1)
    )
    return (f'<fieldset><legend>{name.capitalize()}</legend><div class="scale">'
            f'<span class="end">{low}</span>{buttons}<span class="end hi">{high}</span>'
            f"</div></fieldset>")


_SLOW = ('<fieldset><legend>Did this response feel slow?</legend><div class="scale">'
         '<label><input type="radio" name="slow" value="yes" aria-label="slow yes">'
         '<span class="n w">Yes</span></label>'
         '<label><input type="radio" name="slow" value="no" aria-label="slow no">'
         '<span class="n w">No</span></label></div></fieldset>')


def rating_page(
    latest: Mapping[str, object] | None, message: str = "", error: bool = False, query: str = "",
    ask_slow: bool = False,
) -> str:
    """The page: the latest response's two 1-7 scales (a click on a number saves it), and with
    `ask_slow` the yes/no "did it feel slow?" first; `query` (such as `participant=P3`) is kept
    on the form's address."""
    if latest is None:
        about = "No response has finished yet. This page updates by itself."
        stream = ""
    else:
        about = (f"The response that finished at {html.escape(str(latest.get('finished', '')))} "
                 f"({html.escape(str(latest.get('host', '')))}).")
        stream = html.escape(str(latest["id"]), quote=True)
    hidden = " hidden" if latest is None else ""
    action = f"{PATH}?{query}" if query else PATH
    status_class = ' class="err"' if error else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>Rate the latest response</title><style>{_STYLE}</style></head><body><main>"
        "<h1>How was the latest response?</h1>"
        f'<p id="about">{about}</p>'
        f'<form id="f" method="post" action="{html.escape(action, quote=True)}"{hidden}>'
        f'<input type="hidden" name="stream" value="{stream}">'
        f'{_SLOW if ask_slow else ""}{_scale("speed")}{_scale("quality")}'
        '<noscript><button type="submit">Send</button></noscript></form>'
        f'<p id="status" role="status"{status_class}>{html.escape(message)}</p>'
        f"</main><script>{_SCRIPT}</script></body></html>"
    )
