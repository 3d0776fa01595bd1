// Run by `retimer run` in tests. argv: MODE (fetch | https) LLM_BASE OTHER_BASE EXIT_CODE
// fetch: built-in fetch, proxied by Node itself when it honours NODE_USE_ENV_PROXY (>= 22.21 / 24).
// https: node:https through a CONNECT tunnel to HTTPS_PROXY (works on any Node; trust comes from
// NODE_EXTRA_CA_CERTS either way). Prints JSON: the streamed pieces and the other host's error.
import http from 'node:http';
import https from 'node:https';
import tls from 'node:tls';

const [mode, llm, other, code] = process.argv.slice(2);
const body = JSON.stringify({ model: 'gpt-test', stream: true, messages: [{ role: 'user', content: 'hi' }] });

function tunnel(url) {
  const proxy = new URL(process.env.HTTPS_PROXY);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: proxy.hostname, port: proxy.port, method: 'CONNECT',
      path: `${url.hostname}:${url.port}` });
    req.on('connect', (res, socket) => res.statusCode === 200
      ? resolve(socket) : reject(new Error(`CONNECT ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

async function httpsRequest(url, method, payload) {
  const socket = await tunnel(url);
  return new Promise((resolve, reject) => {
    const req = https.request(url, {
      method, headers: { 'content-type': 'application/json' },
      createConnection: () => tls.connect({ socket, servername: url.hostname }),
    }, resolve);
    req.on('error', reject);
    req.end(payload);
  });
}

async function* chunks(url) {
  if (mode === 'fetch') {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    yield* res.body;
  } else {
    yield* await httpsRequest(new URL(url), 'POST', body);
  }
}

const pieces = [];
let buffer = '';
const decoder = new TextDecoder();
for await (const chunk of chunks(`${llm}/v1/chat/completions`)) {
  buffer += decoder.decode(chunk, { stream: true });
  let end;
  while ((end = buffer.indexOf('\n\n')) >= 0) {
    const event = buffer.slice(0, end);
    buffer = buffer.slice(end + 2);
    for (const line of event.split('\n')) {
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const content = JSON.parse(line.slice(6)).choices?.[0]?.delta?.content;
      if (content) pieces.push(content);
    }
  }
}

let otherError = 'none';
try {
  if (mode === 'fetch') await fetch(`${other}/v1/models`);
  else await httpsRequest(new URL(`${other}/v1/models`), 'GET');
} catch (e) {
  otherError = (e.cause && e.cause.code) || e.code || String(e);
}
console.log(JSON.stringify({ pieces, otherError, node: process.version }));
process.exit(Number(code));
