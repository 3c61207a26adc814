// The transport through the real binary: VLLM_API_KEY is enforced, and SIGTERM's drain deadline
// (--shutdown-timeout) ends a stream that outlives it with an error event, then the process
// exits 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL_NAME } from './harness.mjs';

test('VLLM_API_KEY guards /v1 and the tokenizer routes', async () => {
  const srv = await startServer([], { VLLM_API_KEY: 'env-key', MLASERVE_API_KEY: '' });
  try {
    assert.equal((await fetch(`${srv.baseURL}/v1/models`)).status, 401);
    const ok = await fetch(`${srv.baseURL}/v1/models`, { headers: { Authorization: 'Bearer env-key' } });
    assert.equal(ok.status, 200);
    assert.equal((await fetch(`${srv.baseURL}/tokenize`, { method: 'POST', body: '{"prompt": "x"}' })).status, 401);
    assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
    assert.equal((await fetch(`${srv.baseURL}/ping`, { method: 'POST' })).status, 200);
  } finally {
    assert.equal((await srv.stop()).code, 0);
  }
});

test('SIGTERM lets a stream run until --shutdown-timeout, then ends it with an error event', async () => {
  const srv = await startServer(['--shutdown-timeout', '0.5']);
  const res = await fetch(`${srv.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: MODEL_NAME, prompt: 'long', max_tokens: 900, ignore_eos: true,
      temperature: 0, stream: true }),
  });
  assert.equal(res.status, 200);
  let text = '';
  let stopping = null;
  const t0 = Date.now();
  for await (const part of res.body) {
    text += Buffer.from(part).toString();
    if (!stopping && text.split('\n\n').length > 3) stopping = srv.stop();
  }
  const { code } = await stopping;
  assert.equal(code, 0, srv.log());
  assert.match(text, /"error":\{[^}]*"message":"the server is shutting down"/);
  assert.ok(text.endsWith('data: [DONE]\n\n'));
  assert.ok(Date.now() - t0 < 10000, 'the drain deadline was not kept');
  assert.doesNotMatch(text, /"finish_reason":"length"/);
});
