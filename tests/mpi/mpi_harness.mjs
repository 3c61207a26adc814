// Starts `mlaserve serve` under mpirun (two processes, tensor parallelism 2 on the CPU) on
// 127.0.0.1 at a free port and waits for /health; finds each process by its MPI rank.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

import { BIN, freePort, spawnHealthy, terminate } from '../e2e/harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
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
  const server = await spawnHealthy(cmd, argv, { port, timeoutMs: 60000 });
  const { proc } = server;
  const pid = (rank) => (np > 0 ? pidOfRank(proc.pid, rank) : proc.pid);
  return {
    baseURL: server.baseURL,
    proc,
    exited: server.exited,
    log: server.log,
    pid,
    // SIGTERM to rank 0 (the leader drains, then every process stops): its exit status.
    stop: async () => (proc.exitCode !== null || proc.signalCode !== null
      ? server.exited
      : terminate(server, { pid: pid(0), graceMs: 30000 })),
  };
}
