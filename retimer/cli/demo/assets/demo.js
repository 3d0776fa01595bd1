// retimer demo page: plays one stream per pane through the proxy and draws what arrives, when it
// arrives. No timing happens here: the proxy paces every stream; the page only measures.
"use strict";
(function () {
  const grid = document.getElementById("grid");
  const playButton = document.getElementById("play");
  let config = null;
  let tokenRe = null;
  const panes = [];
  const reader = new Worker("/demo/assets/demo_worker.js");
  let helloDone = null;
  reader.onmessage = (m) => {
    if (m.data.hello) { helloDone(); return; }
    const pane = panes[m.data.pane];
    if (pane && m.data.generation === pane.generation) pane.fromWorker(m.data);
  };

  // -- tokens: retimer's own splitter (retimer.wire.tokenizer), translated by the server --------
  function countTokens(text) {
    tokenRe.lastIndex = 0;
    let n = 0;
    while (tokenRe.exec(text) !== null) n++;
    return n;
  }

  // -- safe rendering: model text is never trusted as HTML ----------------------------------------
  function escapeHtml(s) {
    return String(s).replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }
  function highlighted(code, lang) {
    const name = (lang || "").trim().split(/\s+/)[0].toLowerCase();
    if (name && window.hljs && hljs.getLanguage(name)) {
      try { return hljs.highlight(code, { language: name, ignoreIllegals: true }).value; } catch (e) { /* plain */ }
    }
    return escapeHtml(code);
  }
  const md = new marked.Marked({ gfm: true, breaks: false });
  md.use({
    renderer: {
      html(token) { return escapeHtml(token.text); },  // raw HTML from the model shows as text
      code(token) {
        const lang = escapeHtml((token.lang || "").split(/\s+/)[0]);
        return `<pre><code class="hljs${lang ? " language-" + lang : ""}">${highlighted(token.text, token.lang)}</code></pre>\n`;
      },
      link(token) {
        const inner = this.parser.parseInline(token.tokens);
        if (!/^(https?:|mailto:|#)/i.test(token.href || "")) return inner;
        return `<a href="${escapeHtml(token.href)}" rel="noopener noreferrer" target="_blank">${inner}</a>`;
      },
      image(token) { return `<span class="img-alt">[image: ${escapeHtml(token.text || token.href)}]</span>`; },
    },
  });
  function renderBlock(block) {
    if (block.kind === "reasoning") return md.parse(block.text);
    if (block.kind === "tool") {
      let body = block.text;
      try { body = JSON.stringify(JSON.parse(block.text), null, 2); } catch (e) { /* still streaming */ }
      return `<div class="tool-name">tool call &middot; ${escapeHtml(block.name || "tool")}</div>` +
             `<pre><code class="hljs language-json">${highlighted(body, "json")}</code></pre>`;
    }
    return md.parse(block.text);
  }

  // -- formatting: three significant digits (four from 1000 s), so a pane's stats stay narrow -------
  const NBSP = "\u00a0";  // a figure and its unit never part at a line end
  function msParts(v) {
    if (v == null) return ["–", ""];
    if (v < 999.5) return [String(Math.round(v)), "ms"];
    const s = v / 1000;
    return [s < 9.995 ? s.toFixed(2) : s < 99.95 ? s.toFixed(1) : String(Math.round(s)), "s"];
  }
  const ms = v => msParts(v).filter(Boolean).join(NBSP);
  const rate = v => v == null || !isFinite(v) ? "–" : v >= 99.95 ? `${Math.round(v)}` : v.toFixed(1);
  // a stat's figure: the number, then its unit in a smaller span
  function showFigure(el, [number, unit]) {
    el.textContent = number;
    if (!unit) return;
    const span = document.createElement("span");
    span.className = "unit";
    span.textContent = NBSP + unit;
    el.appendChild(span);
  }

  // -- one pane -----------------------------------------------------------------------------------
  class Pane {
    constructor(index, info) {
      this.index = index;
      this.info = info;
      const node = document.getElementById("pane-template").content.firstElementChild.cloneNode(true);
      node.dataset.profile = info.profile;
      node.dataset.pane = String(index);
      node.querySelector(".pane-title").textContent = info.spec;
      node.querySelector(".pane-profile").textContent =
        `${info.profile} · TTFT p50 ${ms(info.ttft_p50_ms)} · ${rate(info.tps)}${NBSP}tok/s`;
      node.querySelector(".replay").addEventListener("click", () => playRun([this]));
      this.node = node;
      this.el = sel => node.querySelector(sel);
      grid.appendChild(node);
      this.generation = 0;
    }

    reset() {
      for (const key of ["ttftMs", "tokens", "tps", "elapsedMs", "targetTtftMs", "targetTps", "emittedTps"]) delete this.node.dataset[key];
      this.blocks = [];
      this.tokensLive = 0;
      this.t0 = null; this.first = null; this.last = null; this.done = false;
      this.node.dataset.state = "waiting";
      this.el(".bubble").innerHTML = '<p class="waiting">Waiting for the first token</p>';
      this.el(".raw").textContent = "";
      this.el(".proxy-note").textContent = "";
      for (const s of [".s-ttft", ".s-tps", ".s-elapsed", ".s-tokens"]) this.el(s).textContent = "–";
      this.el(".progress .bar").style.width = "0%";
      this.rendered = [];
    }

    // the stream is read by the worker (demo_worker.js), off this thread; resolves at its end
    play(run) {
      const generation = ++this.generation;
      this.reset();
      this.run = run;
      this.node.dataset.run = run;
      this.t0 = performance.now();  // for the live elapsed time only
      return new Promise(resolve => {
        this.resolve = resolve;
        reader.postMessage({ pane: this.index, run, generation });
      });
    }

    fromWorker(d) {
      if (d.type === "items") {
        for (const item of d.items) {
          if (item.type === "start") {
            this.blocks[item.index] = { kind: item.kind, name: item.name, text: "" };
          } else {
            const block = this.blocks[item.index] || (this.blocks[item.index] = { kind: "text", name: "", text: "" });
            block.text += item.text;
            this.tokensLive += countTokens(item.text);
          }
        }
        if (d.first !== null) {
          if (this.first === null) this.node.dataset.state = "streaming";
          this.first = d.first; this.last = d.last;
        }
        scheduleDraw();
      } else if (d.type === "end") {
        this.finish(d);
        this.resolve();
      } else if (d.type === "error") {
        this.node.dataset.state = "error";
        this.el(".proxy-note").textContent = `stream failed: ${d.message}`;
        this.resolve();
      }
    }

    finish(end) {
      this.done = true;
      const blocks = this.blocks.filter(Boolean);
      // tokens counted on each whole block, with the proxy's rule; rate as retimer's records;
      // times as the worker took them: request sent, first and last read with a token
      const n = blocks.reduce((sum, b) => sum + countTokens(b.text), 0);
      const ttft = end.ttft;
      const span = end.span / 1000;
      const tps = n > 1 && span > 0 ? (n - 1) / span : null;
      this.el(".raw").textContent = JSON.stringify(blocks.map(b => ({ kind: b.kind, text: b.text })));
      this.tokensLive = n;
      this.draw(true);
      showFigure(this.el(".s-ttft"), msParts(ttft));
      this.el(".s-tps").textContent = rate(tps);
      showFigure(this.el(".s-elapsed"), msParts(end.elapsed));
      this.node.dataset.state = "done";
      this.node.dataset.tokens = String(n);
      if (end.requestStart !== null) this.node.dataset.requestStartMs = end.requestStart.toFixed(1);
      this.node.dataset.elapsedMs = end.elapsed === null ? "" : end.elapsed.toFixed(1);
      this.node.dataset.tps = tps === null ? "" : tps.toFixed(3);
      this.node.dataset.ttftMs = ttft === null ? "" : ttft.toFixed(1);  // last: it says "finished"
    }

    draw(final) {
      if (!this.blocks) return;
      const now = performance.now();
      if (this.t0 !== null && !this.done) {
        showFigure(this.el(".s-elapsed"), msParts(now - this.t0));
        if (this.first !== null) {
          showFigure(this.el(".s-ttft"), msParts(this.first));
          const span = (this.last - this.first) / 1000;
          if (span > 0.05) this.el(".s-tps").textContent = rate((this.tokensLive - 1) / span);
        }
      }
      this.el(".s-tokens").textContent = this.t0 === null ? "–" : String(this.tokensLive);
      const total = config.source.tokens || 1;
      this.el(".progress .bar").style.width = `${Math.min(100, 100 * this.tokensLive / total).toFixed(1)}%`;
      const blocks = this.blocks.filter(Boolean);
      if (!blocks.length) return;
      const chat = this.el(".chat");
      const stick = chat.scrollTop + chat.clientHeight >= chat.scrollHeight - 40;
      const bubble = this.el(".bubble");
      if (!this.rendered.length) bubble.innerHTML = "";
      blocks.forEach((block, i) => {
        let r = this.rendered[i];
        if (!r) {
          const div = document.createElement("div");
          div.className = `block ${block.kind}`;
          bubble.appendChild(div);
          r = this.rendered[i] = { div, length: -1 };
        }
        if (r.length !== block.text.length || final) {
          r.div.innerHTML = renderBlock(block);
          r.length = block.text.length;
        }
      });
      if (stick) chat.scrollTop = chat.scrollHeight;
    }

    showRecord(record) {
      if (!record) return;
      const target = record.target || {}, emitted = record.emitted || {};
      this.node.dataset.targetTtftMs = String(target.ttft_ms);
      this.node.dataset.targetTps = String(target.tps);
      this.node.dataset.emittedTps = String(emitted.tps);
      this.el(".proxy-note").textContent =
        `proxy: drew TTFT ${ms(target.ttft_ms)}, emitted ${rate(emitted.tps)}${NBSP}tok/s ` +
        `(profile ${rate(target.tps)}${NBSP}tok/s), ${emitted.tokens} tokens`;
    }
  }

  // -- drawing and runs ---------------------------------------------------------------------------
  let drawPending = false;
  function scheduleDraw() {
    if (drawPending) return;
    drawPending = true;
    const go = () => { drawPending = false; for (const p of panes) if (!p.done) p.draw(false); };
    if (document.hidden) setTimeout(go, 50); else requestAnimationFrame(go);
  }
  setInterval(() => { if (panes.some(p => p.t0 !== null && !p.done)) scheduleDraw(); }, 100);

  async function fetchRecords(run, wanted) {
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`/demo/records?run=${encodeURIComponent(run)}`, { cache: "no-store" });
      const records = await res.json();
      if (records.length >= wanted) return records;
      await new Promise(r => setTimeout(r, 150));
    }
    return [];
  }

  let runs = 0;
  async function playRun(list) {
    const run = `${Date.now().toString(36)}-${++runs}`;
    await Promise.all(list.map(p => p.play(run)));
    const records = await fetchRecords(run, list.length);
    for (const r of records) { const p = panes[r.demo_pane]; if (p && p.run === run) p.showRecord(r); }
    if (list.length === panes.length) document.body.dataset.played = String(runs);
  }

  async function start() {
    config = await (await fetch("/demo/config.json", { cache: "no-store" })).json();
    tokenRe = new RegExp(config.token_pattern, "gu");
    window.retimerDemo = { countTokens, config, panes, msParts, rate, showFigure };
    document.getElementById("source").textContent =
      `Playing: ${config.source.label} · ${config.source.tokens} tokens`;
    config.panes.forEach((info, i) => panes.push(new Pane(i, info)));
    playButton.addEventListener("click", () => {
      playButton.textContent = "↻ Replay all";
      playRun(panes);
    });
    // one warm keep-alive connection per pane, so no pane's request waits for a new one
    // (the server holds each hello a moment, so the browser cannot answer two on one connection)
    await new Promise(resolve => { helloDone = resolve; reader.postMessage({ hello: panes.length }); });
    document.body.dataset.ready = "1";
    if (new URLSearchParams(location.search).get("autoplay") === "1") {
      playButton.textContent = "↻ Replay all";
      playRun(panes);
    }
  }
  start();
})();
