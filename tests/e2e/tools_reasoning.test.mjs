// Tool calls and reasoning end to end for each tool-call parser. A random-weight model never
// writes tool calls, so the server runs with the hidden --test-script flag: every request
// outputs the tokenization of a scripted text instead of sampled tokens.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { collectChat, startServer, MODEL_NAME } from './harness.mjs';

const scripts = {
  glm47: 'Let me check.</think>Sure.<tool_call>get_weather<arg_key>city</arg_key>'
    + '<arg_value>Paris</arg_value><arg_key>days</arg_key><arg_value>2</arg_value></tool_call>',
  deepseek_v31: 'Let me check.</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather'
    + '<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
  deepseek_v32: 'Let me check.</think>Sure.<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_weather">\n'
    + '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
    + '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
    + '</｜DSML｜invoke>\n</｜DSML｜function_calls>',
};

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast',
    parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
  },
}];

const messages = [
  { role: 'user', content: 'Weather in Rome?' },
  { role: 'assistant', content: null, reasoning_content: 'Rome first.', tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Rome"}' } }] },
  { role: 'tool', tool_call_id: 'call_0', content: 'sunny' },
  { role: 'user', content: 'And Paris for two days?' },
];

for (const [parser, script] of Object.entries(scripts)) {
  test(`tool calls and reasoning with --tool-call-parser ${parser}`, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlaserve-e2e-'));
    const file = path.join(dir, 'script.txt');
    fs.writeFileSync(file, script);
    const srv = await startServer(['--enable-auto-tool-choice', '--tool-call-parser', parser,
      '--reasoning-parser', 'glm45', '--test-script', file]);
    try {
      const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
      const params = { model: MODEL_NAME, messages, tools, max_tokens: 200 };

      const r = await client.chat.completions.create(params);
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.equal(choice.message.reasoning_content, 'Let me check.');
      assert.equal(choice.message.reasoning, 'Let me check.');
      assert.equal(choice.message.content, 'Sure.');
      assert.equal(choice.message.tool_calls.length, 1);
      const call = choice.message.tool_calls[0];
      assert.match(call.id, /^call_/);
      assert.equal(call.function.name, 'get_weather');
      assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 2 });

      const { reasoning, content, calls, finish } =
        await collectChat(await client.chat.completions.create({ ...params, stream: true }));
      assert.equal(finish, 'tool_calls');
      assert.equal(reasoning, 'Let me check.');
      assert.equal(content, 'Sure.');
      assert.equal(calls.length, 1);
      assert.equal(calls[0].name, 'get_weather');
      assert.deepEqual(JSON.parse(calls[0].arguments), { city: 'Paris', days: 2 });

      // A named tool_choice finishes with "stop"; include_reasoning: false drops the reasoning.
      const named = await client.chat.completions.create({
        ...params, include_reasoning: false,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      assert.equal(named.choices[0].finish_reason, 'stop');
      assert.equal(named.choices[0].message.reasoning_content, undefined);
      assert.equal(named.choices[0].message.tool_calls[0].function.name, 'get_weather');

      // Parameters outside the grammar's JSON Schema subset ("minimum"): under auto the call is
      // left free (no 400, the call parses); a required call cannot be enforced (400).
      const loose = [{ ...tools[0], function: { ...tools[0].function, parameters: {
        ...tools[0].function.parameters,
        properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1 } } } } }];
      const free = await client.chat.completions.create({ ...params, tools: loose });
      assert.equal(free.choices[0].message.tool_calls[0].function.name, 'get_weather');
      await assert.rejects(
        client.chat.completions.create({ ...params, tools: loose, tool_choice: 'required' }),
        (e) => e.status === 400 && e.param === 'tools' && /minimum/.test(e.message));
    } finally {
      const { code } = await srv.stop();
      fs.rmSync(dir, { recursive: true, force: true });
      assert.equal(code, 0, srv.log());
    }
  });
}

test('tool_choice auto is refused without --enable-auto-tool-choice', async () => {
  const srv = await startServer([]);
  try {
    const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });
    await assert.rejects(
      client.chat.completions.create({ model: MODEL_NAME, messages, tools, max_tokens: 4 }),
      (e) => e.status === 400 && /tool/.test(e.message));
  } finally {
    await srv.stop();
  }
});
