// Regenerate tests/fixtures/tokens/chat.json:
//
//   cd scripts/calibrate-tokens && npm ci && node chat.mjs
//
// Prompt-token counts of OpenAI chat requests, tool (function) definitions included, as
// estimated by the published npm package `openai-chat-tokens` (hmarr), which renders function
// definitions as the TypeScript-like `namespace functions { ... }` text OpenAI puts in the prompt
// and counts everything with cl100k_base (js-tiktoken). Offline: the vocabulary ships in the package.
//
// The fixture stores `tools` / `tool_choice` in the current Chat Completions shape; they are
// converted to the package's legacy `functions` / `function_call` form for counting:
//   functions     = tools.map(t => t.function)
//   function_call = "auto" | "none" | {name}   from   "auto" | "none" | {type:"function", function:{name}}
// Messages use only what the package counts: role, string content, name (system/user/assistant).
// The package has no notion of `tool_calls` in assistant messages or of role "tool" messages
// (it knows only the legacy `function_call` field and role "function"), so none are in the fixture.
// Each tool request also carries `functions_text`: the package's rendering of the definitions
// (formatFunctionDefinitions), whose cl100k_base count is part of `tokens`.

import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { promptTokensEstimate } = require('openai-chat-tokens');
const { formatFunctionDefinitions } = require('openai-chat-tokens/dist/functions');

const here = dirname(fileURLToPath(import.meta.url));
const fixtures = join(here, '..', '..', 'tests', 'fixtures', 'tokens');
const version = (name) => JSON.parse(readFileSync(join(here, 'node_modules', name, 'package.json'), 'utf8')).version;

// ------------------------------------------------------------------ tool definitions
const tool = (name, description, parameters) => ({
  type: 'function',
  function: description === undefined ? { name, parameters } : { name, description, parameters },
});

const getTime = tool('get_current_time', 'Get the current time in UTC', { type: 'object', properties: {} });

const getWeather = tool('get_weather', 'Get the current weather for a location', {
  type: 'object',
  properties: {
    location: { type: 'string', description: 'City and country, e.g. Paris, France' },
    days: { type: 'integer', description: 'Number of forecast days' },
    threshold: { type: 'number' },
    include_wind: { type: 'boolean', description: 'Whether to include wind speed' },
  },
  required: ['location', 'days'],
});

const setMode = tool('set_mode', 'Set the thermostat mode', {
  type: 'object',
  properties: {
    mode: { type: 'string', enum: ['heat', 'cool', 'auto', 'off'], description: 'The operating mode' },
    fan_speed: { type: 'integer', enum: [1, 2, 3] },
    target: { type: 'number', enum: [18.5, 20, 22.5], description: 'Target temperature in Celsius' },
  },
  required: ['mode'],
});

const createUser = tool('create_user', 'Create a user account', {
  type: 'object',
  properties: {
    username: { type: 'string', description: 'Unique login name' },
    profile: {
      type: 'object',
      description: 'Public profile',
      properties: {
        display_name: { type: 'string', description: 'Shown next to posts' },
        age: { type: 'integer', description: 'Age in years' },
        verified: { type: 'boolean' },
      },
      required: ['display_name'],
    },
  },
  required: ['username', 'profile'],
});

const bookTrip = tool('book_trip', 'Book a trip with flights and a hotel', {
  type: 'object',
  properties: {
    traveler: {
      type: 'object',
      description: 'The person travelling',
      properties: {
        name: { type: 'string', description: 'Full name as on the passport' },
        address: {
          type: 'object',
          description: 'Home address',
          properties: {
            street: { type: 'string', description: 'Street and number' },
            city: { type: 'string' },
            country: { type: 'string', enum: ['DE', 'FR', 'US'], description: 'ISO country code' },
          },
          required: ['street', 'city'],
        },
      },
      required: ['name'],
    },
    nights: { type: 'integer', description: 'Number of hotel nights' },
  },
  required: ['traveler'],
});

const sendEmail = tool('send_email', 'Send an email to one or more recipients', {
  type: 'object',
  properties: {
    to: { type: 'array', items: { type: 'string' }, description: 'Recipient addresses' },
    subject: { type: 'string' },
    attachments: {
      type: 'array',
      description: 'Files to attach',
      items: {
        type: 'object',
        properties: {
          filename: { type: 'string', description: 'File name with extension' },
          size_bytes: { type: 'integer' },
        },
        required: ['filename'],
      },
    },
    priority_levels: { type: 'array', items: { type: 'integer', enum: [1, 2, 3] } },
    tags: { type: 'array' },
  },
  required: ['to', 'subject'],
});

const searchDocs = tool('search_docs', undefined, {
  type: 'object',
  properties: {
    query: { type: 'string', description: 'Full-text query' },
    limit: { anyOf: [{ type: 'integer' }, { type: 'null' }], description: 'Maximum hits, or null for all' },
  },
  required: ['query'],
});

// ------------------------------------------------------------------ requests
const sys = (content) => ({ role: 'system', content });
const user = (content, name) => (name ? { role: 'user', content, name } : { role: 'user', content });
const assistant = (content) => ({ role: 'assistant', content });
const named = (name) => ({ type: 'function', function: { name } });

const requests = [
  { name: 'plain_user', messages: [user('Hello, world!')] },
  {
    name: 'system_user',
    messages: [sys('You are a helpful assistant.'), user('What is the capital of France?')],
  },
  {
    name: 'multi_turn',
    messages: [
      sys('You are a concise assistant. Answer in one sentence.'),
      user('Who wrote "Pride and Prejudice"?'),
      assistant('Jane Austen wrote "Pride and Prejudice", published in 1813.'),
      user('And what else did she write?'),
    ],
  },
  {
    name: 'message_names',
    messages: [
      { role: 'system', content: 'You moderate a group chat.', name: 'moderator' },
      user('Can we move the meeting to Friday?', 'alice'),
      user('Friday works for me.', 'bob'),
    ],
  },
  {
    name: 'non_ascii',
    messages: [
      sys('Réponds en français, s\'il te plaît.'),
      user('Grüße aus München! 東京の天気はどうですか？ Привет, мир 🌍🌤️ — naïve café'),
    ],
  },
  {
    name: 'tool_no_params',
    messages: [user('What time is it?')],
    tools: [getTime],
  },
  {
    name: 'tool_no_params_missing_properties',
    messages: [user('What time is it?')],
    tools: [tool('get_current_time', 'Get the current time in UTC', { type: 'object' })],
  },
  {
    name: 'tool_scalar_params_no_system',
    messages: [user('What is the weather in Berlin for the next 3 days?')],
    tools: [getWeather],
  },
  {
    name: 'tool_scalar_params_with_system',
    messages: [sys('You are a weather bot.'), user('What is the weather in Berlin for the next 3 days?')],
    tools: [getWeather],
  },
  {
    name: 'tool_enums',
    messages: [sys('You control a smart thermostat.'), user('Make it warmer, medium fan.')],
    tools: [setMode],
  },
  {
    name: 'tool_nested_2_levels',
    messages: [user('Sign me up as jdoe, display name John.')],
    tools: [createUser],
  },
  {
    name: 'tool_nested_3_levels',
    messages: [sys('You are a travel agent.'), user('Book me 4 nights, I live at 1 Main St, Springfield, US.')],
    tools: [bookTrip],
  },
  {
    name: 'tool_arrays',
    messages: [user('Email the report.pdf to ann@example.com and bob@example.com, subject "Q3".')],
    tools: [sendEmail],
  },
  {
    name: 'tool_no_description_anyof',
    messages: [user('Find docs about rate limits.')],
    tools: [searchDocs],
  },
  {
    name: 'several_tools_multi_turn',
    messages: [
      sys('You are a personal assistant with access to tools.'),
      user('What time is it?'),
      assistant('It is 14:05 UTC.'),
      user('Then check the weather in Oslo and email it to me@example.com.'),
    ],
    tools: [getTime, getWeather, sendEmail, setMode],
  },
  {
    name: 'several_tools_no_system',
    messages: [user('Plan a trip for Jane Doe and create her account.')],
    tools: [bookTrip, createUser, searchDocs],
  },
  {
    name: 'tool_choice_auto',
    messages: [sys('You are a weather bot.'), user('Weather in Rome?')],
    tools: [getWeather, getTime],
    tool_choice: 'auto',
  },
  {
    name: 'tool_choice_none',
    messages: [sys('You are a weather bot.'), user('Weather in Rome?')],
    tools: [getWeather, getTime],
    tool_choice: 'none',
  },
  {
    name: 'tool_choice_named',
    messages: [user('Weather in Rome?')],
    tools: [getWeather, getTime],
    tool_choice: named('get_weather'),
  },
];

// ------------------------------------------------------------------ count
function toFunctionCall(choice) {
  if (choice === undefined || choice === 'auto' || choice === 'none') return choice;
  if (choice && choice.type === 'function' && choice.function && typeof choice.function.name === 'string') {
    return { name: choice.function.name };
  }
  throw new Error(`tool_choice not expressible as function_call: ${JSON.stringify(choice)}`);
}

const names = new Set();
const out = requests.map((r) => {
  if (names.has(r.name)) throw new Error(`duplicate name ${r.name}`);
  names.add(r.name);
  for (const m of r.messages) {
    if (!['system', 'user', 'assistant'].includes(m.role) || typeof m.content !== 'string') {
      throw new Error(`${r.name}: unsupported message ${JSON.stringify(m)}`);
    }
  }
  // Deep copies, so nothing the package might touch leaks into the fixture.
  const messages = structuredClone(r.messages);
  const functions = r.tools ? structuredClone(r.tools).map((t) => t.function) : undefined;
  const function_call = toFunctionCall(r.tool_choice);
  const tokens = promptTokensEstimate({ messages, functions, function_call });
  const entry = { name: r.name, messages: r.messages };
  if (r.tools) entry.tools = r.tools;
  if (r.tool_choice !== undefined) entry.tool_choice = r.tool_choice;
  entry.tokens = tokens;
  if (functions) entry.functions_text = formatFunctionDefinitions(functions);
  return entry;
});

const fixture = {
  reference: `npm openai-chat-tokens@${version('openai-chat-tokens')} (encoding: cl100k_base via js-tiktoken@${version('js-tiktoken')})`,
  requests: out,
};

mkdirSync(fixtures, { recursive: true });
const path = join(fixtures, 'chat.json');
writeFileSync(path, JSON.stringify(fixture, null, 2) + '\n');
for (const e of out) console.log(`${String(e.tokens).padStart(5)}  ${e.name}`);
console.log(`wrote ${out.length} requests to ${path}`);
