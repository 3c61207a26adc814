// Speculative decoding with the MTP layer never changes a streamed tool call (issue 20): the
// demo model (models/demo-glm5) with its trained MTP layer, served with and without
// --speculative-config, streams every tool-call sample of its first 100 held-out samples
// through the official openai client; the chunks (reasoning, content, tool-call names and
// arguments, finish reasons) are equal.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';
import OpenAI from 'openai';

import {parsePrometheus, SLOWDOWN, startServer, total} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const demoDir = path.resolve(here, '../../models/demo-glm5');

// Every streamed chunk's choice deltas, without the ids and timestamps that differ per request.
async function streamed(client, sample) {
  const stream = await client.chat.completions.create({
    model: 'demo',
    temperature: 0,
    max_tokens: sample.target_ids.length + 8,
    stream: true,
    messages: sample.messages,
    tools: sample.tools,
    chat_template_kwargs: {enable_thinking: sample.enable_thinking},
  });
  const chunks = [];
  for await (const chunk of stream) {
    for (const choice of chunk.choices) {
      const delta = {...choice.delta};
      if (delta.tool_calls)
        delta.tool_calls = delta.tool_calls.map(({id, ...call}) => ({...call, has_id: !!id}));
      chunks.push({delta, finish: choice.finish_reason ?? null});
    }
  }
  return chunks;
}

// The demo model served with the GLM parsers, without and with MTP (k = 3).
const demoModel = {dir: demoDir, name: 'demo', maxModelLen: 2048};
const demoFlags = ['--device', 'cpu', '--enable-auto-tool-choice', '--tool-call-parser', 'glm47',
                   '--reasoning-parser', 'glm45'];
const mtpModes = [['off', []],
                  ['on', ['--speculative-config', '{"method":"mtp","num_speculative_tokens":3}']]];

test('streamed tool calls with MTP on equal those with MTP off', {timeout: 180000 * SLOWDOWN},
     async () => {
  const golden = JSON.parse(fs.readFileSync(path.join(demoDir, 'golden.json'), 'utf8'));
  const samples = golden.heldout_eval.slice(0, 100).filter((s) => s.category === 'tool_call');
  assert.ok(samples.length >= 10, `${samples.length} tool-call samples`);
  const results = {};
  for (const [mode, extra] of mtpModes) {
    const server = await startServer([...demoFlags, ...extra], {}, demoModel);
    try {
      const client = new OpenAI({baseURL: `${server.baseURL}/v1`, apiKey: 'unused'});
      results[mode] = [];
      for (const s of samples) results[mode].push(await streamed(client, s));
      const metrics = parsePrometheus(await (await fetch(`${server.baseURL}/metrics`)).text());
      const drafts = total(metrics, 'vllm:spec_decode_num_draft_tokens_total');
      if (mode === 'on') {
        // The trained layer's drafts are mostly right, so accepted drafts carry tool-call tokens.
        const accepted = total(metrics, 'vllm:spec_decode_num_accepted_tokens_total');
        assert.ok(drafts > 0 && accepted >= drafts / 2, `${accepted} of ${drafts} drafts accepted`);
        console.log(`MTP k=3 on the tool-call samples: ${accepted} of ${drafts} drafts accepted`);
        assert.ok(server.log().includes('Speculative decoding: method mtp, 3 draft tokens'),
                  server.log());
      } else {
        assert.equal(drafts, 0);
      }
    } finally {
      const {code} = await server.stop();
      assert.equal(code, 0, server.log());
    }
  }
  let calls = 0;
  for (let i = 0; i < samples.length; ++i) {
    assert.deepEqual(results.on[i], results.off[i], samples[i].id);
    calls += results.off[i].some((c) => c.delta.tool_calls) ? 1 : 0;
  }
  assert.ok(calls >= samples.length / 2, `${calls} of ${samples.length} streamed a tool call`);
});

// tool_choice "auto" constrains a call once it starts (the tool-call grammar from the
// <tool_call> marker on): a logit_bias that pushes " dark" into the call's number argument
// breaks the call unconstrained (tool_choice "none" shows the raw text), yet the streamed call
// under "auto" parses with a number, MTP on or off, in equal chunks, and so does the
// Responses API's function call. With a structured output the content follows it instead.
// Samples that answer without a call (tools present) keep the unconstrained content.
test('a biased token cannot break a call under tool_choice auto, with or without MTP',
     {timeout: 120000 * SLOWDOWN}, async () => {
  const golden = JSON.parse(fs.readFileSync(path.join(demoDir, 'golden.json'), 'utf8'));
  const sample = golden.heldout_eval.find((s) => s.id === 's1-10');
  const answers = golden.heldout_eval.slice(0, 100).filter((s) => s.category === 'tool_answer')
                      .slice(0, 5);
  const vocab = JSON.parse(fs.readFileSync(path.join(demoDir, 'tokenizer.json'), 'utf8')).model.vocab;
  const bias = {[vocab['\u0120dark']]: 9};
  const request = (s, extra) => ({
    model: 'demo',
    temperature: 0,
    max_tokens: s.target_ids.length + 8,
    messages: s.messages,
    tools: s.tools,
    chat_template_kwargs: {enable_thinking: s.enable_thinking},
    ...extra,
  });
  const streams = {};
  for (const [mode, extra] of mtpModes) {
    const server = await startServer([...demoFlags, ...extra], {}, demoModel);
    try {
      const client = new OpenAI({baseURL: `${server.baseURL}/v1`, apiKey: 'unused'});
      const free = await client.chat.completions.create(
          request(sample, {tool_choice: 'none', logit_bias: bias}));
      assert.match(free.choices[0].message.content, /<arg_value> dark/);
      assert.equal(free.choices[0].message.tool_calls, undefined);
      const stream = await client.chat.completions.create(
          request(sample, {tool_choice: 'auto', logit_bias: bias, stream: true}));
      streams[mode] = [];
      for await (const chunk of stream) {
        for (const choice of chunk.choices) {
          const delta = {...choice.delta};
          if (delta.tool_calls)
            delta.tool_calls = delta.tool_calls.map(({id, ...call}) => ({...call, has_id: !!id}));
          streams[mode].push({delta, finish: choice.finish_reason ?? null});
        }
      }
      const args = streams[mode].flatMap((c) => c.delta.tool_calls ?? [])
                       .map((t) => t.function?.arguments ?? '').join('');
      assert.equal(JSON.parse(args).value, 65, args);
      assert.equal(streams[mode].at(-1).finish, 'tool_calls');
      // The Responses API maps its tools onto the same chat request: the same grammar.
      const response = await client.responses.create({
        model: 'demo',
        temperature: 0,
        max_output_tokens: sample.target_ids.length + 8,
        input: sample.messages,
        tools: sample.tools.map((t) => ({type: 'function', ...t.function})),
        chat_template_kwargs: {enable_thinking: sample.enable_thinking},
        logit_bias: bias,
      });
      const calls = response.output.filter((item) => item.type === 'function_call');
      assert.equal(calls.length, 1, JSON.stringify(response.output));
      assert.equal(JSON.parse(calls[0].arguments).value, 65);
      // A structured output with tools under "auto" constrains the content instead (no 400).
      const chosen = await client.chat.completions.create(
          request(sample, {structured_outputs: {choice: ['yes', 'no']}}));
      assert.ok(['yes', 'no'].includes(chosen.choices[0].message.content),
                JSON.stringify(chosen.choices[0].message));
      assert.equal(chosen.choices[0].message.tool_calls, undefined);
      for (const s of answers) {
        const auto = await client.chat.completions.create(request(s, {}));
        const none = await client.chat.completions.create(request(s, {tool_choice: 'none'}));
        assert.ok(auto.choices[0].message.content, s.id);
        assert.equal(auto.choices[0].message.tool_calls, undefined, s.id);
        assert.equal(auto.choices[0].message.content, none.choices[0].message.content, s.id);
      }
    } finally {
      const {code} = await server.stop();
      assert.equal(code, 0, server.log());
    }
  }
  assert.deepEqual(streams.on, streams.off);
});
