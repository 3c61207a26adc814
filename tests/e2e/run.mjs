// CTest entry: runs the end-to-end suites with node's test runner, or reports SKIP (exit 77)
// when the openai client is not installed (`npm ci --prefix tests/e2e`).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { SLOWDOWN } from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
if (!fs.existsSync(path.join(here, 'node_modules', 'openai', 'package.json'))) {
  console.log('SKIP: tests/e2e/node_modules/openai is missing; run `npm ci --prefix tests/e2e`');
  process.exit(77);
}
const files = fs.readdirSync(here).filter((f) => f.endsWith('.test.mjs')).sort()
  .map((f) => path.join(here, f));
const r = spawnSync(process.execPath, ['--test', '--test-concurrency=1', ...files],
  { stdio: 'inherit', timeout: 400000 * SLOWDOWN });
process.exit(r.status ?? 1);
