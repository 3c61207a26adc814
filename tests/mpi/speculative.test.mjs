// Speculative decoding under `mpirun -np 2` (tensor parallelism 2, one rank per process, CPU):
// the demo model with its trained MTP layer served with
// --speculative-config answers held-out chats and streams their tool calls exactly as the
// single-process server without it, the followers running the leader's verify and MTP steps
// (RunnerOp::kForward keeping hidden states, RunnerOp::kForwardMtp).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { DEMO, openaiClient, startServer } from './mpi_harness.mjs';

const OpenAI = await openaiClient();
const skip = OpenAI ? false : 'tests/e2e/node_modules/openai is missing; run `npm ci --prefix tests/e2e`';

test('MTP on under mpirun -np 2 equals MTP off in one process', { skip, timeout: 200000 }, async () => {
  const golden = JSON.parse(fs.readFileSync(path.join(DEMO, 'golden.json'), 'utf8'));
  const samples = golden.heldout_eval.slice(0, 12);
  const flags = ['--enable-auto-tool-choice', '--tool-call-parser', 'glm47', '--reasoning-parser', 'glm45'];
  const outputs = [];
  for (const [np, extra] of [[2, ['--speculative-config', '{"method":"mtp","num_speculative_tokens":2}']],
    [0, []]]) {
    const srv = await startServer([...flags, ...extra], { np, model: DEMO });
    try {
      const client = new OpenAI({ baseURL: `${srv.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
      const out = [];
      for (const s of samples) {
        const stream = await client.chat.completions.create({
          model: 'demo', temperature: 0, max_tokens: s.target_ids.length + 8, stream: true,
          messages: s.messages, tools: s.tools ?? undefined,
          chat_template_kwargs: { enable_thinking: s.enable_thinking },
        });
        let text = '', reasoning = '', calls = '', finish = null;
        for await (const chunk of stream) {
          const c = chunk.choices[0];
          if (!c) continue;
          text += c.delta.content ?? '';
          reasoning += c.delta.reasoning ?? '';
          for (const tc of c.delta.tool_calls ?? [])
            calls += `${tc.index}:${tc.function?.name ?? ''}:${tc.function?.arguments ?? ''};`;
          finish = c.finish_reason ?? finish;
        }
        out.push({ text, reasoning, calls, finish });
      }
      outputs.push(out);
      if (np > 0) {
        const metrics = await (await fetch(`${srv.baseURL}/metrics`)).text();
        assert.match(metrics, /vllm:spec_decode_num_draft_tokens_total\{[^}]*\} [1-9]/);
      }
    } finally {
      const { code } = await srv.stop();
      assert.equal(code, 0, srv.log());
    }
  }
  assert.deepEqual(outputs[0], outputs[1]);
  assert.ok(outputs[1].some((o) => o.calls.length > 0), 'a tool call among the samples');
});
