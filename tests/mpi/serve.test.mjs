// The server under `mpirun -np 2` (tensor parallelism 2, one rank per process, CPU) against the
// official openai client: health, a greedy chat equal to the single-process server's, a streamed
// tool call finishing with tool_calls, and a tool-result round trip; SIGTERM to rank 0 drains
// the request in flight and stops both processes with exit 0.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { collectChat } from '../e2e/harness.mjs';
import { openaiClient, startServer } from './mpi_harness.mjs';

const OpenAI = await openaiClient();
const skip = OpenAI ? false : 'tests/e2e/node_modules/openai is missing; run `npm ci --prefix tests/e2e`';

const chat = { model: 'demo', messages: [{ role: 'user', content: 'What is the capital of France?' }],
  max_tokens: 24, temperature: 0 };

test('greedy chat under mpirun equals the single-process server', { skip }, async () => {
  const answers = [];
  for (const np of [2, 0]) {
    const srv = await startServer([], { np });
    try {
      assert.equal((await fetch(`${srv.baseURL}/health`)).status, 200);
      const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
      const r = await client.chat.completions.create(chat);
      assert.ok(r.choices[0].message.content.length > 0);
      answers.push(r.choices[0].message.content);
    } finally {
      const { code } = await srv.stop();
      assert.equal(code, 0, srv.log());
    }
  }
  assert.equal(answers[0], answers[1]);
});

const script = 'Let me check.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key>'
  + '<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>';
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}];

test('streamed tool call and tool-result round trip under mpirun -np 2', { skip }, async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlaserve-mpi-'));
  const file = path.join(dir, 'script.txt');
  fs.writeFileSync(file, script);
  const srv = await startServer(['--enable-auto-tool-choice', '--tool-call-parser', 'glm47',
    '--reasoning-parser', 'glm45', '--test-script', file]);
  try {
    const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
    const messages = [{ role: 'user', content: 'Weather in Paris for two days?' }];
    const { content, calls, finish } = await collectChat(
      await client.chat.completions.create({ model: 'demo', messages, tools, max_tokens: 200, stream: true }));
    assert.equal(finish, 'tool_calls');
    assert.equal(content, 'Sure.');
    assert.equal(calls.length, 1);
    assert.equal(calls[0].name, 'get_weather');
    assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris', days: 2 });

    // The tool's result goes back in the history; the model answers (the script again).
    const followUp = await client.chat.completions.create({
      model: 'demo', tools, max_tokens: 200,
      messages: [...messages,
        { role: 'assistant', content: null, tool_calls: [{ id: calls[0].id, type: 'function', function: { name: 'get_weather', arguments: calls[0].arguments } }] },
        { role: 'tool', tool_call_id: calls[0].id, content: 'sunny, 24 °C' }],
    });
    assert.equal(followUp.choices[0].finish_reason, 'tool_calls');
    assert.ok(followUp.usage.prompt_tokens > 0);
  } finally {
    const { code } = await srv.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    assert.equal(code, 0, srv.log());
  }
});

test('SIGTERM to rank 0 drains the request in flight and stops every process', { skip }, async () => {
  const srv = await startServer([]);
  const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
  const stream = await client.chat.completions.create({ ...chat, max_tokens: 64, stream: true,
    stream_options: { include_usage: true } });
  let stopped = null;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    stopped ??= srv.stop();
    finish = chunk.choices[0]?.finish_reason ?? finish;
    usage = chunk.usage ?? usage;
  }
  const { code } = await stopped;
  assert.equal(code, 0, srv.log());
  assert.ok(finish === 'length' || finish === 'stop', srv.log());
  assert.ok(usage.completion_tokens > 1);
});
