// Worker thread of transport_load.mjs: probes /health and a new chat request from its own event
// loop, so the load generator's work never delays a probe. Posts the latencies when told to stop.
import { parentPort, workerData } from 'node:worker_threads';

const { baseURL, model } = workerData;
const health = [];
const chat = [];
const failures = [];
let running = true;
parentPort.on('message', () => { running = false; });

async function timed(fn) {
  const t0 = performance.now();
  try {
    await fn();
  } catch (e) {
    failures.push(String(e));
  }
  return performance.now() - t0;
}

async function probeHealth() {
  while (running) {
    health.push(await timed(async () => {
      const r = await fetch(`${baseURL}/health`, { signal: AbortSignal.timeout(5000) });
      if (r.status !== 200) throw new Error(`/health ${r.status}`);
    }));
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function probeChat() {
  let i = 0;
  while (running) {
    chat.push(await timed(async () => {
      const r = await fetch(`${baseURL}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        signal: AbortSignal.timeout(5000),
        body: JSON.stringify({ model, messages: [{ role: 'user', content: `probe ${i++}` }],
          max_tokens: 4, ignore_eos: true, temperature: 0 }),
      });
      const body = await r.json();
      if (r.status !== 200 || !body.choices) throw new Error(`chat ${r.status}: ${JSON.stringify(body)}`);
    }));
    await new Promise((r) => setTimeout(r, 1000));
  }
}

await Promise.all([probeHealth(), probeChat()]);
parentPort.postMessage({ health, chat, failures });
