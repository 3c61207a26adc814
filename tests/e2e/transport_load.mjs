// Load test of the HTTP transport (issue 15) on the bundled demo model, loopback only: `streams`
// concurrent SSE streams (a `disconnect` fraction of them dropped after a few events) for
// `seconds`, while `slowloris` connections trickle header bytes and reconnect when cut off.
// Throughout, /health and a new streaming chat request must answer (status and headers) within
// 1 s (probes on a worker thread; the chat probe's first token and end are reported: they also
// wait for the engine's steps, whose length is the engine's matter); every slowloris connection
// must be held by the server until its header deadline (none answered or closed early: the
// server is never full); afterwards the engine must be idle (running = waiting = 0 in /metrics)
// and the server's RSS within 10 % of its value after an identical warm-up phase.
//
//   node tests/e2e/transport_load.mjs --streams 500 --slowloris 300 --seconds 60   (full run)
// CTest runs a shorter variant (tests/e2e/CMakeLists.txt). Prints one JSON line; exit 1 on failure.
import net from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';

import { startServer, parsePrometheus, total } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: o } = parseArgs({
  options: {
    streams: { type: 'string', default: '500' },
    slowloris: { type: 'string', default: '300' },
    seconds: { type: 'string', default: '60' },
    'warmup-seconds': { type: 'string', default: '10' },
    disconnect: { type: 'string', default: '0.3' },
  },
});
const streams = Number(o.streams);
const slowCount = Number(o.slowloris);
const seconds = Number(o.seconds);
const warmup = Number(o['warmup-seconds']);
const dropFraction = Number(o.disconnect);
const LIMIT_MS = 1000;
const RSS_TOLERANCE = 0.10;
// The server's slowloris deadline (--max-header-seconds); a trickling connection closed before
// half of it, or answered at all (503 when full), was not held.
const HEADER_SECONDS = 10;

const demo = { dir: path.resolve(here, '../../models/demo-glm5'), name: 'demo-glm5',
  maxModelLen: 2048, kvBytes: '512MiB' };
// Under this load the generator's own event loop lags by seconds; a lagging client may reuse a
// kept-alive connection just as the server retires it (HTTP/1.1's keep-alive race, which the
// protocol leaves to clients). undici retires idle connections after 4 s, so the server keeps
// them 30 s here instead of its 5 s: a margin no lag of this test reaches.
const server = await startServer(['--device', 'cpu', '--max-num-seqs', String(streams + 16),
  '--max-keep-alive-seconds', '30', '--max-header-seconds', String(HEADER_SECONDS)], {}, demo);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${server.pid}/status`, 'utf8'))[1]) / 1024;
const scrape = async () => parsePrometheus(await (await fetch(`${server.baseURL}/metrics`)).text());

async function streamer(deadline, stats) {
  let i = 0;
  while (Date.now() < deadline) {
    const ac = new AbortController();
    const dropAfter = Math.random() < dropFraction ? 1 + Math.floor(Math.random() * 8) : Infinity;
    try {
      const res = await fetch(`${server.baseURL}/v1/chat/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
        body: JSON.stringify({ model: demo.name, messages: [{ role: 'user', content: `stream ${i++}` }],
          max_tokens: 8 + Math.floor(Math.random() * 40), ignore_eos: true, temperature: 0, stream: true }),
      });
      if (res.status !== 200) throw new Error(`HTTP ${res.status}`);
      let events = 0;
      let text = '';
      for await (const part of res.body) {
        text += Buffer.from(part).toString();
        events = text.split('\n\n').length - 1;
        if (events >= dropAfter) break;
      }
      if (events >= dropAfter) {
        ac.abort();
        stats.dropped++;
      } else {
        if (!text.includes('data: [DONE]')) throw new Error('stream ended without [DONE]');
        stats.completed++;
      }
    } catch (e) {
      if (!ac.signal.aborted) {
        stats.errors++;
        stats.lastError = `${e} ${e.cause ?? ""}`;
      }
    }
  }
}

function slowloris(n, port) {
  const socks = new Set();
  let stopped = false;
  let cut = 0;
  let early = 0;
  const open = () => {
    if (stopped) return;
    // From before the connect, so a lagging event loop can only lengthen what is measured.
    const since = Date.now();
    let answered = false;
    const s = net.connect(port, '127.0.0.1', () => s.write('POST /v1/chat/completions HTTP/1.1\r\n'));
    s.on('data', () => { answered = true; });
    s.on('error', () => {});
    s.on('close', () => {
      socks.delete(s);
      if (!stopped) {
        cut++;
        if (answered || Date.now() - since < (HEADER_SECONDS * 1000) / 2) early++;
        setImmediate(open);
      }
    });
    socks.add(s);
  };
  for (let i = 0; i < n; i++) open();
  const trickle = setInterval(() => { for (const s of socks) s.write('X'); }, 1000);
  return {
    cut: () => cut,
    early: () => early,
    stop() {
      stopped = true;
      clearInterval(trickle);
      for (const s of socks) s.destroy();
    },
  };
}

async function phase(secs) {
  const stats = { completed: 0, dropped: 0, errors: 0, lastError: '' };
  const probe = new Worker(path.join(here, 'load_probe.mjs'), { workerData: { baseURL: server.baseURL, model: demo.name } });
  const probes = new Promise((r) => probe.once('message', r));
  const loris = slowloris(slowCount, Number(new URL(server.baseURL).port));
  const deadline = Date.now() + secs * 1000;
  await Promise.all(Array.from({ length: streams }, () => streamer(deadline, stats)));
  probe.postMessage('stop');
  const p = await probes;
  await probe.terminate();
  const slowCut = loris.cut();
  const slowEarly = loris.early();
  loris.stop();
  return { stats, probes: p, slowloris_cut: slowCut, slowloris_early: slowEarly };
}

async function idle() {
  const deadline = Date.now() + 20000;
  for (;;) {
    const m = await scrape();
    const running = total(m, 'vllm:num_requests_running');
    const waiting = total(m, 'vllm:num_requests_waiting');
    if (running === 0 && waiting === 0) return { running, waiting };
    if (Date.now() > deadline) return { running, waiting };
    await sleep(200);
  }
}

const max = (xs) => xs.reduce((a, b) => Math.max(a, b), 0);
const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))] ?? 0;
let report;
let ok = false;
try {
  await phase(warmup);
  await idle();
  await sleep(2000);
  const rssWarm = rssMiB();
  const run = await phase(seconds);
  const after = await idle();
  await sleep(2000);
  const rssAfter = rssMiB();
  const { health, chat, chatFirstToken, chatDone, failures } = run.probes;
  report = {
    streams, slowloris: slowCount, seconds, disconnect: dropFraction,
    completed: run.stats.completed, dropped: run.stats.dropped, stream_errors: run.stats.errors,
    last_error: run.stats.lastError || undefined,
    slowloris_cut_and_reopened: run.slowloris_cut,
    slowloris_not_held: run.slowloris_early,
    health_ms: { n: health.length, p50: +pct(health, 0.5).toFixed(1), max: +max(health).toFixed(1) },
    chat_answer_ms: { n: chat.length, p50: +pct(chat, 0.5).toFixed(1), max: +max(chat).toFixed(1) },
    chat_first_token_ms: { p50: +pct(chatFirstToken, 0.5).toFixed(1), max: +max(chatFirstToken).toFixed(1) },
    chat_done_ms: { n: chatDone.length, p50: +pct(chatDone, 0.5).toFixed(1), max: +max(chatDone).toFixed(1) },
    probe_failures: failures.slice(0, 3),
    after, rss_mib: { warm: +rssWarm.toFixed(1), after: +rssAfter.toFixed(1) },
  };
  const problems = [];
  if (failures.length) problems.push('probe failures');
  if (max(health) > LIMIT_MS) problems.push(`/health took ${max(health).toFixed(0)} ms`);
  if (max(chat) > LIMIT_MS) problems.push(`a chat request took ${max(chat).toFixed(0)} ms to answer`);
  if (chat.length === 0 || chatDone.length !== chat.length) problems.push('a chat probe did not finish');
  if (run.stats.errors) problems.push(`${run.stats.errors} stream errors`);
  if (run.stats.dropped === 0 || run.stats.completed === 0) problems.push('no drops or no completions');
  // All `slowCount` open at once from the start, none closed or answered before half the
  // deadline, and at least as many cut there: the server held them all at the same time.
  if (run.slowloris_early) problems.push(`${run.slowloris_early} slowloris connections not held to the deadline`);
  if (run.slowloris_cut < slowCount) problems.push('not every slowloris connection reached the header deadline');
  if (after.running !== 0 || after.waiting !== 0) problems.push('the engine is not idle afterwards');
  if (Math.abs(rssAfter - rssWarm) > RSS_TOLERANCE * rssWarm) problems.push('RSS moved more than 10 %');
  report.problems = problems;
  ok = problems.length === 0;
} finally {
  const { code } = await server.stop();
  if (report) report.exit_code = code;
  if (code !== 0) ok = false;
}
console.log(JSON.stringify(report));
if (!ok) console.log(server.log().split('\n').filter((l) => /error|warn|throughput/i.test(l)).slice(-30).join('\n'));
process.exit(ok ? 0 : 1);
