// Load generator for `mlaserve serve` (or any OpenAI-compatible server): C concurrent clients
// each send streaming chat completions back to back for a fixed number of requests; reports
// requests/s, output tokens/s and time-to-first-token percentiles. No dependencies (fetch + SSE).
// --concurrency takes a list (`1,50,256`): one run per level, one JSON line each, with
// `--requests` per client at that level (at least --min-requests in all).
//
//   node bench/serve_load.mjs --url http://127.0.0.1:8000 --model NAME \
//        --concurrency 1,50,256 --requests 200 --max-tokens 16
import { parseArgs } from 'node:util';

const { values: o } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:8000' },
    model: { type: 'string', default: '' },
    concurrency: { type: 'string', default: '1' },
    requests: { type: 'string', default: '50' },
    'per-client': { type: 'boolean', default: false },
    'max-tokens': { type: 'string', default: '16' },
    'api-key': { type: 'string', default: process.env.MLASERVE_API_KEY ?? '' },
  },
});
const levels = o.concurrency.split(',').map(Number);
const maxTokens = Number(o['max-tokens']);
const headers = { 'Content-Type': 'application/json' };
if (o['api-key']) headers.Authorization = `Bearer ${o['api-key']}`;

async function one(i) {
  const t0 = performance.now();
  const res = await fetch(`${o.url}/v1/chat/completions`, {
    method: 'POST',
    headers,
    body: JSON.stringify({
      model: o.model || undefined,
      messages: [{ role: 'user', content: `Request ${i}: write something.` }],
      max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    }),
  });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  let ttft = null;
  let tokens = 0;
  let buf = '';
  const decoder = new TextDecoder();
  for await (const part of res.body) {
    buf += decoder.decode(part, { stream: true });
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      if (ttft === null && chunk.choices?.[0]?.delta?.content) ttft = performance.now() - t0;
    }
  }
  return { ttft: ttft ?? performance.now() - t0, latency: performance.now() - t0, tokens };
}

const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];

// `--requests` in all, or per client with --per-client (so that every level runs long enough).
async function level(concurrency) {
  const total = o['per-client'] ? Number(o.requests) * concurrency : Number(o.requests);
  const results = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < total) results.push(await one(next++));
  }));
  const seconds = (performance.now() - start) / 1000;
  const ttfts = results.map((r) => r.ttft);
  const outTokens = results.reduce((s, r) => s + r.tokens, 0);
  console.log(JSON.stringify({
    concurrency, requests: results.length, max_tokens: maxTokens, seconds: +seconds.toFixed(2),
    requests_per_s: +(results.length / seconds).toFixed(2),
    output_tokens_per_s: +(outTokens / seconds).toFixed(1),
    ttft_ms: { p50: +pct(ttfts, 0.5).toFixed(1), p90: +pct(ttfts, 0.9).toFixed(1), p99: +pct(ttfts, 0.99).toFixed(1) },
    latency_ms_p50: +pct(results.map((r) => r.latency), 0.5).toFixed(1),
  }));
}

for (const c of levels) await level(c);
