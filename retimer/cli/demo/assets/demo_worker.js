// retimer demo: each pane's stream is read here, off the page's main thread, so the times taken
// (request sent, each read) are not held back by markdown rendering. Events go to the page as
// they arrive; no timing is made up here either.
"use strict";
const active = new Map();  // pane -> generation

self.onmessage = async (msg) => {
  if (msg.data.hello) {  // warm connections, opened from here: the streams' requests start here too
    await Promise.all(Array.from({ length: msg.data.hello }, () =>
      fetch("/demo/hello", { cache: "no-store" }).then(r => r.json()).catch(() => null)));
    self.postMessage({ hello: true });
    return;
  }
  const { pane, run, generation } = msg.data;
  active.set(pane, generation);
  const post = (data) => self.postMessage({ pane, generation, ...data });
  const t0 = performance.now();
  let first = null, last = null;
  try {
    const response = await fetch("/v1/messages", {
      method: "POST", cache: "no-store",
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01",
                 "x-retimer-demo-pane": String(pane), "x-retimer-demo-run": run },
      body: JSON.stringify({ model: "retimer-demo", max_tokens: 8192, stream: true,
                             messages: [{ role: "user", content: "Show the demo response." }] }),
    });
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      const now = performance.now();
      if (active.get(pane) !== generation) { reader.cancel(); return; }
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      const cut = buffer.lastIndexOf("\n\n");
      if (cut < 0) continue;
      const items = parse(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (items.some(i => i.type === "delta")) {
        if (first === null) first = now;
        last = now;
      }
      if (items.length) post({ type: "items", items, at: now - t0, first: first === null ? null : first - t0, last: last === null ? null : last - t0 });
    }
    buffer += decoder.decode();
    const rest = parse(buffer);
    if (rest.some(i => i.type === "delta")) { last = performance.now(); if (first === null) first = last; }
    if (rest.length) post({ type: "items", items: rest, at: last - t0, first: first === null ? null : first - t0, last: last === null ? null : last - t0 });
    const timing = performance.getEntriesByType("resource").filter(e => e.name.endsWith("/v1/messages")).pop();
    performance.clearResourceTimings();
    post({ type: "end", requestStart: timing ? timing.requestStart - t0 : null, ttft: first === null ? null : first - t0, span: first === null ? 0 : last - first,
           elapsed: last === null ? null : last - t0 });
  } catch (e) {
    if (active.get(pane) === generation) post({ type: "error", message: String(e && e.message || e) });
  }
};

// SSE events (Anthropic Messages) -> block starts and text deltas
function parse(text) {
  const items = [];
  for (const raw of text.split(/\r?\n\r?\n/)) {
    const data = raw.split(/\r?\n/).filter(l => l.startsWith("data:")).map(l => l.slice(5).trimStart()).join("\n");
    if (!data) continue;
    let ev;
    try { ev = JSON.parse(data); } catch (e) { continue; }
    if (ev.type === "content_block_start") {
      const cb = ev.content_block || {};
      const kind = cb.type === "thinking" ? "reasoning" : cb.type === "tool_use" ? "tool" : "text";
      items.push({ type: "start", index: ev.index, kind, name: cb.name || "" });
    } else if (ev.type === "content_block_delta") {
      const d = ev.delta || {};
      const piece = d.type === "text_delta" ? d.text : d.type === "thinking_delta" ? d.thinking
                  : d.type === "input_json_delta" ? d.partial_json : null;
      if (typeof piece === "string" && piece) items.push({ type: "delta", index: ev.index, text: piece });
    }
  }
  return items;
}
