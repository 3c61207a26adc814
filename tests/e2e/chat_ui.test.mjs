// The built-in chat page (GET /) in headless Chromium (Debian's /usr/bin/chromium, driven by
// puppeteer-core; no browser is downloaded) against the demo model: it lists the model, streams
// an answer, starts a new chat, shows a tool call, keeps the conversation across a reload
// (localStorage), and leaves a screenshot in build/test-artifacts/chat_ui.png.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';

import {BIN, startServer} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
const demo = {dir: path.resolve(here, '../../models/demo-glm5'), name: 'demo-glm5',
              maxModelLen: 2048};

let puppeteer = null;
try {
  puppeteer = (await import('puppeteer-core')).default;
} catch { /* reported as a skip below */ }
const skip = !puppeteer ? 'puppeteer-core is not installed (npm ci --prefix tests/e2e)'
             : !fs.existsSync(CHROMIUM) ? `no Chromium at ${CHROMIUM}` : false;

const WEATHER_TOOLS = JSON.stringify([{
  type: 'function',
  function: {name: 'get_weather', description: 'Get the current weather in a city',
             parameters: {type: 'object', properties: {city: {type: 'string'}},
                          required: ['city']}},
}]);

// Sends `text` and waits until the answer's stream has ended; returns the last bubble's parts.
async function ask(page, text) {
  const before = await page.$$eval('.msg.assistant', (b) => b.length);
  await page.type('#input', text);
  await page.click('#send');
  await page.waitForFunction(
      (n) => document.querySelectorAll('.msg.assistant').length === n + 1 &&
          !document.querySelector('[data-streaming]'),
      {timeout: 30000}, before);
  return page.$eval('.msg.assistant:last-of-type', (b) => ({
    content: b.querySelector('[data-testid=content]').textContent,
    reasoning: b.querySelector('[data-testid=reasoning]')?.textContent ?? null,
    reasoningOpen: b.querySelector('details')?.open ?? null,
    toolCalls: [...b.querySelectorAll('[data-testid=tool-call]')].map((t) => t.textContent),
    meta: b.querySelector('.meta')?.textContent ?? '',
  }));
}

test('chat page streams answers and tool calls from the demo model', {skip, timeout: 120000},
     async () => {
       const server = await startServer(
           ['--device', 'cpu', '--enable-auto-tool-choice', '--tool-call-parser', 'glm47',
            '--reasoning-parser', 'glm45'],
           {}, demo);
       const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'mls-chromium-'));
       const browser = await puppeteer.launch({
         executablePath: CHROMIUM,
         headless: true,
         userDataDir: profile,
         args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
                '--disable-background-networking', '--disable-component-update',
                '--disable-sync'],
       });
       try {
         const page = await browser.newPage();
         await page.setViewport({width: 1200, height: 800});
         const failed = [];
         page.on('requestfailed', (r) => failed.push(r.url()));
         page.on('pageerror', (e) => failed.push(`page error: ${e.message}`));
         await page.goto(`${server.baseURL}/`, {waitUntil: 'load'});
         await page.waitForFunction(
             () => [...document.querySelectorAll('#model option')].some((o) => o.value === 'demo-glm5'),
             {timeout: 10000});
         await page.type('#temperature', '0');

         const hello = await ask(page, 'Hello!');
         assert.ok(hello.content.trim().length > 0, JSON.stringify(hello));
         assert.match(hello.meta, /finish: stop/);

         // A fresh conversation for the tool call, as the demo model was trained on.
         await page.click('#new-chat');
         assert.equal(await page.$$eval('#messages .msg', (b) => b.length), 0);
         await page.type('#tools', WEATHER_TOOLS);
         const call = await ask(page, 'How is the weather in Paris today?');
         assert.equal(call.toolCalls.length, 1, JSON.stringify(call));
         assert.match(call.toolCalls[0], /^get_weather\(\{"city": ?"Paris"\}\)$/);
         assert.match(call.meta, /finish: tool_calls/);
         if (call.reasoning !== null) assert.equal(call.reasoningOpen, false);  // collapsed

         // The conversation survives a reload: it lives in the browser.
         await page.reload({waitUntil: 'load'});
         const roles = await page.$$eval('#messages .msg', (b) => b.map((x) => x.dataset.role));
         assert.deepEqual(roles, ['user', 'assistant']);
         assert.equal(await page.$$eval('[data-testid=tool-call]', (t) => t.length), 1);
         assert.deepEqual(failed, []);

         const dir = path.join(path.dirname(BIN), 'test-artifacts');
         fs.mkdirSync(dir, {recursive: true});
         await page.screenshot({path: path.join(dir, 'chat_ui.png')});
       } finally {
         await browser.close();
         fs.rmSync(profile, {recursive: true, force: true});
         assert.equal((await server.stop()).code, 0);
       }
     });
