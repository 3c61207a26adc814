// Hostile requests found by an adversarial probe (issue 15): each is refused with a 400 that
// names the field, and the server keeps serving (the next ordinary request is answered).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { startServer, MODEL_NAME } from './harness.mjs';

let srv;

before(async () => {
  srv = await startServer();
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, `graceful shutdown exit code\n${srv.log()}`);
});

const user = [{ role: 'user', content: 'Hello' }];

async function post(path, body) {
  const r = await fetch(`${srv.baseURL}${path}`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

// After each hostile request: the process is alive and answers an ordinary one.
async function stillServes() {
  assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
  const r = await post('/v1/chat/completions',
    { model: MODEL_NAME, messages: user, max_tokens: 2, temperature: 0 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.choices.length, 1);
}

function expect400(r, messagePart, param) {
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.ok(r.body.error.message.includes(messagePart), r.body.error.message);
  if (param !== undefined) assert.equal(r.body.error.param, param);
}

test('16k-level JSON in tool-call arguments (~40 KB) is a 400 on chat and /tokenize', async () => {
  const deep = '['.repeat(16000) + ']'.repeat(16000);
  const messages = [
    ...user,
    { role: 'assistant', content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: deep } }] },
    { role: 'tool', tool_call_id: 'c1', content: 'ok' },
  ];
  expect400(await post('/v1/chat/completions', { model: MODEL_NAME, messages }),
    'JSON nests deeper than 128 levels');
  expect400(await post('/tokenize', { model: MODEL_NAME, messages }),
    'JSON nests deeper than 128 levels');
  expect400(await post('/v1/chat/completions', `{"messages": ${deep}}`),
    'JSON nests deeper than 128 levels');
  await stillServes();
});

test('max_tokens near INT64_MAX is a 400, and the engine is not wedged', async () => {
  for (const max of ['9223372036854775807', '9223372036854775000']) {
    const body = `{"model": "${MODEL_NAME}", "prompt": "Hello", "max_tokens": ${max}}`;
    expect400(await post('/v1/completions', body), "maximum context length");
  }
  await stillServes();
  const m = await (await fetch(`${srv.baseURL}/metrics`)).text();
  assert.match(m, /^vllm:num_requests_running\{[^}]*\} 0$/m);
  assert.match(m, /^vllm:num_requests_waiting\{[^}]*\} 0$/m);
});

test('chat_template_kwargs may not replace messages, tools or other reserved names', async () => {
  for (const key of ['messages', 'tools', 'add_generation_prompt', 'bos_token', 'raise_exception']) {
    expect400(await post('/v1/chat/completions', {
      model: MODEL_NAME, messages: user, chat_template_kwargs: { [key]: [] },
    }), `chat_template_kwargs may not set '${key}'`, `chat_template_kwargs.${key}`);
  }
  const ok = await post('/v1/chat/completions', {
    model: MODEL_NAME, messages: user, max_tokens: 1, chat_template_kwargs: { enable_thinking: false },
  });
  assert.equal(ok.status, 200);
  await stillServes();
});

test('a tool whose parameters are not an object schema is a 400 naming it', async () => {
  for (const parameters of ['not a schema', [1, 2], { type: 'string' }, { properties: 'x' }]) {
    const r = await post('/v1/chat/completions', {
      model: MODEL_NAME, messages: user,
      tools: [{ type: 'function', function: { name: 'ok', parameters: { type: 'object' } } },
        { type: 'function', function: { name: 'bad', parameters } }],
    });
    expect400(r, 'tools[1].function.parameters', 'tools[1].function.parameters');
  }
  await stillServes();
});

test('stop: more than 128 strings or 16 KiB is a 400; 128 long ones work', async () => {
  const many = Array.from({ length: 1_000_000 }, (_, i) => `s${i}`);
  expect400(await post('/v1/completions', { model: MODEL_NAME, prompt: 'Hi', stop: many }),
    'at most 128 strings', 'stop');
  expect400(await post('/v1/completions',
    { model: MODEL_NAME, prompt: 'Hi', stop: ['x'.repeat(16385)] }), '16384 bytes', 'stop');
  const stops = Array.from({ length: 128 }, (_, i) => `${i}`.padStart(128, 'z'));
  const r = await post('/v1/completions',
    { model: MODEL_NAME, prompt: 'Hi', stop: stops, max_tokens: 4, temperature: 0, ignore_eos: true });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.choices[0].finish_reason, 'length');
  await stillServes();
});
