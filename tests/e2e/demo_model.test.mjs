// The seed test plan with the real bundled demo model (models/demo-glm5, trained to follow its
// chat template and call tools) through the official openai client: health, a chat answer, a
// streamed tool call, and a final answer that uses the tool result — on one rank and with
// --tensor-parallel-size 2 --sequence-parallel.
import assert from 'node:assert/strict';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';
import OpenAI from 'openai';

import {startServer} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const demo = {
  dir: path.resolve(here, '../../models/demo-glm5'),
  name: 'demo-glm5',
  maxModelLen: 2048
};

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: {type: 'object', properties: {city: {type: 'string'}}, required: ['city']},
  },
};

for (const parallel of [[], ['--tensor-parallel-size', '2', '--sequence-parallel']]) {
  test(`demo model answers and calls tools ${parallel.join(' ') || 'on one rank'}`, async () => {
    const server = await startServer(
        [
          '--enable-auto-tool-choice', '--tool-call-parser', 'glm47', '--reasoning-parser', 'glm45',
          ...parallel
        ],
        {}, demo);
    try {
      assert.equal((await fetch(`${server.baseURL}/health`)).status, 200);
      const client = new OpenAI({baseURL: `${server.baseURL}/v1`, apiKey: 'unused'});

      const answer = await client.chat.completions.create({
        model: demo.name,
        temperature: 0,
        max_tokens: 40,
        messages: [{role: 'user', content: 'What is the capital of France?'}],
        chat_template_kwargs: {enable_thinking: false},
      });
      assert.match(answer.choices[0].message.content, /Paris/);
      assert.equal(answer.choices[0].finish_reason, 'stop');

      const question = {role: 'user', content: 'How is the weather in Paris today?'};
      const stream = await client.chat.completions.create({
        model: demo.name,
        temperature: 0,
        max_tokens: 80,
        stream: true,
        messages: [question],
        tools: [weather],
      });
      let name = '', args = '', id = '', finish = null, reasoning = '';
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        reasoning += choice.delta.reasoning ?? '';
        for (const call of choice.delta.tool_calls ?? []) {
          assert.equal(call.index, 0);
          if (call.id) id = call.id;
          name += call.function?.name ?? '';
          args += call.function?.arguments ?? '';
        }
        finish = choice.finish_reason ?? finish;
      }
      assert.equal(name, 'get_weather');
      assert.deepEqual(JSON.parse(args), {city: 'Paris'});
      assert.ok(id.length > 0);
      assert.equal(finish, 'tool_calls');
      assert.match(reasoning, /weather/);

      const final = await client.chat.completions.create({
        model: demo.name,
        temperature: 0,
        max_tokens: 60,
        tools: [weather],
        messages: [
          question,
          {
            role: 'assistant',
            content: null,
            tool_calls: [{id, type: 'function', function: {name, arguments: args}}]
          },
          {
            role: 'tool',
            tool_call_id: id,
            content: JSON.stringify({city: 'Paris', temperature_c: 18, condition: 'sunny'})
          },
        ],
      });
      const text = final.choices[0].message.content;
      assert.match(text, /18/);
      assert.match(text, /sunny/);
      assert.equal(final.choices[0].finish_reason, 'stop');
    } finally {
      const {code} = await server.stop();
      assert.equal(code, 0, server.log());
    }
  });
}
