// A process of an `mpirun -np 2` server that hangs or dies mid-request takes the whole job
// down: never a silent hang. Hang (SIGSTOP): rank 0's collective times out after
// --distributed-timeout-seconds, the log names the process and the operation, /health answers
// 503, then every process ends and mpirun exits non-zero. Death (SIGKILL): mpirun ends the job
// at once, naming the rank.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startServer } from './mpi_harness.mjs';

const TIMEOUT_S = 4;
const args = ['--distributed-timeout-seconds', String(TIMEOUT_S)];

// Starts a long streamed request and waits for its first tokens; the stream's errors are ignored.
async function midRequest(srv) {
  const res = await fetch(`${srv.baseURL}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo', prompt: 'Once upon a time', max_tokens: 1500,
      ignore_eos: true, stream: true }),
  });
  const reader = res.body.getReader();
  await reader.read();
  await reader.read();
  reader.read().catch(() => {});
  return reader;
}

test('a hung process: timeout naming the operation, /health 503, job down', async () => {
  const srv = await startServer(args);
  const follower = srv.pid(1);
  try {
    await midRequest(srv);
    const t0 = Date.now();
    process.kill(follower, 'SIGSTOP');
    let saw503 = false;
    while (srv.proc.exitCode === null && srv.proc.signalCode === null && Date.now() - t0 < 30000) {
      try {
        const h = await fetch(`${srv.baseURL}/health`);
        if (h.status === 503) saw503 = true;
      } catch { /* gone */ }
      await new Promise((r) => setTimeout(r, 100));
    }
    const { code } = await srv.exited;
    const seconds = (Date.now() - t0) / 1000;
    assert.notEqual(code, 0, srv.log());
    assert.ok(seconds < TIMEOUT_S + 10, `took ${seconds} s`);
    assert.match(srv.log(), /distributed timeout: \w+ of \d+ bytes per rank by ranks 0\.\.0 of 2 did not complete within 4 s on process 0 of 2/);
    assert.ok(saw503, `no 503 from /health before the exit:\n${srv.log()}`);
  } finally {
    try { process.kill(follower, 'SIGKILL'); } catch { /* ended with the job */ }
    srv.proc.kill('SIGKILL');
  }
});

test('a killed process: the job ends at once, naming the rank', async () => {
  const srv = await startServer(args);
  try {
    await midRequest(srv);
    const t0 = Date.now();
    process.kill(srv.pid(1), 'SIGKILL');
    const { code } = await srv.exited;
    const seconds = (Date.now() - t0) / 1000;
    assert.notEqual(code, 0, srv.log());
    assert.ok(seconds < TIMEOUT_S + 10, `took ${seconds} s`);
    assert.match(srv.log(), /process rank 1 with PID \d+ on node \S+ exited on signal 9/);
  } finally {
    srv.proc.kill('SIGKILL');
  }
});
