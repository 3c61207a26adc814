// Speculative decoding with the MTP layer never changes a streamed tool call (issue 20): the
// demo model (models/demo-glm5) with a random MTP layer, served with and without
// --speculative-config, streams every tool-call sample of its first 100 held-out samples
// through the official openai client; the chunks (reasoning, content, tool-call names and
// arguments, finish reasons) are equal. The MTP layer is written here as
// src/model/mtp_test_checkpoint.h writes it: the last main layer's tensors under the next
// index (with the latest indexer), random enorm, hnorm, shared_head.norm and eh_proj.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';
import OpenAI from 'openai';

import {parsePrometheus, startServer, total} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const demoDir = path.resolve(here, '../../models/demo-glm5');

function readSafetensors(file) {
  const buf = fs.readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const tensors = [];
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const [a, b] = t.data_offsets;
    tensors.push({name, dtype: t.dtype, shape: t.shape, data: buf.subarray(8 + n + a, 8 + n + b)});
  }
  return tensors;
}

function writeSafetensors(file, tensors) {
  const header = {};
  let offset = 0;
  for (const t of tensors) {
    header[t.name] = {dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.data.length]};
    offset += t.data.length;
  }
  let json = JSON.stringify(header);
  json += ' '.repeat((8 - (json.length % 8)) % 8);
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  fs.writeFileSync(file, Buffer.concat([len, Buffer.from(json), ...tensors.map((t) => t.data)]));
}

// Seeded uniform floats in offset ± bound as F32 bytes.
function randomF32(count, offset, bound, state) {
  const out = Buffer.alloc(4 * count);
  for (let i = 0; i < count; ++i) {
    state.s = (Math.imul(state.s, 1664525) + 1013904223) >>> 0;
    out.writeFloatLE(offset + bound * (2 * (state.s / 2 ** 32) - 1), 4 * i);
  }
  return out;
}

function writeMtpCopy(dir) {
  const config = JSON.parse(fs.readFileSync(path.join(demoDir, 'config.json'), 'utf8'));
  config.num_nextn_predict_layers = 1;
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config, null, 2));
  for (const f of fs.readdirSync(demoDir))
    if (!['config.json', 'model.safetensors', 'golden.json'].includes(f))
      fs.copyFileSync(path.join(demoDir, f), path.join(dir, f));
  fs.copyFileSync(path.join(demoDir, 'model.safetensors'),
                  path.join(dir, 'model-00001-of-00002.safetensors'));
  const main = readSafetensors(path.join(demoDir, 'model.safetensors'));
  const n = config.num_hidden_layers, H = config.hidden_size;
  const mtp = `model.layers.${n}.`;
  const copy = (from) => main.filter((t) => t.name.startsWith(from))
                             .map((t) => ({...t, name: mtp + t.name.slice(from.length)}));
  const tensors = copy(`model.layers.${n - 1}.`);
  for (let L = n - 2; !tensors.some((t) => t.name.includes('.indexer.')) && L >= 0; --L)
    tensors.push(...copy(`model.layers.${L}.`).filter((t) => t.name.includes('.indexer.')));
  const state = {s: 11};
  for (const norm of ['enorm.weight', 'hnorm.weight', 'shared_head.norm.weight'])
    tensors.push({name: mtp + norm, dtype: 'F32', shape: [H], data: randomF32(H, 1, 0.1, state)});
  tensors.push({name: mtp + 'eh_proj.weight', dtype: 'F32', shape: [H, 2 * H],
                data: randomF32(2 * H * H, 0, Math.sqrt(3 / (2 * H)), state)});
  writeSafetensors(path.join(dir, 'model-00002-of-00002.safetensors'), tensors);
}

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

test('streamed tool calls with MTP on equal those with MTP off', {timeout: 180000}, async () => {
  const golden = JSON.parse(fs.readFileSync(path.join(demoDir, 'golden.json'), 'utf8'));
  const samples = golden.heldout_eval.slice(0, 100).filter((s) => s.category === 'tool_call');
  assert.ok(samples.length >= 10, `${samples.length} tool-call samples`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'mlaserve-mtp-'));
  try {
    writeMtpCopy(dir);
    const model = {dir, name: 'demo', maxModelLen: 2048};
    const flags = ['--device', 'cpu', '--enable-auto-tool-choice', '--tool-call-parser', 'glm47',
                   '--reasoning-parser', 'glm45'];
    const results = {};
    for (const [mode, extra] of [['off', []],
                                 ['on', ['--speculative-config',
                                         '{"method":"mtp","num_speculative_tokens":3}']]]) {
      const server = await startServer([...flags, ...extra], {}, model);
      try {
        const client = new OpenAI({baseURL: `${server.baseURL}/v1`, apiKey: 'unused'});
        results[mode] = [];
        for (const s of samples) results[mode].push(await streamed(client, s));
        const metrics = parsePrometheus(await (await fetch(`${server.baseURL}/metrics`)).text());
        const drafts = total(metrics, 'vllm:spec_decode_num_draft_tokens_total');
        if (mode === 'on') {
          assert.ok(drafts > 0, 'drafts were verified');
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
  } finally {
    fs.rmSync(dir, {recursive: true, force: true});
  }
});
