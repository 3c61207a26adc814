// The Responses API and the remaining sampling fields through the official openai client, on the
// bundled demo model (trained: it answers, reasons and calls tools), with the README's flags.
// Prompt logprobs are checked against a teacher-forced `mlaserve logits` run of the same ids.
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {after, before, test} from 'node:test';
import {fileURLToPath} from 'node:url';
import OpenAI from 'openai';

import {BIN, startServer} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const demo = {dir: path.resolve(here, '../../models/demo-glm5'), name: 'demo-glm5', maxModelLen: 2048};

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'Get the current weather in a city',
  parameters: {type: 'object', properties: {city: {type: 'string'}}, required: ['city']},
  strict: false,
};
const noThinking = {chat_template_kwargs: {enable_thinking: false}};

let srv;
let client;

before(async () => {
  srv = await startServer(
      ['--enable-auto-tool-choice', '--tool-call-parser', 'glm47', '--reasoning-parser', 'glm45'],
      {}, demo);
  client = new OpenAI({baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000});
});

after(async () => {
  const {code} = await srv.stop();
  assert.equal(code, 0, srv.log());
});

async function post(route, body) {
  const r = await fetch(`${srv.baseURL}${route}`,
                        {method: 'POST', headers: {'content-type': 'application/json'}, body: JSON.stringify(body)});
  return {status: r.status, body: await r.json()};
}

test('responses: plain answer, and the same answer streamed through ResponseStream', async () => {
  const params = {
    model: demo.name, input: 'What is the capital of France?', temperature: 0,
    max_output_tokens: 40, ...noThinking,
  };
  const r = await client.responses.create(params);
  // Instructions become a system message ahead of the input (the demo model was not trained on
  // them, so only the prompt length and the echo are checked).
  const instructed = await client.responses.create({...params, instructions: 'Answer briefly.'});
  assert.equal(instructed.instructions, 'Answer briefly.');
  assert.ok(instructed.usage.input_tokens > r.usage.input_tokens);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.match(r.id, /^resp_/);
  assert.match(r.output_text, /Paris/);
  assert.equal(r.instructions, null);
  assert.equal(r.max_output_tokens, 40);
  const message = r.output.find((o) => o.type === 'message');
  assert.equal(message.content[0].type, 'output_text');
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);

  // The SDK's stream helper checks every event against its snapshot (indices, ids, types).
  const stream = client.responses.stream(params);
  const types = [];
  let deltas = '';
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') deltas += event.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.completed');
  for (const t of ['response.output_item.added', 'response.content_part.added',
                   'response.output_text.done', 'response.content_part.done', 'response.output_item.done'])
    assert.ok(types.includes(t), t);
  assert.equal(deltas, r.output_text);
  assert.equal(final.output_text, r.output_text);

  const short = await client.responses.create({...params, max_output_tokens: 2});
  assert.equal(short.status, 'incomplete');
  assert.equal(short.incomplete_details.reason, 'max_output_tokens');
});

test('responses: a tool call round trip through previous_response_id', async () => {
  const question = {
    model: demo.name, input: 'How is the weather in Paris today?', tools: [weather],
    temperature: 0, max_output_tokens: 80,
  };
  // Streamed: reasoning, then the call's arguments in pieces.
  const stream = client.responses.stream(question);
  let args = '';
  let reasoning = '';
  for await (const event of stream) {
    if (event.type === 'response.function_call_arguments.delta') args += event.delta;
    if (event.type === 'response.reasoning_text.delta') reasoning += event.delta;
  }
  const first = await stream.finalResponse();
  const call = first.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(first.output));
  assert.equal(call.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.arguments), {city: 'Paris'});
  assert.equal(args, call.arguments);
  assert.match(call.call_id, /\S/);
  assert.match(reasoning, /weather/);
  assert.equal(first.output.find((o) => o.type === 'reasoning').content[0].text, reasoning);

  const answer = await client.responses.create({
    model: demo.name, previous_response_id: first.id, tools: [weather], temperature: 0,
    max_output_tokens: 60,
    input: [{
      type: 'function_call_output', call_id: call.call_id,
      output: JSON.stringify({city: 'Paris', temperature_c: 18, condition: 'sunny'}),
    }],
  });
  assert.equal(answer.previous_response_id, first.id);
  assert.match(answer.output_text, /18/);
  assert.match(answer.output_text, /sunny/);

  // store: false keeps nothing to continue from.
  const unstored = await client.responses.create({...question, store: false});
  assert.equal(unstored.store, false);
  await assert.rejects(
      client.responses.create({model: demo.name, previous_response_id: unstored.id, input: 'and?'}),
      (e) => e.status === 404 && /not found/.test(e.message));
});

// Reads the one f32 tensor of a safetensors file written by `mlaserve logits`.
function readLogits(file) {
  const buf = fs.readFileSync(file);
  const len = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + len).toString());
  const {shape, data_offsets: [begin, end]} = header.logits;
  const data = new Float32Array(buf.buffer.slice(buf.byteOffset + 8 + len + begin, buf.byteOffset + 8 + len + end));
  return {rows: shape[0], vocab: shape[1], data};
}

test('prompt logprobs equal the log_softmax of a teacher-forced logits run; echo reports them', async () => {
  const {body: tok} = await post('/tokenize', {model: demo.name, add_special_tokens: false, prompt: 'The weather in Paris is sunny today.'});
  const ids = tok.tokens;
  assert.ok(ids.length > 4);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlaserve-logits-'));
  const out = path.join(dir, 'logits.safetensors');
  const run = spawnSync(BIN, ['logits', '--model', demo.dir, '--prompt-ids', ids.join(','), '--out', out],
                        {encoding: 'utf8', timeout: 60000});
  assert.equal(run.status, 0, run.stderr);
  const {vocab, data} = readLogits(out);
  fs.rmSync(dir, {recursive: true});
  const logSoftmax = (row, id) => {
    const x = data.subarray(row * vocab, (row + 1) * vocab);
    const max = x.reduce((a, b) => Math.max(a, b), -Infinity);
    let sum = 0;
    for (const v of x) sum += Math.exp(v - max);
    return x[id] - max - Math.log(sum);
  };

  const scored = await client.completions.create(
      {model: demo.name, prompt: ids, max_tokens: 1, temperature: 0, prompt_logprobs: 2});
  const plp = scored.choices[0].prompt_logprobs;
  assert.equal(plp.length, ids.length);
  assert.equal(plp[0], null);
  for (let i = 1; i < ids.length; ++i) {
    const entry = plp[i][String(ids[i])];
    assert.ok(entry, `position ${i}`);
    assert.ok(Math.abs(entry.logprob - logSoftmax(i - 1, ids[i])) < 1e-5,
              `position ${i}: ${entry.logprob} vs ${logSoftmax(i - 1, ids[i])}`);
    assert.ok(Object.keys(plp[i]).length >= 2);
  }

  // Chat reports them once per response.
  const chat = await post('/v1/chat/completions', {
    model: demo.name, messages: [{role: 'user', content: 'Hi'}], max_tokens: 1, prompt_logprobs: 0,
  });
  assert.equal(chat.status, 200);
  assert.equal(chat.body.prompt_logprobs[0], null);
  assert.equal(chat.body.usage.prompt_tokens, chat.body.prompt_logprobs.length);

  for (const stream of [false, true]) {
    const params = {model: demo.name, prompt: ids, max_tokens: 3, temperature: 0, ignore_eos: true, echo: true, logprobs: 1};
    let text = '';
    let lp = {tokens: [], token_logprobs: [], top_logprobs: [], text_offset: []};
    if (stream) {
      for await (const c of await client.completions.create({...params, stream: true})) {
        text += c.choices[0]?.text ?? '';
        for (const k of Object.keys(lp)) lp[k].push(...(c.choices[0]?.logprobs?.[k] ?? []));
      }
    } else {
      const echo = await client.completions.create(params);
      text = echo.choices[0].text;
      lp = echo.choices[0].logprobs;
    }
    assert.equal(lp.tokens.length, ids.length + 3, `stream ${stream}`);
    assert.equal(lp.token_logprobs[0], null);
    assert.equal(lp.top_logprobs[0], null);
    assert.equal(lp.text_offset[0], 0);
    assert.ok(text.startsWith('The weather in Paris is sunny today.'));
    for (let i = 1; i < ids.length; ++i)
      assert.ok(Math.abs(lp.token_logprobs[i] - plp[i][String(ids[i])].logprob) < 1e-6);
  }
});

test('logit_bias forces a token; allowed_token_ids and bad_words constrain the output', async () => {
  const {body: tok} = await post('/tokenize', {model: demo.name, add_special_tokens: false, prompt: ' banana'});
  const banana = tok.tokens.at(-1);
  const base = {model: demo.name, prompt: 'The capital of France is', max_tokens: 4, temperature: 0};
  const forced = await post('/v1/completions', {...base, logit_bias: {[banana]: 100}, logprobs: 0});
  assert.equal(forced.status, 200);
  const {body: detok} = await post('/detokenize', {model: demo.name, tokens: [banana, banana, banana, banana]});
  assert.equal(forced.body.choices[0].text, detok.prompt);

  const allowed = await post('/v1/completions', {...base, allowed_token_ids: [banana]});
  assert.equal(allowed.body.choices[0].text, detok.prompt);

  // bad_words bans token sequences ("Paris" and " Paris" as the tokenizer splits them).
  const plain = await client.completions.create({...base, logprobs: 0});
  assert.match(plain.choices[0].text, /Paris/);
  const banned = await client.completions.create({...base, logprobs: 0, bad_words: ['Paris']});
  assert.notEqual(banned.choices[0].text, plain.choices[0].text);
  const tokens = banned.choices[0].logprobs.tokens;
  for (const word of ['Paris', ' Paris']) {
    const {body: w} = await post('/tokenize', {model: demo.name, add_special_tokens: false, prompt: word, return_token_strs: true});
    const strs = (await post('/detokenize', {model: demo.name, tokens: w.tokens})).body.prompt;
    if (w.tokens.length === 1) assert.ok(!tokens.includes(strs), `${JSON.stringify(tokens)} holds ${word}`);
  }

  const vocab = 1 << 20;
  const bad = await post('/v1/completions', {...base, logit_bias: {[vocab]: 5}});
  assert.equal(bad.status, 400);
  assert.match(bad.body.error.message, /logit_bias/);
});

test('stop strings and stop ids: include_stop_str_in_output and stop_reason', async () => {
  const ask = {
    model: demo.name, messages: [{role: 'user', content: 'What is the capital of France?'}],
    temperature: 0, max_tokens: 40, ...noThinking,
  };
  const full = await client.chat.completions.create(ask);
  assert.match(full.choices[0].message.content, /Paris/);
  assert.equal(full.choices[0].stop_reason, null);  // EOS

  const cut = await client.chat.completions.create({...ask, stop: ['Paris']});
  assert.ok(!cut.choices[0].message.content.includes('Paris'));
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].stop_reason, 'Paris');
  const kept = await client.chat.completions.create({...ask, stop: ['Paris'], include_stop_str_in_output: true});
  assert.ok(kept.choices[0].message.content.endsWith('Paris'));
  assert.equal(kept.choices[0].message.content, cut.choices[0].message.content + 'Paris');
  assert.equal(kept.choices[0].stop_reason, 'Paris');

  const text = await client.completions.create({model: demo.name, prompt: 'The capital of France is',
                                                max_tokens: 6, temperature: 0});
  const {body: tok} = await post('/tokenize', {model: demo.name, add_special_tokens: false, prompt: text.choices[0].text});
  const second = tok.tokens[1];
  const byId = await client.completions.create({model: demo.name, prompt: 'The capital of France is',
                                                max_tokens: 6, temperature: 0, stop_token_ids: [second]});
  assert.equal(byId.choices[0].finish_reason, 'stop');
  assert.equal(byId.choices[0].stop_reason, second);
  const long = await client.completions.create({model: demo.name, prompt: 'The capital of France is',
                                               max_tokens: 1, temperature: 0});
  assert.equal(long.choices[0].finish_reason, 'length');
  assert.equal(long.choices[0].stop_reason, null);
});

test('continuous_usage_stats puts the usage so far on every chunk', async () => {
  const stream = await client.chat.completions.create({
    model: demo.name, messages: [{role: 'user', content: 'Hello!'}], max_tokens: 8, temperature: 0,
    stream: true, stream_options: {include_usage: true, continuous_usage_stats: true},
  });
  let last = 0;
  let chunks = 0;
  for await (const c of stream) {
    ++chunks;
    assert.ok(c.usage, JSON.stringify(c));
    assert.ok(c.usage.completion_tokens >= last);
    last = c.usage.completion_tokens;
  }
  assert.ok(chunks > 2);
  assert.ok(last > 0);
});

test('unknown fields are ignored and logged once per name; unsupported ones are a 400', async () => {
  const body = {model: demo.name, prompt: 'Hi', max_tokens: 1, mystery_field_x: 1};
  assert.equal((await post('/v1/completions', body)).status, 200);
  assert.equal((await post('/v1/completions', body)).status, 200);
  assert.equal(srv.log().split("ignored: {'mystery_field_x'}").length - 1, 1, srv.log());
  const beam = await post('/v1/completions', {...body, use_beam_search: true});
  assert.equal(beam.status, 400);
  assert.equal(beam.body.error.param, 'use_beam_search');
});
