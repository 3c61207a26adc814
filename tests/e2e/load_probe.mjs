// Worker thread of transport_load.mjs: probes /health and a new streaming chat request from its
// own event loop, so the load generator's work never delays a probe. For the chat request it
// records the answer (status and headers), the first token and the end. Posts the latencies
// when told to stop.
import { parentPort, workerData } from 'node:worker_threads';

const { baseURL, model } = workerData;
const health = [];
const chat = [];
const chatFirstToken = [];
const chatDone = [];
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
    const t0 = performance.now();
    try {
      const r = await fetch(`${baseURL}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        signal: AbortSignal.timeout(60000),
        body: JSON.stringify({ model, messages: [{ role: 'user', content: `probe ${i++}` }],
          max_tokens: 4, ignore_eos: true, temperature: 0, stream: true }),
      });
      chat.push(performance.now() - t0);
      if (r.status !== 200) throw new Error(`chat ${r.status}: ${await r.text()}`);
      let text = '';
      for await (const part of r.body) {
        if (text === '') chatFirstToken.push(performance.now() - t0);
        text += Buffer.from(part).toString();
      }
      if (!text.includes('data: [DONE]')) throw new Error('chat stream without [DONE]');
      chatDone.push(performance.now() - t0);
    } catch (e) {
      failures.push(String(e));
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
}

await Promise.all([probeHealth(), probeChat()]);
parentPort.postMessage({ health, chat, chatFirstToken, chatDone, failures });
