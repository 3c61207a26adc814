// A copy of a model directory with one MTP layer of random weights, written as
// src/model/mtp_test_checkpoint.h writes it (the end-to-end and mpirun tests of speculative
// decoding serve it): the last main layer's tensors under the next layer index (and the latest
// indexer on DSA models whose last layer shares one), random enorm, hnorm, shared_head.norm and
// eh_proj, in a second safetensors file; num_nextn_predict_layers 1.
import fs from 'node:fs';
import path from 'node:path';

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

export function writeMtpCopy(demoDir, dir) {
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
