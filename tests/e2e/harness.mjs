// Starts the real `mlaserve serve` on 127.0.0.1 at a free port, waits for /health, and stops it
// with SIGTERM (expecting a clean exit 0, i.e. a graceful drain).
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.MLASERVE_BIN ?? path.resolve(here, '../../build/mlaserve');
export const MODEL = process.env.MLASERVE_MODEL ?? path.resolve(here, '../../models/tiny-glm5-chat');
export const MODEL_NAME = 'tiny-glm5-chat';
// How many times slower than an optimised build the server under test runs (a sanitized one):
// time bounds scale by it.
export const SLOWDOWN = Number(process.env.MLASERVE_TEST_SLOWDOWN ?? 1);
export const MAX_MODEL_LEN = 1024;

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.unref();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// Spawns `cmd argv`, a server listening on 127.0.0.1:`port`, and resolves once its /health
// answers 200 (throwing, with its output, if it exits first or takes longer than `timeoutMs`).
// exited resolves to { code, signal }; log() is everything it printed so far.
export async function spawnHealthy(cmd, argv, { port, env = {}, timeoutMs = 30000 }) {
  const proc = spawn(cmd, argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const baseURL = `http://127.0.0.1:${port}`;
  const what = [path.basename(cmd), ...argv].join(' ');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`${what} exited during start-up:\n${log}`);
    try {
      if ((await fetch(`${baseURL}/health`)).status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`${what} did not become healthy in ${timeoutMs / 1000} s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  return { proc, exited, baseURL, log: () => log };
}

// SIGTERM to `pid` (the server's own by default), SIGKILL to `proc` after `graceMs`: how it
// exited.
export async function terminate({ proc, exited }, { pid = proc.pid, graceMs = 15000 } = {}) {
  if (proc.exitCode !== null || proc.signalCode !== null) return exited;
  process.kill(pid, 'SIGTERM');
  const timer = setTimeout(() => proc.kill('SIGKILL'), graceMs);
  const result = await exited;
  clearTimeout(timer);
  return result;
}

// `model` overrides which model directory is served, under what name, and its KV pool.
export async function startServer(extraArgs = [], env = {},
  model = { dir: MODEL, name: MODEL_NAME, maxModelLen: MAX_MODEL_LEN }) {
  const port = await freePort();
  const args = ['serve', model.dir, '--host', '127.0.0.1', '--port', String(port),
    '--served-model-name', model.name, '--max-model-len', String(model.maxModelLen),
    '--kv-cache-memory-bytes', model.kvBytes ?? '64MiB', ...extraArgs];
  const server = await spawnHealthy(BIN, args, { port, env });
  return {
    baseURL: server.baseURL,
    pid: server.proc.pid,
    log: server.log,
    stop: () => terminate(server),
  };
}

// A streamed chat completion's first choice put back together: its reasoning, content, tool
// calls ({ id, name, arguments }, by index) and finish reason.
export async function collectChat(stream) {
  const out = { reasoning: '', content: '', calls: [], finish: null };
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    out.reasoning += c.delta.reasoning_content ?? '';
    out.content += c.delta.content ?? '';
    for (const tc of c.delta.tool_calls ?? []) {
      if (tc.id) out.calls[tc.index] = { id: tc.id, name: tc.function.name, arguments: '' };
      out.calls[tc.index].arguments += tc.function?.arguments ?? '';
    }
    out.finish = c.finish_reason ?? out.finish;
  }
  return out;
}

// Prometheus text format: `# HELP|TYPE ...` comments and `name{labels} value` samples.
export function parsePrometheus(text) {
  const samples = new Map();
  const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? ([-+]?(?:[0-9.]+(?:[eE][-+]?[0-9]+)?|Inf|NaN))$/;
  for (const line of text.split('\n')) {
    if (line === '' || /^# (HELP|TYPE) /.test(line)) continue;
    const m = sample.exec(line);
    if (!m) throw new Error(`not Prometheus text: ${JSON.stringify(line)}`);
    samples.set(m[1] + (m[2] ?? ''), Number(m[3]));
  }
  return samples;
}

// Sum of every sample of a metric family member (all label sets).
export function total(samples, name) {
  let sum = 0;
  for (const [k, v] of samples) if (k === name || k.startsWith(name + '{')) sum += v;
  return sum;
}
