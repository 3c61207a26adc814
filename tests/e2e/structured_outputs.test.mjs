// Structured outputs end to end with the trained demo model (models/demo-glm5, --device cpu)
// and the official openai client: json_schema responses that parse and validate (nested,
// enums, arrays, anyOf; streamed too; with and without a reasoning section), zod through
// client.chat.completions.parse, tool_choice "required" and a named tool through GLM's own
// tool-call syntax, the vLLM fields (structured_outputs, guided_*) on both endpoints, and 400s
// that name the field. Prints tokens/s with and without a schema. ~40 s.
import assert from 'node:assert/strict';
import path from 'node:path';
import {test} from 'node:test';
import {fileURLToPath} from 'node:url';
import OpenAI from 'openai';
import {zodResponseFormat} from 'openai/helpers/zod';
import {z} from 'zod';

import {startServer} from './harness.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const demo = {dir: path.resolve(here, '../../models/demo-glm5'), name: 'demo-glm5', maxModelLen: 2048};

// A validator for the JSON Schema subset the server supports (closed objects by default).
function validate(v, s, root = s) {
  if (s === true) return true;
  if (s.$ref) return validate(v, s.$ref.split('/').slice(1).reduce((o, k) => o[k], root), root);
  if ('const' in s && JSON.stringify(v) !== JSON.stringify(s.const)) return false;
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) return false;
  for (const k of ['anyOf', 'oneOf'])
    if (s[k] && !s[k].some((sub) => validate(v, sub, root))) return false;
  const types = s.type === undefined ? null : [].concat(s.type);
  const typeOf = (x) => x === null ? 'null' : Array.isArray(x) ? 'array' :
      typeof x === 'number' ? (Number.isInteger(x) ? 'integer' : 'number') : typeof x;
  if (types && !types.some((t) => t === typeOf(v) || (t === 'number' && typeOf(v) === 'integer')))
    return false;
  if (typeof v === 'string') {
    const n = [...v].length;
    if (n < (s.minLength ?? 0) || n > (s.maxLength ?? Infinity)) return false;
  }
  if (Array.isArray(v)) {
    if (v.length < (s.minItems ?? 0) || v.length > (s.maxItems ?? Infinity)) return false;
    if (s.items && !v.every((e) => validate(e, s.items, root))) return false;
  }
  if (v && typeof v === 'object' && !Array.isArray(v) && (s.properties || s.type === 'object')) {
    for (const r of s.required ?? []) if (!(r in v)) return false;
    for (const [k, e] of Object.entries(v)) {
      if (s.properties?.[k]) {
        if (!validate(e, s.properties[k], root)) return false;
      } else if (typeof s.additionalProperties === 'object') {
        if (!validate(e, s.additionalProperties, root)) return false;
      } else if (s.additionalProperties !== true) {
        return false;
      }
    }
  }
  return true;
}

const schemas = {
  nested: {
    type: 'object',
    properties: {
      city: {type: 'string', maxLength: 20},
      country: {type: 'object', properties: {name: {type: 'string', maxLength: 20}, code: {type: 'string', minLength: 2, maxLength: 2}}, required: ['name', 'code']},
      population: {type: 'integer'},
    },
    required: ['city', 'country'],
  },
  enums: {
    type: 'object',
    properties: {answer: {enum: ['yes', 'no', 'maybe']}, confidence: {enum: [1, 2, 3]}, final: {const: true}},
    required: ['answer', 'confidence', 'final'],
  },
  arrays: {
    type: 'object',
    properties: {
      numbers: {type: 'array', items: {type: 'integer'}, minItems: 2, maxItems: 5},
      words: {type: 'array', items: {type: 'string', maxLength: 10}, maxItems: 3},
    },
    required: ['numbers', 'words'],
  },
  anyOf: {
    $defs: {celsius: {type: 'object', properties: {c: {type: 'number'}}, required: ['c']}},
    type: 'object',
    properties: {reading: {anyOf: [{$ref: '#/$defs/celsius'}, {type: 'string', maxLength: 12}, {type: 'null'}]}},
    required: ['reading'],
  },
};

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather in a city',
    parameters: {type: 'object', properties: {city: {type: 'string', maxLength: 20}, days: {type: 'integer'}}, required: ['city']},
  },
};
const convert = {
  type: 'function',
  function: {
    name: 'convert_units',
    description: 'Convert a value between units',
    parameters: {
      type: 'object',
      properties: {value: {type: 'number'}, from: {enum: ['km', 'mi']}, to: {enum: ['km', 'mi']}},
      required: ['value', 'from', 'to'],
    },
  },
};

function parseAndValidate(text, schema, what) {
  let doc;
  assert.doesNotThrow(() => { doc = JSON.parse(text); }, `${what}: not JSON: ${JSON.stringify(text)}`);
  assert.ok(validate(doc, schema), `${what}: ${text} does not validate`);
  return doc;
}

async function expect400(promise, param) {
  await assert.rejects(promise, (e) => {
    assert.equal(e.status, 400, e.message);
    if (param) assert.equal(e.error?.param ?? e.param, param, e.message);
    return true;
  });
}

test('structured outputs with the demo model', async () => {
  const server = await startServer(
      ['--enable-auto-tool-choice', '--tool-call-parser', 'glm47', '--reasoning-parser', 'glm45'], {}, demo);
  try {
    const client = new OpenAI({baseURL: `${server.baseURL}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120000});
    const question = {role: 'user', content: 'Tell me about Paris.'};

    for (const [name, schema] of Object.entries(schemas)) {
      for (const thinking of [false, true]) {
        const r = await client.chat.completions.create({
          model: demo.name, temperature: 0, max_tokens: 400, messages: [question],
          chat_template_kwargs: {enable_thinking: thinking},
          response_format: {type: 'json_schema', json_schema: {name, schema, strict: true}},
        });
        const c = r.choices[0];
        assert.equal(c.finish_reason, 'stop', `${name}: ${JSON.stringify(c.message)}`);
        parseAndValidate(c.message.content, schema, `${name} thinking=${thinking}`);
      }
      // Streamed, sampled: the deltas concatenate to a valid document.
      const stream = await client.chat.completions.create({
        model: demo.name, temperature: 1.0, seed: 3, max_tokens: 400, messages: [question], stream: true,
        chat_template_kwargs: {enable_thinking: false},
        response_format: {type: 'json_schema', json_schema: {name, schema}},
      });
      let text = '', finish = null;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
      }
      assert.equal(finish, 'stop');
      parseAndValidate(text, schema, `${name} streamed`);
    }

    // zod through the SDK's parse helper.
    const City = z.object({city: z.string().max(20), population: z.number().int(), capital: z.boolean()});
    const parsed = await client.chat.completions.parse({
      model: demo.name, temperature: 0, max_tokens: 300, messages: [question],
      chat_template_kwargs: {enable_thinking: false}, response_format: zodResponseFormat(City, 'city'),
    });
    const p = parsed.choices[0].message.parsed;
    assert.ok(p, JSON.stringify(parsed.choices[0].message));
    assert.equal(typeof p.city, 'string');
    assert.ok(Number.isInteger(p.population));
    assert.equal(typeof p.capital, 'boolean');

    // json_object: any object.
    const obj = await client.chat.completions.create({
      model: demo.name, temperature: 0, max_tokens: 300, messages: [question],
      chat_template_kwargs: {enable_thinking: false}, response_format: {type: 'json_object'},
    });
    const o = JSON.parse(obj.choices[0].message.content);
    assert.equal(typeof o, 'object');
    assert.ok(o !== null && !Array.isArray(o));

    // tool_choice "required" on a greeting: a valid call in GLM's syntax, parsed back.
    for (const thinking of [false, true]) {
      const r = await client.chat.completions.create({
        model: demo.name, temperature: 0, max_tokens: 200, messages: [{role: 'user', content: 'Hello!'}],
        tools: [weather, convert], tool_choice: 'required', parallel_tool_calls: false,
        chat_template_kwargs: {enable_thinking: thinking},
      });
      const c = r.choices[0];
      assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c.message));
      assert.equal(c.message.tool_calls.length, 1);
      const call = c.message.tool_calls[0].function;
      const tool = [weather, convert].find((t) => t.function.name === call.name);
      assert.ok(tool, call.name);
      parseAndValidate(call.arguments, tool.function.parameters, `required ${call.name}`);
    }

    // A named tool, streamed: that tool, with schema-valid arguments.
    const named = await client.chat.completions.create({
      model: demo.name, temperature: 0, max_tokens: 200, stream: true,
      messages: [{role: 'user', content: 'How is the weather in Paris today?'}],
      tools: [weather, convert], tool_choice: {type: 'function', function: {name: 'convert_units'}},
    });
    let callName = '', args = '', namedFinish = null;
    for await (const chunk of named) {
      for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) {
        callName += tc.function?.name ?? '';
        args += tc.function?.arguments ?? '';
      }
      namedFinish = chunk.choices[0]?.finish_reason ?? namedFinish;
    }
    assert.equal(callName, 'convert_units');
    assert.equal(namedFinish, 'stop');  // OpenAI reports "stop" for a named tool choice
    parseAndValidate(args, convert.function.parameters, 'named convert_units');

    // vLLM's fields on /v1/completions and chat.
    const regex = await client.completions.create({
      model: demo.name, prompt: 'The answer is ', max_tokens: 20, temperature: 1.0, seed: 1,
      structured_outputs: {regex: '[0-9]{3}-[a-z]{2,4}'},
    });
    assert.match(regex.choices[0].text, /^[0-9]{3}-[a-z]{2,4}$/);
    const choice = await client.chat.completions.create({
      model: demo.name, temperature: 0, max_tokens: 20, messages: [question],
      chat_template_kwargs: {enable_thinking: false}, guided_choice: ['sunny', 'rainy', 'cloudy'],
    });
    assert.ok(['sunny', 'rainy', 'cloudy'].includes(choice.choices[0].message.content));
    const gbnf = await client.completions.create({
      model: demo.name, prompt: 'Count: ', max_tokens: 30, temperature: 0,
      guided_grammar: 'root ::= "(" num ("," num){2} ")"\nnum ::= [1-9] [0-9]?',
    });
    assert.match(gbnf.choices[0].text, /^\([1-9][0-9]?(,[1-9][0-9]?){2}\)$/);
    const guidedJson = await client.completions.create({
      model: demo.name, prompt: 'JSON: ', max_tokens: 200, temperature: 0,
      guided_json: JSON.stringify(schemas.enums),
    });
    parseAndValidate(guidedJson.choices[0].text, schemas.enums, 'guided_json on completions');
    const completionFormat = await client.completions.create({
      model: demo.name, prompt: 'JSON: ', max_tokens: 200, temperature: 0,
      response_format: {type: 'json_schema', json_schema: {name: 'arrays', schema: schemas.arrays}},
    });
    parseAndValidate(completionFormat.choices[0].text, schemas.arrays, 'response_format on completions');
    // vLLM's whitespace pattern, here an empty one: no whitespace between JSON tokens.
    const compact = await client.completions.create({
      model: demo.name, prompt: 'JSON: ', max_tokens: 200, temperature: 0,
      guided_json: schemas.enums, guided_whitespace_pattern: '()',
    });
    const compactText = compact.choices[0].text;
    parseAndValidate(compactText, schemas.enums, 'guided_whitespace_pattern');
    assert.doesNotMatch(compactText.replace(/"(\\.|[^"\\])*"/g, '""'), /\s/, compactText);

    // 400s that name the field.
    const base = {model: demo.name, max_tokens: 10, messages: [question]};
    await expect400(client.chat.completions.create({...base, response_format: {type: 'json_schema',
      json_schema: {name: 'x', schema: {type: 'string', pattern: 'a+'}}}}), 'response_format.json_schema.schema');
    await expect400(client.chat.completions.create({...base, structured_outputs: {regex: '(a)\\1'}}),
        'structured_outputs.regex');
    await expect400(client.chat.completions.create({...base, guided_grammar: 'root ::= undefined-rule'}),
        'guided_grammar');
    await expect400(client.chat.completions.create({...base, response_format: {type: 'json_object'},
      guided_regex: 'a'}), 'guided_regex');
    await expect400(client.chat.completions.create({...base, response_format: {type: 'xml'}}),
        'response_format.type');
    await expect400(client.chat.completions.create({...base, guided_regex: 'a+', guided_whitespace_pattern: ' *'}),
        'guided_whitespace_pattern');
    await expect400(client.chat.completions.create({...base, guided_json: {}, guided_decoding_backend: 'xgrammar'}),
        'guided_decoding_backend');
    await expect400(client.chat.completions.create({...base, tools: [weather], tool_choice: 'required',
      response_format: {type: 'json_object'}}), 'response_format');

    // Tokens/s with and without a schema (one request at a time, greedy, same prompt).
    const rate = async (extra) => {
      let tokens = 0;
      const t0 = performance.now();
      for (let i = 0; i < 3; ++i) {
        const r = await client.chat.completions.create({
          model: demo.name, temperature: 0, max_tokens: 128, ignore_eos: true,
          messages: [{role: 'user', content: `Tell me about city number ${i}.`}],
          chat_template_kwargs: {enable_thinking: false}, ...extra,
        });
        tokens += r.usage.completion_tokens;
      }
      return tokens / ((performance.now() - t0) / 1000);
    };
    const free = await rate({});
    const constrained = await rate({response_format: {type: 'json_object'}});
    console.log(`# tokens/s without a schema ${free.toFixed(1)}, with json_object ${constrained.toFixed(1)}`);
  } finally {
    const {code} = await server.stop();
    assert.equal(code, 0, server.log());
  }
});
