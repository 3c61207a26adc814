// `serve --skip-tokenizer-init` with the official openai client: a model directory with no
// tokenizer files at all (the tiny GLM-5 fixture: config.json and weights), prompts as token ids,
// outputs as token ids (choices' token_ids, text empty), streaming, usage, and every request
// that needs text refused with a 400 naming its field. The serving benchmark
// (bench/serve_bench.py) drives the GLM-5-shaped dummy model this way.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { BIN, startServer } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const DIR = path.resolve(here, '../data/tiny-glm5');
const NAME = 'tiny-glm5-ids';
const EOS = 1;  // the fixture's config.json eos_token_id
const VOCAB = 1024;
let srv;
let client;

before(async () => {
  assert.deepEqual(fs.readdirSync(DIR).filter((f) => f.startsWith('tokenizer')), []);
  srv = await startServer(['--skip-tokenizer-init', '--device', 'cpu'], {},
    { dir: DIR, name: NAME, maxModelLen: 256 });
  client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
});

after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0, `graceful shutdown exit code\n${srv.log()}`);
});

const PROMPT = [5, 900, 17, 300, 42, 1000, 8];
const greedy = { model: NAME, temperature: 0, max_tokens: 6, ignore_eos: true };

async function streamIds(params) {
  const stream = await client.completions.create({
    ...params, stream: true, stream_options: { include_usage: true },
  });
  const ids = {};
  const promptIds = {};
  let usage = null;
  const finish = {};
  const reason = {};
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      assert.equal(c.text, '');
      if (c.prompt_token_ids) {
        assert.equal(promptIds[c.index], undefined, 'prompt_token_ids ride one chunk only');
        promptIds[c.index] = c.prompt_token_ids;
      }
      ids[c.index] = [...(ids[c.index] ?? []), ...c.token_ids];
      if (c.finish_reason) {
        finish[c.index] = c.finish_reason;
        reason[c.index] = c.stop_reason;
      }
    }
  }
  return { ids, promptIds, usage, finish, reason };
}

async function expect400(promise, param) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, 400, String(e));
    assert.equal(e.param, param, String(e));
    return true;
  });
}

test('the model directory is refused without the flag', async () => {
  // Early validation names the missing tokenizer and the flag.
  const r = spawnSync(BIN, ['serve', DIR, '--device', 'cpu', '--port', '0', '--host', '127.0.0.1'],
    { encoding: 'utf8', timeout: 20000 });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr + r.stdout, /no tokenizer\.json in .*--skip-tokenizer-init/);
});

test('token ids in, token ids out; streaming equals non-streaming; usage counts', async () => {
  const r = await client.completions.create({ ...greedy, prompt: PROMPT });
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.text, '');
  assert.deepEqual(c.prompt_token_ids, PROMPT);
  assert.equal(c.token_ids.length, 6);
  for (const id of c.token_ids) assert.ok(Number.isInteger(id) && id >= 0 && id < VOCAB, `${id}`);
  assert.equal(c.finish_reason, 'length');
  assert.deepEqual(r.usage, { prompt_tokens: PROMPT.length, completion_tokens: 6,
    total_tokens: PROMPT.length + 6 });

  const s = await streamIds({ ...greedy, prompt: PROMPT });
  assert.deepEqual(s.ids[0], c.token_ids);
  assert.deepEqual(s.promptIds[0], PROMPT);
  assert.equal(s.finish[0], 'length');
  assert.deepEqual(s.usage, r.usage);
});

test('a list of prompts and n samples: one choice each, ids per choice', async () => {
  const prompts = [PROMPT, [3, 4], [700, 701, 702]];
  const r = await client.completions.create({ ...greedy, prompt: prompts, n: 2, max_tokens: 3 });
  assert.equal(r.choices.length, 6);
  r.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.deepEqual(c.prompt_token_ids, prompts[Math.floor(i / 2)]);
    assert.equal(c.token_ids.length, 3);
  });
  // Greedy: both samples of a prompt agree.
  assert.deepEqual(r.choices[0].token_ids, r.choices[1].token_ids);
  assert.equal(r.usage.prompt_tokens, PROMPT.length + 2 + 3);  // once per prompt, as vLLM
  assert.equal(r.usage.completion_tokens, 18);

  const s = await streamIds({ ...greedy, prompt: prompts, n: 2, max_tokens: 3 });
  for (let i = 0; i < 6; ++i) assert.deepEqual(s.ids[i], r.choices[i].token_ids);
  assert.deepEqual(s.usage, r.usage);
});

test('stop_token_ids, ignore_eos and min_tokens act on ids', async () => {
  const base = await client.completions.create({ ...greedy, prompt: PROMPT });
  const ids = base.choices[0].token_ids;
  // The first occurrence of the third token ends the output there, as its stop_reason.
  const stopId = ids[2];
  const cut = ids.indexOf(stopId);
  const stopped = await client.completions.create({ ...greedy, prompt: PROMPT, stop_token_ids: [stopId] });
  assert.deepEqual(stopped.choices[0].token_ids, ids.slice(0, cut + 1));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].stop_reason, stopId);
  const s = await streamIds({ ...greedy, prompt: PROMPT, stop_token_ids: [stopId] });
  assert.deepEqual(s.ids[0], ids.slice(0, cut + 1));
  assert.equal(s.reason[0], stopId);

  // EOS forced by logit_bias: it ends the output unless ignore_eos; min_tokens holds it back.
  const eos = { model: NAME, temperature: 0, max_tokens: 5, prompt: PROMPT, logit_bias: { [EOS]: 100 } };
  const ended = await client.completions.create(eos);
  assert.deepEqual(ended.choices[0].token_ids, [EOS]);
  assert.equal(ended.choices[0].finish_reason, 'stop');
  assert.equal(ended.choices[0].stop_reason, null);
  const ignored = await client.completions.create({ ...eos, ignore_eos: true });
  assert.deepEqual(ignored.choices[0].token_ids, [EOS, EOS, EOS, EOS, EOS]);
  assert.equal(ignored.choices[0].finish_reason, 'length');
  const held = await client.completions.create({ ...eos, min_tokens: 3 });
  assert.equal(held.choices[0].token_ids.length, 4);
  assert.ok(!held.choices[0].token_ids.slice(0, 3).includes(EOS));
  assert.equal(held.choices[0].token_ids[3], EOS);
  assert.equal(held.choices[0].finish_reason, 'stop');
});

test('return_token_ids false leaves the ids out', async () => {
  const r = await client.completions.create({ ...greedy, prompt: PROMPT, return_token_ids: false });
  assert.equal(r.choices[0].text, '');
  assert.equal(r.choices[0].token_ids, undefined);
  assert.equal(r.usage.completion_tokens, 6);
});

test('everything that needs text is a 400 naming the field', async () => {
  await expect400(client.completions.create({ ...greedy, prompt: 'text' }), 'prompt');
  await expect400(client.completions.create({ ...greedy, prompt: [PROMPT, 'text'] }), 'prompt');
  await expect400(client.completions.create({ ...greedy, prompt: PROMPT, stop: ['x'] }), 'stop');
  await expect400(client.completions.create({ ...greedy, prompt: PROMPT, echo: true }), 'echo');
  await expect400(client.completions.create({ ...greedy, prompt: PROMPT, logprobs: 2 }), 'logprobs');
  await expect400(client.completions.create({ ...greedy, prompt: PROMPT, prompt_logprobs: 1 }),
    'prompt_logprobs');
  await expect400(client.completions.create({ ...greedy, prompt: PROMPT, bad_words: ['x'] }),
    'bad_words');
  await expect400(client.completions.create({
    ...greedy, prompt: PROMPT, response_format: { type: 'json_object' },
  }), 'response_format');
  await expect400(client.completions.create({ ...greedy, prompt: [1, VOCAB] }), null);
  await expect400(client.chat.completions.create({
    model: NAME, messages: [{ role: 'user', content: 'hi' }],
  }), 'messages');
  await expect400(client.responses.create({ model: NAME, input: 'hi' }), 'input');
  for (const [route, body, param] of [['/tokenize', { prompt: 'hi' }, 'prompt'],
    ['/detokenize', { tokens: [1, 2] }, 'tokens']]) {
    const r = await fetch(`${srv.baseURL}${route}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
    });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.param, param);
  }
  // Still serving.
  const r = await client.completions.create({ ...greedy, prompt: PROMPT, max_tokens: 1 });
  assert.equal(r.choices[0].token_ids.length, 1);
});
