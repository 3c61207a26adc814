// The official openai client against the real server and engine on the bundled tiny model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, parsePrometheus, total, MODEL_NAME, MAX_MODEL_LEN } from './harness.mjs';

const KEY = 'e2e-secret';
let srv;
let client;

before(async () => {
  srv = await startServer(['--api-key', KEY]);
  client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: KEY, maxRetries: 0, timeout: 60000 });
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, `graceful shutdown exit code\n${srv.log()}`);
});

// Greedy, fixed length: reproducible whatever else runs.
const greedy = { temperature: 0, max_tokens: 8, ignore_eos: true };

async function streamText(params) {
  const stream = await client.chat.completions.create({ ...params, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}

test('health, version and models', async () => {
  assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
  assert.match((await (await fetch(`${srv.baseURL}/version`)).json()).version, /^\d+\.\d+\.\d+$/);
  const models = await client.models.list();
  assert.equal(models.data[0].id, MODEL_NAME);
  assert.equal(models.data[0].max_model_len, MAX_MODEL_LEN);
});

test('completions: non-streaming and streaming agree, usage is counted', async () => {
  const r = await client.completions.create({ model: MODEL_NAME, prompt: 'Once upon a time', ...greedy });
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 8);
  const stream = await client.completions.create({
    model: MODEL_NAME, prompt: 'Once upon a time', ...greedy, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      finish = c.finish_reason ?? finish;
    }
  }
  assert.equal(text, r.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, r.usage);
});

test('completions: token-id prompts, several prompts, echo', async () => {
  const r = await client.completions.create({
    model: MODEL_NAME, prompt: [[5, 6, 7], [8, 9]], ...greedy, max_tokens: 3,
  });
  assert.equal(r.choices.length, 2);
  assert.equal(r.usage.prompt_tokens, 5);
  const e = await client.completions.create({ model: MODEL_NAME, prompt: 'Echo me', ...greedy, echo: true });
  assert.ok(e.choices[0].text.startsWith('Echo me'));
});

test('chat: non-streaming and streaming agree', async () => {
  const params = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hello!' }], ...greedy };
  const r = await client.chat.completions.create(params);
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.tool_calls, undefined);
  assert.equal(r.usage.completion_tokens, 8);
  assert.equal(await streamText(params), r.choices[0].message.content);

  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.deepEqual(last.usage, r.usage);
});

test('chat: list-of-parts content and system messages', async () => {
  const r = await client.chat.completions.create({
    model: MODEL_NAME, ...greedy,
    messages: [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
  });
  assert.equal(r.choices.length, 1);
});

test('seeded sampling is reproducible; n=2 gives two choices', async () => {
  const params = { model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me' }], temperature: 1, seed: 1234, max_tokens: 12, ignore_eos: true };
  const a = await client.chat.completions.create(params);
  const b = await client.chat.completions.create(params);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const n2 = await client.chat.completions.create({ ...params, n: 2 });
  assert.deepEqual(n2.choices.map((c) => c.index), [0, 1]);
  assert.equal(n2.usage.completion_tokens, 24);
});

test('stop strings end the output and are excluded', async () => {
  const base = { model: MODEL_NAME, prompt: 'The answer is', temperature: 0, max_tokens: 24, ignore_eos: true };
  const full = (await client.completions.create(base)).choices[0].text;
  const stop = full.slice(4, 7);
  assert.ok(stop.length > 0, `output too short: ${JSON.stringify(full)}`);
  const r = await client.completions.create({ ...base, stop: [stop] });
  assert.equal(r.choices[0].text, full.slice(0, full.indexOf(stop)));
  assert.equal(r.choices[0].finish_reason, 'stop');
});

test('logprobs: chat top_logprobs and completions logprobs', async () => {
  const r = await client.chat.completions.create({
    model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], ...greedy, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, 8);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.ok(t.logprob <= 0);
    // Greedy: the sampled token is the most likely one.
    assert.ok(Math.abs(t.logprob - t.top_logprobs[0].logprob) < 1e-5);
  }
  const c = await client.completions.create({ model: MODEL_NAME, prompt: 'Hi', ...greedy, logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, 8);
  assert.equal(lp.token_logprobs.length, 8);
  assert.equal(Object.keys(lp.top_logprobs[0]).length <= 2, true);
});

test('errors: 400 over max_model_len, 401 wrong key, 404 unknown model, 400 malformed JSON, 413', async () => {
  await assert.rejects(
    client.completions.create({ model: MODEL_NAME, prompt: 'x', max_tokens: 5000 }),
    (e) => e.status === 400 && e.message.includes(`${MAX_MODEL_LEN}`) && e.message.includes('5000'));
  const wrong = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(wrong.models.list(), (e) => e.status === 401);
  await assert.rejects(
    client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e.status === 404 && e.message.includes('no-such-model'));
  await assert.rejects(
    client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'wizard', content: 'x' }] }),
    (e) => e.status === 400 && e.message.includes('wizard'));
  const headers = { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' };
  const bad = await fetch(`${srv.baseURL}/v1/chat/completions`, { method: 'POST', headers, body: '{"messages": [' });
  assert.equal(bad.status, 400);
  const err = (await bad.json()).error;
  assert.equal(err.type, 'BadRequestError');
  assert.equal(err.code, 400);
  const big = await fetch(`${srv.baseURL}/v1/completions`, { method: 'POST', headers, body: 'x'.repeat(33 << 20) });
  assert.equal(big.status, 413);
  const missing = await fetch(`${srv.baseURL}/v1/nothing`, { headers });
  assert.equal(missing.status, 404);
  assert.ok((await missing.json()).error.message);
});

test('tokenize and detokenize round-trip, behind the key', async () => {
  const headers = { Authorization: `Bearer ${KEY}` };
  const open = await fetch(`${srv.baseURL}/tokenize`, { method: 'POST', body: JSON.stringify({ prompt: 'x' }) });
  assert.equal(open.status, 401);
  const t = await (await fetch(`${srv.baseURL}/tokenize`, { method: 'POST', headers, body: JSON.stringify({ prompt: 'Hello world' }) })).json();
  assert.equal(t.count, t.tokens.length);
  assert.equal(t.max_model_len, MAX_MODEL_LEN);
  const d = await (await fetch(`${srv.baseURL}/detokenize`, { method: 'POST', headers, body: JSON.stringify({ tokens: t.tokens }) })).json();
  assert.equal(d.prompt, 'Hello world');
});

test('50 concurrent streams give the same greedy tokens as alone', async () => {
  const prompts = Array.from({ length: 50 }, (_, i) => `Request number ${i} says`);
  const params = (p) => ({ model: MODEL_NAME, messages: [{ role: 'user', content: p }], ...greedy });
  const alone = [];
  for (const p of prompts) alone.push((await client.chat.completions.create(params(p))).choices[0].message.content);
  const together = await Promise.all(prompts.map((p) => streamText(params(p))));
  assert.deepEqual(together, alone);
});

test('metrics parse as Prometheus text and move as requests complete', async () => {
  const scrape = async () => parsePrometheus(await (await fetch(`${srv.baseURL}/metrics`)).text());
  const before = await scrape();
  await client.completions.create({ model: MODEL_NAME, prompt: 'count me', ...greedy });
  const after = await scrape();
  const label = `{model_name="${MODEL_NAME}"}`;
  assert.equal(total(after, 'vllm:request_success_total'), total(before, 'vllm:request_success_total') + 1);
  assert.ok(after.get(`vllm:generation_tokens_total${label}`) >= before.get(`vllm:generation_tokens_total${label}`) + 8);
  assert.ok(after.get(`vllm:prompt_tokens_total${label}`) > before.get(`vllm:prompt_tokens_total${label}`));
  assert.equal(after.get(`vllm:time_to_first_token_seconds_count${label}`), before.get(`vllm:time_to_first_token_seconds_count${label}`) + 1);
  for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
    'vllm:num_preemptions_total', 'vllm:prefix_cache_queries_total', 'vllm:prefix_cache_hits_total'])
    assert.ok(after.has(`${name}${label}`), name);
  assert.ok(after.has(`vllm:e2e_request_latency_seconds_bucket{model_name="${MODEL_NAME}",le="+Inf"}`));
  assert.ok(after.has(`vllm:inter_token_latency_seconds_count${label}`));
});

test('a client that disconnects mid-stream has its request aborted', async () => {
  const scrape = async () => parsePrometheus(await (await fetch(`${srv.baseURL}/metrics`)).text());
  const abortLabel = `vllm:request_success_total{model_name="${MODEL_NAME}",finished_reason="abort"}`;
  const before = (await scrape()).get(abortLabel);
  const controller = new AbortController();
  const stream = await client.chat.completions.create(
    { model: MODEL_NAME, messages: [{ role: 'user', content: 'long' }], temperature: 0, max_tokens: 900, ignore_eos: true, stream: true },
    { signal: controller.signal });
  let seen = 0;
  try {
    for await (const _ of stream) if (++seen === 3) controller.abort();
  } catch { /* the client reports its own abort, depending on its version */ }
  assert.equal(seen, 3);
  const deadline = Date.now() + 20000;
  for (;;) {
    const m = await scrape();
    if (m.get(abortLabel) === before + 1 && m.get(`vllm:num_requests_running{model_name="${MODEL_NAME}"}`) === 0) break;
    assert.ok(Date.now() < deadline, 'the aborted request is still running');
    await new Promise((r) => setTimeout(r, 50));
  }
});

test('a client that disconnects while waiting for a non-streaming answer has its request aborted', async () => {
  const scrape = async () => parsePrometheus(await (await fetch(`${srv.baseURL}/metrics`)).text());
  const abortLabel = `vllm:request_success_total{model_name="${MODEL_NAME}",finished_reason="abort"}`;
  const before = (await scrape()).get(abortLabel);
  const controller = new AbortController();
  const pending = client.completions.create(
    { model: MODEL_NAME, prompt: 'long', temperature: 0, max_tokens: 900, ignore_eos: true },
    { signal: controller.signal });
  // Once the request runs, the client goes away.
  const deadline = Date.now() + 20000;
  while ((await scrape()).get(`vllm:num_requests_running{model_name="${MODEL_NAME}"}`) !== 1) {
    assert.ok(Date.now() < deadline, 'the request never started');
    await new Promise((r) => setTimeout(r, 20));
  }
  controller.abort();
  await assert.rejects(pending);
  for (;;) {
    const m = await scrape();
    if (m.get(abortLabel) === before + 1 && m.get(`vllm:num_requests_running{model_name="${MODEL_NAME}"}`) === 0) break;
    assert.ok(Date.now() < deadline, 'the abandoned request is still running');
    await new Promise((r) => setTimeout(r, 50));
  }
});
