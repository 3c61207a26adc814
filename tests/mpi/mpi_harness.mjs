// Starts `mlaserve serve` under mpirun (two processes, tensor parallelism 2 on the CPU) on
// 127.0.0.1 at a free port and waits for /health; finds each process by its MPI rank.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const BIN = process.env.MLASERVE_BIN ?? path.resolve(here, '../../build/mlaserve');
export const MPIRUN = process.env.MPIRUN ?? 'mpirun';
export const DEMO = path.resolve(here, '../../models/demo-glm5');

// The official client, from the end-to-end suite's install (`npm ci --prefix tests/e2e`).
export async function openaiClient() {
  const require = createRequire(path.resolve(here, '../e2e/package.json'));
  let entry;
  try {
    entry = require.resolve('openai');
  } catch {
    return null;
  }
  return (await import(pathToFileURL(entry).href)).default;
}

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

// The pid of the process mpirun started as `rank` (its OMPI_COMM_WORLD_RANK).
export function pidOfRank(mpirunPid, rank) {
  for (const pid of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== mpirunPid) continue;
      const env = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
      if (env.includes(`OMPI_COMM_WORLD_RANK=${rank}`)) return Number(pid);
    } catch { /* gone meanwhile */ }
  }
  throw new Error(`no process of rank ${rank} under mpirun ${mpirunPid}`);
}

// `np` processes (0: no mpirun, the single-process reference) serving `model` with `args`.
export async function startServer(args, { np = 2, tp = 2, model = DEMO, name = 'demo' } = {}) {
  const port = await freePort();
  const serve = [BIN, 'serve', model, '--device', 'cpu', '--host', '127.0.0.1', '--port',
    String(port), '--served-model-name', name, '--tensor-parallel-size', String(tp),
    '--kv-cache-memory-bytes', '64MiB', ...args];
  const [cmd, ...argv] = np > 0
    ? [MPIRUN, '--allow-run-as-root', '--oversubscribe', '--bind-to', 'none', '-np', String(np), ...serve]
    : serve;
  const proc = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  proc.stdout.on('data', (d) => { log += d; });
  proc.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const baseURL = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`mlaserve exited during start-up:\n${log}`);
    try {
      if ((await fetch(`${baseURL}/health`)).status === 200) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      proc.kill('SIGKILL');
      throw new Error(`mlaserve did not become healthy in 60 s:\n${log}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    baseURL,
    proc,
    exited,
    log: () => log,
    pid: (rank) => (np > 0 ? pidOfRank(proc.pid, rank) : proc.pid),
    // SIGTERM to rank 0 (the leader drains, then every process stops): its exit status.
    async stop() {
      if (proc.exitCode !== null || proc.signalCode !== null) return exited;
      process.kill(np > 0 ? pidOfRank(proc.pid, 0) : proc.pid, 'SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 30000);
      const result = await exited;
      clearTimeout(timer);
      return result;
    },
  };
}
