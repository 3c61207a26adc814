// `mlaserve serve` as a drop-in for `vllm serve`: each vLLM recipe's command line for
// DeepSeek-V3/R1, DeepSeek-V3.2 and GLM-5/5.1, with the bundled demo model in place of the
// checkpoint and --device cpu, starts and answers; the golden start-up line of each flag class;
// early validation (every problem at once, in well under a second, before any weight is read);
// a model named by Hugging Face id from a local cache; /load, /v1/models/{id}, /metrics names,
// --disable-ui and --version.
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';

import {BIN, freePort, parsePrometheus, SLOWDOWN, spawnHealthy, terminate} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const DEMO = path.resolve(here, '../../models/demo-glm5');
const TINY_CHAT = path.resolve(here, '../../models/tiny-glm5-chat');

// Starts `mlaserve serve ARGS` on 127.0.0.1 with a small CPU KV pool; resolves once /health is
// 200. The caller's args are the recipe's, model first.
async function serve(args, env = {}) {
  const port = await freePort();
  const all = ['serve', ...args, '--device', 'cpu', '--host', '127.0.0.1', '--port', String(port),
               '--kv-cache-memory-bytes', '64MiB'];
  const server = await spawnHealthy(BIN, all, {port, env, timeoutMs: 60000});
  return {
    baseURL: server.baseURL,
    log: server.log,
    stop: async () => (await terminate(server)).code,
  };
}

async function chat(baseURL, model) {
  const r = await fetch(`${baseURL}/v1/chat/completions`, {
    method: 'POST',
    headers: {'Content-Type': 'application/json'},
    body: JSON.stringify({model, messages: [{role: 'user', content: 'Hello!'}], max_tokens: 8,
                          temperature: 0}),
  });
  const body = await r.json();
  assert.equal(r.status, 200, JSON.stringify(body));
  assert.ok(body.choices[0].message.content.length > 0 || body.choices[0].message.reasoning,
            JSON.stringify(body));
  return body;
}

// The recipes' serve lines (vllm-project/recipes), the model replaced by the demo model.
const recipes = [
  {
    name: 'DeepSeek-V3/R1 FP8 on 8xH200',
    args: ['--trust-remote-code', '--tensor-parallel-size', '8', '--enable_expert_parallel'],
  },
  {
    name: 'DeepSeek-V3/R1 with the recipe\'s tuning flags',
    args: ['--trust-remote-code', '--tensor-parallel-size', '8', '--enable_expert_parallel',
           '--max-model-len=2k', '--max-num-batched-tokens=32768',
           '--gpu-memory-utilization=0.95', '--no-enable-prefix-caching'],
  },
  {
    name: 'DeepSeek-V3.2',
    args: ['--tensor-parallel-size', '8', '--tokenizer-mode', 'deepseek_v32',
           '--tool-call-parser', 'deepseek_v32', '--enable-auto-tool-choice',
           '--reasoning-parser', 'deepseek_v3'],
  },
  {
    name: 'DeepSeek-V3.2-Exp tensor parallel, bf16 KV cache',
    args: ['-tp', '8', '--kv-cache-dtype', 'bfloat16', '--max-num-seqs', '256'],
  },
  {
    name: 'GLM-5/5.1 FP8',
    args: ['--tensor-parallel-size', '8', '--tool-call-parser', 'glm47', '--reasoning-parser',
           'glm45', '--enable-auto-tool-choice', '--chat-template-content-format=string',
           '--served-model-name', 'glm-5.1-fp8'],
    model: 'glm-5.1-fp8',
  },
  {
    name: 'the issue\'s pasted flags',
    args: ['--trust-remote-code', '--kv-cache-dtype', 'auto', '--dtype', 'auto',
           '--enable-expert-parallel', '--max-model-len', '2K', '--enable-prefix-caching',
           '--seed', '0', '--swap-space', '16', '--disable-log-requests',
           '--distributed-executor-backend', 'mp', '--compilation-config',
           '{"cudagraph_mode": "FULL_AND_PIECEWISE"}', '--async-scheduling',
           '--disable-fastapi-docs', '--enforce-eager'],
  },
];

for (const recipe of recipes) {
  test(`recipe line serves: ${recipe.name}`, async () => {
    const server = await serve([DEMO, ...recipe.args]);
    try {
      await chat(server.baseURL, recipe.model ?? DEMO);
    } finally {
      assert.equal(await server.stop(), 0, server.log());
    }
  });
}

// The recipe lines that cannot run here stop before loading, saying what to use instead.
const refused = [
  {
    name: 'GLM-5 with MTP',
    args: ['--tensor-parallel-size', '8', '--speculative-config.method', 'mtp',
           '--speculative-config.num_speculative_tokens', '3', '--tool-call-parser', 'glm47',
           '--reasoning-parser', 'glm45', '--enable-auto-tool-choice', '--served-model-name',
           'glm-5-fp8'],
    // A model without an MTP layer (the recipe serves GLM-5, whose checkpoint has one).
    model: TINY_CHAT,
    line: "  - --speculative-config method 'mtp': the checkpoint has no MTP layer " +
        '(num_nextn_predict_layers is 0 in config.json)',
  },
  {
    name: 'DeepSeek-V3.2-Exp data parallel',
    args: ['-dp', '8', '--enable-expert-parallel'],
    line: '  - --data-parallel-size 8: one server is one replica: run one mlaserve per replica ' +
        'behind a load balancer, or use --tensor-parallel-size for one model over N GPUs',
  },
  {
    name: 'FP8 KV cache',
    args: ['--kv-cache-dtype', 'fp8'],
    line: '  - --kv-cache-dtype fp8: there is no FP8 KV cache yet; use --kv-cache-dtype auto ' +
        '(bf16 on the GPU)',
  },
];

function runFails(args, env = {}) {
  const t0 = performance.now();
  const r = spawnSync(BIN, ['serve', ...args], {env: {...process.env, ...env}, encoding: 'utf8',
                                                 timeout: 20000});
  return {ms: performance.now() - t0, status: r.status, stderr: r.stderr, stdout: r.stdout};
}

for (const r of refused) {
  test(`rejected flag class golden line: ${r.name}`, () => {
    const out = runFails([r.model ?? DEMO, ...r.args, '--device', 'cpu']);
    assert.equal(out.status, 1, out.stderr);
    assert.ok(out.stderr.split('\n').includes(r.line), out.stderr);
    assert.ok(!/Loading weights/.test(out.stderr + out.stdout));
  });
}

test('no-effect and implemented flag classes: golden start-up lines', async () => {
  const server =
      await serve([DEMO, '--trust-remote-code', '--seed', '7', '--response-role', 'model',
                   '--enable-response-timings']);
  try {
    const lines = server.log().split('\n');
    const has = (suffix) => lines.some((l) => l.endsWith(suffix));
    assert.ok(has('--trust-remote-code: accepted, no effect here: no Python code runs here: ' +
                  'deepseek_v3, deepseek_v32 and glm_moe_dsa are built in'),
              server.log());
    const config = lines.find((l) => l.includes('Effective configuration: '));
    assert.ok(config, server.log());
    for (const part of ['device=cpu', 'dtype=float32', 'tensor_parallel_size=1', 'block_size=64',
                        'max_model_len=2048', 'seed=7', 'response_role=model',
                        `chat_template=${DEMO}/chat_template.jinja`,
                        'generation_defaults=temperature=1,top_p=0.95'])
      assert.ok(config.includes(part), `${part} missing from: ${config}`);
    const body = await chat(server.baseURL, DEMO);
    assert.equal(body.choices[0].message.role, 'model');
    // llama-server's timings, from the engine-side token times.
    const t = body.timings;
    assert.equal(t.prompt_n, body.usage.prompt_tokens, JSON.stringify(t));
    assert.equal(t.predicted_n, body.usage.completion_tokens, JSON.stringify(t));
    assert.ok(t.prompt_ms > 0, JSON.stringify(t));
    if (t.predicted_n > 1) assert.ok(t.predicted_ms > 0 && t.predicted_per_second > 0, JSON.stringify(t));
  } finally {
    assert.equal(await server.stop(), 0);
  }
});

test('early validation: every problem at once, before loading, in well under a second', () => {
  const out = runFails(['deepseek-ai/DeepSeek-V3.2', '--max-model-len', '128k', '--device',
                        'tpu', '--hf-overrides', '{oops', '--kv-cache-dtype', 'fp8_e4m3',
                        '--download-dir', '/nonexistent-hf-cache'],
                       {HF_HUB_CACHE: '/nonexistent-hub', HF_HOME: '/nonexistent-home'});
  assert.equal(out.status, 1, out.stderr);
  assert.ok(out.ms < 1000 * SLOWDOWN, `took ${out.ms} ms`);
  for (const want of ['serve: 4 problems with the command line (nothing loaded):',
                      '--hf-overrides {oops: not valid JSON',
                      '--kv-cache-dtype fp8_e4m3: there is no FP8 KV cache yet',
                      '/nonexistent-hf-cache/models--deepseek-ai--DeepSeek-V3.2 (absent)',
                      '/nonexistent-hub/models--deepseek-ai--DeepSeek-V3.2 (absent)',
                      '/nonexistent-home/hub/models--deepseek-ai--DeepSeek-V3.2 (absent)',
                      '--device tpu: '])
    assert.ok(out.stderr.includes(want), `${want} missing from:\n${out.stderr}`);

  const local = runFails([DEMO, '--max-model-len', '128k', '--tokenizer', os.tmpdir()]);
  assert.equal(local.status, 1, local.stderr);
  assert.ok(local.ms < 1000 * SLOWDOWN, `took ${local.ms} ms`);
  assert.ok(local.stderr.includes(
                '--max-model-len 128000: longer than the model\'s max_position_embeddings (2048)'),
            local.stderr);
  assert.ok(local.stderr.includes(`no tokenizer.json in ${os.tmpdir()}`), local.stderr);
});

// huggingface_hub's layout: refs/main holds the snapshot hash; snapshot files link to blobs.
function fakeHfCache() {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'mls-hf-'));
  const repo = path.join(root, 'models--demo-org--demo-glm5');
  const hash = '1234567890abcdef1234567890abcdef12345678';
  fs.mkdirSync(path.join(repo, 'refs'), {recursive: true});
  fs.mkdirSync(path.join(repo, 'snapshots', hash), {recursive: true});
  fs.writeFileSync(path.join(repo, 'refs', 'main'), hash);
  for (const f of fs.readdirSync(DEMO))
    fs.symlinkSync(path.join(DEMO, f), path.join(repo, 'snapshots', hash, f));
  return root;
}

test('a Hugging Face id resolves through the local cache; /load, /v1/models/{id}, metrics',
     async () => {
       const cache = fakeHfCache();
       const server = await serve(['demo-org/demo-glm5', '--disable-ui'], {HF_HUB_CACHE: cache});
       try {
         assert.ok(server.log().includes(`Loading weights from ${cache}/models--demo-org--demo-glm5`),
                   server.log());
         await chat(server.baseURL, 'demo-org/demo-glm5');
         const card = await (await fetch(`${server.baseURL}/v1/models/demo-org/demo-glm5`)).json();
         assert.equal(card.id, 'demo-org/demo-glm5');
         assert.equal(card.max_model_len, 2048);
         assert.equal(card.config.device, 'cpu');
         const missing = await fetch(`${server.baseURL}/v1/models/other`);
         assert.equal(missing.status, 404);
         const load = await (await fetch(`${server.baseURL}/load`)).json();
         assert.equal(load.server_load, 0);
         assert.equal((await fetch(`${server.baseURL}/`)).status, 404);  // --disable-ui
         const m = parsePrometheus(await (await fetch(`${server.baseURL}/metrics`)).text());
         const model = 'model_name="demo-org/demo-glm5"';
         for (const name of ['vllm:request_queue_time_seconds_count',
                             'vllm:request_prefill_time_seconds_count',
                             'vllm:request_decode_time_seconds_count',
                             'vllm:request_inference_time_seconds_count',
                             'vllm:request_prompt_tokens_count', 'vllm:request_params_n_count',
                             'vllm:request_params_max_tokens_count'])
           assert.equal(m.get(`${name}{${model}}`), 1, name);
         assert.ok(m.get(`vllm:iteration_tokens_total_count{${model}}`) >= 2);
         assert.equal(m.get(`vllm:request_params_max_tokens_sum{${model}}`), 8);
       } finally {
         assert.equal(await server.stop(), 0);
         fs.rmSync(cache, {recursive: true, force: true});
       }
     });

test('--version and serve --help', () => {
  const v = spawnSync(BIN, ['--version'], {encoding: 'utf8'});
  assert.equal(v.status, 0);
  assert.match(v.stdout, /^mlaserve \d+\.\d+\.\d+\n$/);
  const h = spawnSync(BIN, ['serve', '--help'], {encoding: 'utf8'});
  assert.equal(h.status, 0);
  for (const flag of ['--kv-cache-dtype', '--trust-remote-code', '--speculative-config'])
    assert.ok(h.stdout.includes(flag), flag);
});
