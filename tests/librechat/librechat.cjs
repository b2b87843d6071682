#!/usr/bin/env node
'use strict';
/*
 * Test harness: drives LibreChat's published data layer (@librechat/data-schemas,
 * pinned in package.json beside this file) so the Rust integration tests can
 *   - write a realistic chat history through LibreChat's own models and methods,
 *   - ask LibreChat's own getSyncProgress(),
 *   - get LibreChat's own preprocessObjectForIndex() of every MongoDB document.
 * Nothing of LibreChat is copied here: every rule (retention, join of content
 * parts, Meili hooks) is LibreChat's code, called.
 *
 *   node tests/librechat/librechat.cjs history --phase off|on --seed <n> [--messages <n>]
 *   node tests/librechat/librechat.cjs progress
 *   node tests/librechat/librechat.cjs expected
 *   node tests/librechat/librechat.cjs hook-index --collection messages|conversations --ids <hex,hex,...>
 *   node tests/librechat/librechat.cjs chats --seed <n> --conversations <n> [--pipe-at <i>]
 *   node tests/librechat/librechat.cjs sync
 *   node tests/librechat/librechat.cjs compare
 *
 * Environment: MONGO_URI (full connection string), LIBRECHAT_DB (database name,
 * passed as mongoose dbName; falls back to the URI's path), MEILI_HOST and
 * MEILI_MASTER_KEY (history --phase on and hook-index only). Optional
 * HARNESS_SETTLE_TIMEOUT_MS (default 60000).
 *
 * stdout carries exactly one JSON document; everything else (LibreChat's winston
 * console output included) goes to stderr.
 */

// ---------------------------------------------------------------------------
// stdout is reserved for the one JSON answer. LibreChat's winston Console
// transports write to process.stdout, so every other write is sent to stderr.
const writeStdout = process.stdout.write.bind(process.stdout);
process.stdout.write = (chunk, encoding, callback) => process.stderr.write(chunk, encoding, callback);

const os = require('os');
const path = require('path');
const http = require('http');
const { isDeepStrictEqual } = require('util');

const startedAt = Date.now();

function log(...args) {
  process.stderr.write(`[librechat-harness] ${args.join(' ')}\n`);
}

class UsageError extends Error {}

const USAGE = `usage:
  librechat.cjs history --phase off|on --seed <n> [--messages <n>]
  librechat.cjs progress
  librechat.cjs expected
  librechat.cjs hook-index --collection messages|conversations --ids <hex,hex,...>
  librechat.cjs chats --seed <n> --conversations <n> [--pipe-at <i>]
  librechat.cjs indexes
  librechat.cjs sync
  librechat.cjs compare`;

function parseArgs(argv) {
  const [command, ...rest] = argv;
  const flags = {};
  for (let i = 0; i < rest.length; i++) {
    const arg = rest[i];
    if (!arg.startsWith('--')) throw new UsageError(`unexpected argument: ${arg}`);
    const eq = arg.indexOf('=');
    if (eq > 0) {
      flags[arg.slice(2, eq)] = arg.slice(eq + 1);
    } else {
      const value = rest[i + 1];
      if (value === undefined || value.startsWith('--')) throw new UsageError(`flag ${arg} needs a value`);
      flags[arg.slice(2)] = value;
      i++;
    }
  }
  return { command, flags };
}

function intFlag(flags, name, fallback, min = 0) {
  if (flags[name] === undefined) {
    if (fallback === undefined) throw new UsageError(`--${name} is required`);
    return fallback;
  }
  const n = Number(flags[name]);
  if (!Number.isInteger(n) || n < min || n > 0xffffffff) throw new UsageError(`--${name} must be an integer >= ${min}`);
  return n;
}

// ---------------------------------------------------------------------------
// Environment set before LibreChat's modules are required (they read it at
// require time).

function prepareLogging() {
  // LibreChat's loggers write rotating files under getLogDirectory() (cwd/logs
  // by default) unless LOG_TO_FILE=false. Keep them off, and point the
  // directory at a temp dir in case a caller turns them on.
  if (process.env.LOG_TO_FILE === undefined) process.env.LOG_TO_FILE = 'false';
  if (process.env.LIBRECHAT_LOG_DIR === undefined) {
    process.env.LIBRECHAT_LOG_DIR = path.join(os.tmpdir(), 'librechat-harness-logs');
  }
  if (process.env.CONSOLE_LOG_LEVEL === undefined) process.env.CONSOLE_LOG_LEVEL = 'warn';
}

/**
 * A stand-in Meilisearch answering only what the mongoMeili plugin asks at model
 * creation (index info, settings update). `progress` and `expected` need the
 * plugin (getSyncProgress, preprocessObjectForIndex) but must not touch the
 * real Meilisearch: the plugin would otherwise create `messages`/`convos` and
 * enqueue a settings update on each, under the tests' feet.
 */
async function startInertMeili() {
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url, 'http://stub');
      const m = url.pathname.match(/^\/indexes\/([^/]+)(\/.*)?$/);
      const uid = m ? decodeURIComponent(m[1]) : null;
      const now = new Date().toISOString();
      let status = 202;
      let body;
      if (req.method === 'GET' && uid && !m[2]) {
        status = 200;
        body = { uid, primaryKey: null, createdAt: now, updatedAt: now };
      } else if (req.method === 'PATCH' && uid && m[2] === '/settings') {
        body = { taskUid: 0, indexUid: uid, status: 'enqueued', type: 'settingsUpdate', enqueuedAt: now };
      } else {
        log(`inert Meilisearch: unexpected ${req.method} ${req.url}`);
        status = 501;
        body = { message: 'not served by the harness', code: 'harness_stub', type: 'internal', link: '' };
      }
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    });
  });
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  server.unref();
  return { server, host: `http://127.0.0.1:${server.address().port}` };
}

// ---------------------------------------------------------------------------
// Deterministic data.

/** mulberry32: a small seeded PRNG (ours). */
function prng(seed) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (lo, hi) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: (list) => list[Math.floor(next() * list.length)],
    chance: (p) => next() < p,
  };
}

const hex = (n, width) => (n >>> 0).toString(16).padStart(width, '0').slice(-width);

/**
 * UUID-shaped ids (LibreChat's UUID_REGEX) that carry the seed in their first
 * group, so histories of different seeds never share an id.
 */
function idFactory(seed) {
  let counter = 0;
  return (kind) => {
    counter += 1;
    return `${hex(seed, 8)}-${hex(kind, 4)}-4${hex(counter >>> 12, 3)}-8${hex(counter, 3)}-${hex(counter, 12)}`;
  };
}

/** LibreChat user ids are ObjectId hex strings; the same few users in every run. */
const USERS = ['66a1c0de0000000000000001', '66a1c0de0000000000000002', '66a1c0de0000000000000003'];

const WORDS = [
  'river', 'quantum', 'budget', 'garden', 'lambda', 'violet', 'harbor', 'nebula', 'cipher', 'maple',
  'orbit', 'sonnet', 'kernel', 'lantern', 'mosaic', 'tundra', 'vector', 'willow', 'zephyr', 'ember',
  'café', 'naïve', 'Straße', '東京', 'données', 'crème', 'fjord', 'glacier', 'meteor', 'pixel',
];

function sentence(rand, min = 3, max = 9) {
  const n = rand.int(min, max);
  const words = [];
  for (let i = 0; i < n; i++) words.push(rand.pick(WORDS));
  const s = words.join(' ');
  return s[0].toUpperCase() + s.slice(1) + rand.pick(['.', '?', '!', '']);
}

/**
 * Content-part recipes: every part kind LibreChat's data provider names
 * (ContentTypes), text as a string and as {value}, parts without a type, empty
 * strings, and texts starting/ending with a space, so LibreChat's join rules
 * (parseTextParts with includeSteer) are all exercised.
 */
function contentRecipes(rand, ContentTypes) {
  const T = ContentTypes;
  const s = () => sentence(rand);
  return [
    ['text_string', () => [{ type: T.TEXT, text: s() }]],
    ['text_value', () => [{ type: T.TEXT, text: { value: s(), annotations: [] } }]],
    ['think_then_text', () => [{ type: T.THINK, think: s() }, { type: T.TEXT, text: s() }]],
    ['steer_then_text', () => [{ type: T.STEER, steer: s() }, { type: T.TEXT, text: s() }]],
    ['tool_call', () => [
      { type: T.TEXT, text: s() },
      { type: T.TOOL_CALL, tool_call: { id: `call_${rand.int(1, 1e6)}`, name: 'web_search', args: '{"q":"x"}', output: s(), progress: 1 } },
      { type: T.TEXT, text: s() },
    ]],
    ['image_url', () => [{ type: T.IMAGE_URL, image_url: { url: 'https://example.invalid/p.png' } }, { type: T.TEXT, text: s() }]],
    ['error_part', () => [{ type: T.ERROR, error: `An error occurred: ${s()}` }]],
    ['untyped_part', () => [{ text: s() }, { type: T.TEXT, text: s() }, { value: s() }]],
    ['empty_texts', () => [{ type: T.TEXT, text: '' }, { type: T.TEXT, text: s() }, { type: T.TEXT, text: { value: '' } }, { type: T.THINK, think: '' }]],
    ['leading_trailing_spaces', () => [
      { type: T.TEXT, text: `${s()} ` }, { type: T.TEXT, text: ` ${s()}` }, { type: T.THINK, think: ` ${s()} ` },
      { type: T.STEER, steer: `${s()} ` }, { type: T.TEXT, text: s() },
    ]],
    ['only_spaces', () => [{ type: T.TEXT, text: ' ' }, { type: T.TEXT, text: s() }, { type: T.TEXT, text: '  ' }]],
    ['other_kinds', () => [
      { type: T.TEXT_DELTA, text: s() },
      { type: T.IMAGE_FILE, image_file: { file_id: 'file-1', filepath: '/images/x.png' } },
      { type: T.VIDEO_URL, video_url: { url: 'https://example.invalid/v.mp4' } },
      { type: T.INPUT_AUDIO, input_audio: { data: 'AAAA', format: 'wav' } },
      { type: T.AGENT_UPDATE, agent_update: { index: 0, runId: 'run-1', agentId: 'agent_x' } },
      { type: T.SUMMARY, summary: s() },
      { type: T.ACTIVITY_LABEL, activity_label: s() },
      { type: T.TEXT, text: s() },
    ]],
    ['non_string_values', () => [
      { type: T.THINK, think: { value: s() } }, { type: T.STEER, steer: 42 }, { type: T.TEXT, text: { value: 7 } },
      { type: T.TEXT, text: s() }, null,
    ]],
    ['no_text_parts', () => [{ type: T.TOOL_CALL, tool_call: { id: 'call_0', name: 'calculator', args: '{}', output: '4' } }]],
    ['empty_array', () => []],
  ];
}

// ---------------------------------------------------------------------------
// LibreChat's modules, loaded once the environment is set.

let lib; // { mongoose, ds, dp, models, methods, MeiliSearch }

function loadLibreChat() {
  const mongoose = require('mongoose');
  const ds = require('@librechat/data-schemas');
  const dp = require('librechat-data-provider');
  const { MeiliSearch } = require('meilisearch');
  // No automatic collection/index builds for the ~60 models createModels
  // compiles: started all at once they make DocumentDB reset connections
  // (LibreChat ships createIndexesWithRetry for exactly that). `history` builds
  // the indexes of the two collections that matter, see buildIndexes().
  mongoose.set('autoIndex', false);
  mongoose.set('autoCreate', false);
  const models = ds.createModels(mongoose);
  const methods = ds.createMethods(mongoose);
  for (const model of [models.Message, models.Conversation]) {
    model.on('index-single-done', (err, fields, options) => {
      if (err) {
        const name = options && options.name ? ` ${options.name}` : '';
        log(`index build failed on ${model.collection.collectionName}${name} ${JSON.stringify(fields)} ${JSON.stringify(options)}: ${err.message}`);
      }
    });
  }
  lib = { mongoose, ds, dp, models, methods, MeiliSearch };
  return lib;
}

/**
 * LibreChat's schema indexes of messages and conversations (TTL on expiredAt,
 * the plugin's partial indexes when it is applied, ...), as the schemas define
 * them. Sent as one createIndexes command per collection, wrapped in LibreChat's
 * own buildIndexWithRetry: DocumentDB takes ~2 s per createIndex command (44
 * indexes: ~80 s one by one, ~50 ms in one command). If the batch fails,
 * LibreChat's createIndexesWithRetry builds them one by one so that what fails
 * is named (logged) and the rest is built. A failure is never fatal.
 */
async function buildIndexes() {
  for (const model of [lib.models.Message, lib.models.Conversation]) {
    const name = model.collection.collectionName;
    const specs = model.schema.indexes().map(([key, options]) => {
      const spec = { key, ...options };
      delete spec._autoIndex;
      // LIBRECHAT_PLAIN_UNIQUE=1 (meili-seed --indexes librechat-plain-unique):
      // the unique compound indexes built as plain ones. DocumentDB checks a
      // unique compound index through its RUM index's posting lists, so its
      // build is quadratic and every write of a document linear in the
      // collection (hours to build at 1M); a benchmark at that size keeps
      // the index and its upkeep, without the server's check.
      if (process.env.LIBRECHAT_PLAIN_UNIQUE === '1' && spec.unique && !spec.sparse) {
        delete spec.unique;
      }
      return spec;
    });
    try {
      await lib.ds.buildIndexWithRetry(() => model.collection.createIndexes(specs), `createIndexes(${name})`);
      continue;
    } catch (err) {
      log(`indexes of ${name} in one command failed (${err.message}); building them one by one`);
    }
    try {
      await lib.ds.createIndexesWithRetry(model);
    } catch (err) {
      log(`indexes of ${name} not all built: ${err.message}`);
    }
  }
}

async function connect() {
  const uri = process.env.MONGO_URI;
  if (!uri) throw new UsageError('MONGO_URI is not set');
  const options = {};
  if (!/[?&]serverSelectionTimeoutMS=/i.test(uri)) options.serverSelectionTimeoutMS = 20000;
  // The DocumentDB gateway on the test machine resets connections (ECONNRESET,
  // "pool cleared": every in-flight write lost, LibreChat's detached hooks
  // included) when two connections are being established at once; with the
  // driver's default maxConnecting=2 that happened in 9 of 15 bursts of 50
  // queries, with maxConnecting=1 in none. So: one handshake at a time, a small pool.
  if (!/[?&]maxConnecting=/i.test(uri)) options.maxConnecting = 1;
  if (!/[?&]maxPoolSize=/i.test(uri)) options.maxPoolSize = 10;
  if (process.env.LIBRECHAT_DB) options.dbName = process.env.LIBRECHAT_DB;
  else {
    const m = uri.match(/^mongodb(?:\+srv)?:\/\/[^/]+\/([^?]+)/);
    if (!m) throw new UsageError('LIBRECHAT_DB is not set and MONGO_URI names no database');
  }
  // Connecting writes nothing, so a reset while connecting (see
  // againAfterReset) is simply tried again.
  await againAfterReset('connect', () => lib.mongoose.connect(uri, options));
}

const EXCLUDED_PATH = { messages: 'subagentTask', conversations: 'subagentThread' };

/**
 * LibreChat's saveConvo/saveMessage, again after a connection the server
 * reset. Both are upserts keyed by the conversation's or message's id, so a
 * second call writes the same document. Under CI's load the DocumentDB
 * gateway on the test machines now and then resets a connection as it is
 * made (ECONNRESET): the test server's trouble, not what a test is about.
 */
async function againAfterReset(what, save) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await save();
    } catch (err) {
      const text = `${err && err.name} ${err && err.message}`;
      if (attempt >= 4 || !/MongoNetworkError|ECONNRESET|pool.*clear/i.test(text)) throw err;
      log(`${what}: the connection was reset (${text}); saving again (attempt ${attempt + 1})`);
      await new Promise((r) => setTimeout(r, 250 * attempt));
    }
  }
}

// ---------------------------------------------------------------------------
// Waiting for LibreChat's detached Meili hooks.

/**
 * The mongoMeili hooks run detached after each write returns. Settled means:
 *  - no document this process wrote through the models is still stamped
 *    `_meiliIndexAttempted: true` without `_meiliIndex: true` (a hook in flight);
 *  - the plugin's start-up index setup (a settingsUpdate task on `messages`
 *    and on `convos`) has reached Meilisearch;
 *  - Meilisearch has no enqueued/processing task on `messages`/`convos`
 *    enqueued since this process started;
 * all observed on two consecutive polls.
 */
async function settleHooks(touched) {
  const timeoutMs = Number(process.env.HARNESS_SETTLE_TIMEOUT_MS || 60000);
  const deadline = Date.now() + timeoutMs;
  const { Message, Conversation } = lib.models;
  const client = new lib.MeiliSearch({ host: process.env.MEILI_HOST, apiKey: process.env.MEILI_MASTER_KEY });
  const since = new Date(startedAt - 5);
  let quietPolls = 0;
  let pending = [];
  const t0 = Date.now();
  for (;;) {
    pending = [];
    for (const [name, model] of [['messages', Message], ['conversations', Conversation]]) {
      const ids = [...touched[name]].map((id) => new lib.mongoose.Types.ObjectId(id));
      if (ids.length === 0) continue;
      const inFlight = await model.collection
        .find({ _id: { $in: ids }, _meiliIndexAttempted: true, _meiliIndex: { $ne: true } }, { projection: { _id: 1 } })
        .toArray();
      if (inFlight.length > 0) {
        pending.push(`${inFlight.length} ${name} still _meiliIndexAttempted without _meiliIndex (${inFlight.slice(0, 5).map((d) => String(d._id)).join(', ')}${inFlight.length > 5 ? ', ...' : ''})`);
      }
    }
    try {
      const setup = await client.getTasks({ indexUids: ['messages', 'convos'], types: ['settingsUpdate'], afterEnqueuedAt: since, limit: 100 });
      for (const uid of ['messages', 'convos']) {
        if (!setup.results.some((t) => t.indexUid === uid)) pending.push(`LibreChat's index setup (settingsUpdate) not yet seen on Meili index ${uid}`);
      }
      const busy = await client.getTasks({ indexUids: ['messages', 'convos'], statuses: ['enqueued', 'processing'], afterEnqueuedAt: since, limit: 100 });
      if (busy.results.length > 0) {
        pending.push(`Meili tasks not finished: ${busy.results.map((t) => `${t.uid} ${t.type} on ${t.indexUid} (${t.status})`).join('; ')}`);
      }
    } catch (err) {
      pending.push(`Meilisearch not answering: ${err.message}`);
    }
    if (pending.length === 0) {
      quietPolls += 1;
      if (quietPolls >= 2) return { settled: true, waitedMs: Date.now() - t0 };
    } else {
      quietPolls = 0;
    }
    if (Date.now() >= deadline) {
      log(`warning: LibreChat's Meili hooks had not settled after ${timeoutMs} ms; still pending:\n  ${pending.join('\n  ')}`);
      return { settled: false, waitedMs: Date.now() - t0, pending };
    }
    await new Promise((r) => setTimeout(r, 150));
  }
}

// ---------------------------------------------------------------------------
// history

async function history(flags) {
  const phase = flags.phase;
  const seed = intFlag(flags, 'seed');
  const messageTarget = intFlag(flags, 'messages', 40, 1);
  const { Message, Conversation } = lib.models;
  const m = lib.methods;
  const { RetentionMode, ContentTypes } = lib.dp;
  const rand = prng(seed * 2654435761 + 0x9e3779b9);
  const newId = idFactory(seed);
  const ObjectId = lib.mongoose.Types.ObjectId;
  let lap = Date.now();
  const step = (what) => { const t = Date.now(); log(`history: ${what} (${t - lap} ms)`); lap = t; };
  await buildIndexes();
  step('indexes of messages and conversations');
  const written = {};
  const count = (kind, n = 1) => { written[kind] = (written[kind] || 0) + n; };
  const touched = { messages: new Set(), conversations: new Set() };
  const touch = (name, doc) => {
    if (!doc || doc._id == null) throw new Error(`LibreChat returned no ${name} document: ${JSON.stringify(doc)}`);
    touched[name].add(String(doc._id));
    return doc;
  };
  const recipes = contentRecipes(rand, ContentTypes);
  const day = 24 * 3600 * 1000;

  const retentionConfig = () => ({ retentionMode: RetentionMode.ALL, generalChatRetention: 24 * rand.int(3, 14) });
  /** Request context per retention class, as LibreChat's routes pass it to saveMessage/saveConvo. */
  const contexts = {
    permanent: (user) => ({ userId: user, isTemporary: false }),
    temporary: (user) => ({ userId: user, isTemporary: true }),
    retention: (user) => ({ userId: user, isTemporary: false, interfaceConfig: retentionConfig() }),
    permanent_implicit: (user) => ({ userId: user }),
    retention_implicit: (user) => ({ userId: user, interfaceConfig: retentionConfig() }),
  };

  async function saveConvo(ctx, params, kind) {
    const convo = await againAfterReset(`saveConvo ${params.conversationId}`, () => m.saveConvo(ctx, params, { context: 'librechat-harness' }));
    if (!convo || convo._id == null) throw new Error(`saveConvo failed for ${params.conversationId}: ${JSON.stringify(convo)}`);
    touch('conversations', convo);
    if (kind) count(kind);
    return convo;
  }
  async function saveMessage(ctx, params, kind) {
    const msg = await againAfterReset(`saveMessage ${params.messageId}`, () => m.saveMessage(ctx, params, { context: 'librechat-harness' }));
    if (!msg || msg._id == null) throw new Error(`saveMessage failed for ${params.messageId}`);
    touch('messages', msg);
    if (kind) count(kind);
    return msg;
  }

  /** One turn-by-turn chat: user messages carry plain text, assistant messages content parts (or plain text). */
  function chatMessages(conversationId, n, opts = {}) {
    const list = [];
    let parent = '00000000-0000-0000-0000-000000000000';
    for (let i = 0; i < n; i++) {
      const messageId = newId(0x0002);
      const isUser = i % 2 === 0;
      const params = {
        messageId, conversationId, parentMessageId: parent, isCreatedByUser: isUser,
        sender: isUser ? 'User' : rand.pick(['GPT-4o', 'Claude', 'Assistant']),
        endpoint: 'openAI', model: isUser ? null : 'gpt-4o', tokenCount: rand.int(5, 400),
      };
      if (isUser) {
        params.text = sentence(rand);
      } else if (opts.recipe) {
        params.text = '';
        params.content = opts.recipe();
      } else if (rand.chance(0.25)) {
        params.text = sentence(rand, 5, 14); // plain text, no content
      } else {
        const [, make] = rand.pick(recipes);
        params.text = rand.chance(0.3) ? sentence(rand) : '';
        params.content = make();
      }
      list.push(params);
      parent = messageId;
    }
    return list;
  }

  // -- regular conversations, one retention class each (cycled) ------------
  const classes = ['permanent', 'temporary', 'retention', 'permanent_implicit', 'retention_implicit', 'permanent'];
  const convoCount = Math.max(classes.length, Math.round(messageTarget / 6));
  const base = Math.max(4, Math.floor(messageTarget / convoCount));
  const extra = Math.max(0, messageTarget - base * convoCount);
  const regular = [];
  for (let c = 0; c < convoCount; c++) {
    const cls = classes[c % classes.length];
    const user = USERS[c % USERS.length];
    const ctx = contexts[cls](user);
    const conversationId = newId(0x0001);
    const convoParams = {
      conversationId, endpoint: 'openAI', model: 'gpt-4o', title: 'New Chat',
      ...(rand.chance(0.5) ? { tags: [rand.pick(['work', 'ideas', 'travel'])] } : {}),
    };
    await saveConvo(ctx, convoParams, `convo_${cls}`);
    const msgs = chatMessages(conversationId, base + (c < extra ? 1 : 0));
    const saved = [];
    for (const params of msgs) saved.push(await saveMessage(ctx, params, `message_${cls}`));
    await saveConvo(ctx, { conversationId, endpoint: 'openAI', model: 'gpt-4o', title: sentence(rand, 2, 5) });
    regular.push({ cls, user, ctx, conversationId, params: msgs, saved });
  }

  step('regular conversations');
  // -- one permanent conversation showing every content recipe --------------
  const showcaseUser = USERS[0];
  const showcaseCtx = contexts.permanent(showcaseUser);
  const showcaseId = newId(0x0003);
  await saveConvo(showcaseCtx, { conversationId: showcaseId, endpoint: 'agents', title: 'Every content part' }, 'convo_showcase');
  {
    let parent = '00000000-0000-0000-0000-000000000000';
    const first = { messageId: newId(0x0003), conversationId: showcaseId, parentMessageId: parent, isCreatedByUser: true, sender: 'User', text: ' Leading and trailing spaces ' };
    await saveMessage(showcaseCtx, first, 'message_showcase_plain_text');
    parent = first.messageId;
    for (const [name, make] of recipes) {
      const params = {
        messageId: newId(0x0003), conversationId: showcaseId, parentMessageId: parent, isCreatedByUser: false,
        sender: 'Agent', endpoint: 'agents', text: name === 'empty_array' ? sentence(rand) : '', content: make(),
      };
      await saveMessage(showcaseCtx, params, `message_content_${name}`);
      parent = params.messageId;
    }
    // text set and no content at all, and an assistant error message
    await saveMessage(showcaseCtx, { messageId: newId(0x0003), conversationId: showcaseId, parentMessageId: parent, isCreatedByUser: false, sender: 'Agent', text: sentence(rand) }, 'message_showcase_plain_text');
    await saveMessage(showcaseCtx, { messageId: newId(0x0003), conversationId: showcaseId, parentMessageId: parent, isCreatedByUser: false, sender: 'Agent', text: 'Something went wrong.', error: true }, 'message_showcase_error_flag');
  }

  step('showcase conversation');
  // -- conversationIds containing '|': convo via saveConvo, messages via the model
  // (saveMessage rejects non-UUID ids), which runs the plugin's save hooks.
  const pipeConvos = [];
  for (const [kind, temporary, id] of [
    ['pipe', false, `${newId(0x0004)}|${newId(0x0004)}`],
    ['pipe_temporary', true, `${newId(0x0004)}|side|${newId(0x0004)}`],
  ]) {
    const user = USERS[1];
    await saveConvo(temporary ? contexts.temporary(user) : contexts.permanent(user), { conversationId: id, endpoint: 'openAI', title: `Pipe ${kind}` }, `convo_${kind}`);
    const docs = [];
    const expiredAt = temporary ? new Date(Date.now() + 30 * day) : undefined;
    let i = 0;
    for (const params of chatMessages(id, 3)) {
      const fields = { ...params, user };
      if (temporary) Object.assign(fields, { isTemporary: true, expiredAt });
      else if (i % 2 === 0) fields.isTemporary = false; // explicit; the others rely on the schema default
      const doc = i === 1 ? await lib.models.Message.create(fields) : await new Message(fields).save();
      touch('messages', doc);
      count(`message_${kind}`);
      docs.push(doc);
      i++;
    }
    pipeConvos.push({ id, user, docs });
  }

  step('pipe conversations');
  // -- subagent threads (child conversations, excluded from search) and
  // subagent task messages (excluded), beside ordinary replies in the thread.
  const deletedParent = regular[3]; // the convo deleted below takes its child thread with it
  const subagentParents = [
    { conversationId: showcaseId, user: showcaseUser, ctx: showcaseCtx },
    { conversationId: deletedParent.conversationId, user: deletedParent.user, ctx: deletedParent.ctx },
  ];
  for (const parent of subagentParents) {
    const childId = newId(0x0005);
    const taskId = newId(0x0005);
    const reserved = await m.reserveSubagentThread({
      user: parent.user,
      conversationId: childId,
      conversation: {
        title: `Subagent: ${sentence(rand, 2, 4)}`,
        endpoint: 'agents',
        agent_id: 'agent_researcher',
        subagentThread: {
          rootConversationId: parent.conversationId,
          parentConversationId: parent.conversationId,
          parentMessageId: newId(0x0005),
          parentToolCallId: `call_${rand.int(1, 1e6)}`,
          parentAgentId: 'agent_main',
          subagentType: 'researcher',
          subagentKind: 'agent',
          depth: 1,
        },
      },
    });
    touch('conversations', reserved.conversation);
    count('convo_subagent_thread');
    await saveMessage(parent.ctx, {
      messageId: `${taskId}:user`, conversationId: childId, isCreatedByUser: true, sender: 'User', text: sentence(rand),
      subagentTask: { attemptKey: newId(0x0005), parentRunId: `run_${rand.int(1, 1e6)}`, requestFingerprint: hex(rand.int(0, 0xffffff), 8), status: 'completed' },
    }, 'message_subagent_task');
    await saveMessage(parent.ctx, {
      messageId: newId(0x0005), conversationId: childId, parentMessageId: `${taskId}:user`, isCreatedByUser: false,
      sender: 'Researcher', text: '', content: [{ type: ContentTypes.TEXT, text: sentence(rand) }],
    }, 'message_subagent_thread_reply');
  }

  step('subagent records');
  // -- legacy records written with the raw driver: no isTemporary ------------
  const now = Date.now();
  const legacyFuture = () => new Date(now + rand.int(2, 20) * day);
  const rawConvo = async (kind, fields) => {
    await Conversation.collection.insertOne({
      _id: new ObjectId(), user: USERS[2], endpoint: 'openAI', messages: [],
      createdAt: new Date(now - 400 * day), updatedAt: new Date(now - 400 * day), __v: 0, ...fields,
    });
    count(kind);
  };
  const rawMessage = async (kind, fields) => {
    const doc = {
      _id: new ObjectId(), messageId: newId(0x0006), user: USERS[2], sender: 'User', isCreatedByUser: true,
      error: false, createdAt: new Date(now - 400 * day), updatedAt: new Date(now - 400 * day), __v: 0, ...fields,
    };
    for (const key of Object.keys(doc)) if (doc[key] === undefined) delete doc[key];
    await Message.collection.insertOne(doc);
    count(kind);
  };
  const legacyPermanent = newId(0x0006);
  const legacyUntitled = newId(0x0006);
  const legacyExpiring = newId(0x0006);
  const legacySubagent = newId(0x0006);
  await rawConvo('convo_legacy_permanent_indexed', { conversationId: legacyPermanent, title: sentence(rand, 2, 4), tags: ['legacy'], _meiliIndex: true });
  await rawConvo('convo_legacy_permanent_untitled', { conversationId: legacyUntitled }); // no title, tags or flags
  await rawConvo('convo_legacy_expiring', { conversationId: legacyExpiring, title: sentence(rand, 2, 4), expiredAt: legacyFuture(), _meiliIndex: false });
  await rawConvo('convo_legacy_subagent_indexed', {
    conversationId: legacySubagent, title: 'Legacy subagent thread', _meiliIndex: true,
    subagentThread: { rootConversationId: legacyPermanent, parentConversationId: legacyPermanent, parentMessageId: newId(0x0006), parentToolCallId: 'call_legacy', subagentType: 'researcher', subagentKind: 'agent', depth: 1 },
  });
  await rawMessage('message_legacy_permanent_indexed', { conversationId: legacyPermanent, text: sentence(rand), _meiliIndex: true });
  await rawMessage('message_legacy_permanent_unflagged', { conversationId: legacyPermanent, text: sentence(rand) });
  await rawMessage('message_legacy_permanent_unindexed', { conversationId: legacyPermanent, sender: 'GPT-3.5', isCreatedByUser: false, text: sentence(rand), _meiliIndex: false });
  await rawMessage('message_legacy_content_parts', {
    conversationId: legacyPermanent, sender: 'Assistant', isCreatedByUser: false, text: 'stale text',
    content: [{ type: 'text', text: { value: sentence(rand) } }, { type: 'text', text: ` ${sentence(rand)}` }],
  });
  await rawMessage('message_legacy_empty_content', { conversationId: legacyPermanent, sender: 'Assistant', isCreatedByUser: false, text: sentence(rand), content: [] });
  await rawMessage('message_legacy_no_sender', { conversationId: legacyUntitled, sender: undefined, text: sentence(rand) });
  await rawMessage('message_legacy_expiring', { conversationId: legacyExpiring, text: sentence(rand), expiredAt: legacyFuture() });
  await rawMessage('message_legacy_expiring', { conversationId: legacyExpiring, text: sentence(rand), expiredAt: legacyFuture(), _meiliIndex: true });
  await rawMessage('message_legacy_subagent_indexed', {
    conversationId: legacySubagent, messageId: `${newId(0x0006)}:user`, text: sentence(rand), _meiliIndex: true,
    subagentTask: { attemptKey: newId(0x0006), status: 'completed' },
  });

  step('legacy records');
  // -- edits through LibreChat's methods and models ---------------------------
  const r0 = regular[0];
  const r2 = regular[2];
  const r4 = regular[4];
  // saveMessage again: new text for a user message, new content for an assistant message
  await saveMessage(r0.ctx, { ...r0.params[0], text: `${sentence(rand)} (edited)` }, 'edit_message_resave_text');
  await saveMessage(r0.ctx, { ...r0.params[1], text: '', content: [{ type: ContentTypes.THINK, think: sentence(rand) }, { type: ContentTypes.TEXT, text: `${sentence(rand)} (regenerated)` }] }, 'edit_message_resave_content');
  // updateMessageText (an updateOne: no Meili hook runs)
  for (const r of [r0.params[2], r2.params[1]]) {
    await m.updateMessageText(r0.params.includes(r) ? r0.user : r2.user, { messageId: r.messageId, text: `${sentence(rand)} (text updated)` });
    count('edit_message_update_text');
  }
  // updateMessage (findOneAndUpdate)
  await m.updateMessage(r4.user, { messageId: r4.params[0].messageId, text: `${sentence(rand)} (updated)` }, { context: 'librechat-harness' });
  touched.messages.add(String(r4.saved[0]._id));
  count('edit_message_update');
  // a message edited through the model and saved (post-save hook)
  {
    const doc = await Message.findById(pipeConvos[0].docs[0]._id).select('+_meiliIndex +_meiliIndexAttempted');
    doc.text = `${sentence(rand)} (edited in place)`;
    await doc.save();
    touch('messages', doc);
    count('edit_message_model_save');
  }
  // new titles
  for (const r of [r0, r2]) await saveConvo(r.ctx, { conversationId: r.conversationId, title: `${sentence(rand, 2, 4)} (renamed)` }, 'edit_convo_retitle');
  // a temporary chat made permanent, and a permanent chat made temporary (conversation and its messages)
  const flips = [['edit_temporary_to_permanent', regular[1], contexts.permanent], ['edit_permanent_to_temporary', regular[5], contexts.temporary]];
  for (const [kind, r, makeCtx] of flips) {
    const ctx = makeCtx(r.user);
    await saveConvo(ctx, { conversationId: r.conversationId }, `${kind}_convo`);
    for (const params of r.params) await saveMessage(ctx, params, `${kind}_message`);
  }

  step('edits');
  // -- deletes through LibreChat's methods ---------------------------------------
  {
    const del = await m.deleteMessages({ user: r0.user, messageId: { $in: [r0.params[3].messageId] } });
    const del2 = await m.deleteMessages({ user: r2.user, messageId: { $in: [r2.params[3].messageId] } });
    count('delete_messages', del.deletedCount + del2.deletedCount);
  }
  {
    const res = await m.deleteConvos(deletedParent.user, { conversationId: deletedParent.conversationId });
    count('delete_convos_conversations', res.deletedCount);
    count('delete_convos_messages', res.messages.deletedCount);
  }

  step('deletes');
  const settle = phase === 'on' ? await settleHooks(touched) : { settled: true, waitedMs: 0 };
  if (phase === 'on') step(`LibreChat's Meili hooks settled=${settle.settled}`);
  return { phase, seed, written, settled: settle.settled, ...(settle.pending ? { pending: settle.pending } : {}) };
}

// ---------------------------------------------------------------------------
// chats

/**
 * Many small permanent chats, written with search off (no hooks) as users
 * write them: per conversation LibreChat's saveConvo, then saveMessage of a
 * user question (plain text) and of an assistant answer whose words are in
 * content parts (text empty, as LibreChat's agents save them). Conversation
 * number --pipe-at (0-based) gets an id holding `|` — the character
 * LibreChat's preprocessObjectForIndex() rewrites as `--` because Meilisearch
 * ids may not hold it. Its messages are saved through the Message model
 * (saveMessage accepts UUID conversation ids only), as `history` does.
 */
async function chats(flags) {
  const seed = intFlag(flags, 'seed');
  const total = intFlag(flags, 'conversations', undefined, 1);
  const pipeAt = flags['pipe-at'] === undefined ? -1 : intFlag(flags, 'pipe-at');
  if (pipeAt >= total) throw new UsageError('--pipe-at must be below --conversations');
  const { Message } = lib.models;
  const m = lib.methods;
  const { ContentTypes } = lib.dp;
  const rand = prng(seed * 2654435761 + 0x85ebca6b);
  const newId = idFactory(seed);
  const metadata = { context: 'librechat-harness' };
  await buildIndexes();
  let messages = 0;
  let pipe = null;
  for (let c = 0; c < total; c++) {
    const user = USERS[c % USERS.length];
    const ctx = { userId: user, isTemporary: false };
    const conversationId = c === pipeAt ? `${newId(0x0007)}|${newId(0x0007)}` : newId(0x0007);
    if (c === pipeAt) pipe = conversationId;
    const convo = await againAfterReset(`saveConvo ${conversationId}`, () => m.saveConvo(ctx, { conversationId, endpoint: 'agents', title: sentence(rand, 2, 5) }, metadata));
    if (!convo || convo._id == null) throw new Error(`saveConvo failed for ${conversationId}: ${JSON.stringify(convo)}`);
    const question = {
      messageId: newId(0x0007), conversationId, parentMessageId: '00000000-0000-0000-0000-000000000000',
      isCreatedByUser: true, sender: 'User', endpoint: 'agents', text: sentence(rand),
    };
    const answer = {
      messageId: newId(0x0007), conversationId, parentMessageId: question.messageId, isCreatedByUser: false,
      sender: 'Agent', endpoint: 'agents', text: '',
      content: [{ type: ContentTypes.THINK, think: sentence(rand) }, { type: ContentTypes.TEXT, text: sentence(rand) }],
    };
    for (const params of [question, answer]) {
      const saved = c === pipeAt
        ? await new Message({ ...params, user, isTemporary: false }).save()
        : await againAfterReset(`saveMessage ${params.messageId}`, () => m.saveMessage(ctx, params, metadata));
      if (!saved || saved._id == null) throw new Error(`saving message ${params.messageId} failed`);
      messages += 1;
    }
    if ((c + 1) % 500 === 0) log(`chats: ${c + 1} of ${total} conversations`);
  }
  return { seed, conversations: total, messages, pipe };
}

// ---------------------------------------------------------------------------
// progress / expected / hook-index

async function progress() {
  const { Message, Conversation } = lib.models;
  const [messages, conversations] = await Promise.all([Message.getSyncProgress(), Conversation.getSyncProgress()]);
  return { messages, conversations };
}

async function expected() {
  const { Message, Conversation } = lib.models;
  const out = {};
  for (const [name, model] of [['messages', Message], ['conversations', Conversation]]) {
    const searchableQuery = { $and: [lib.ds.buildRetentionVisibilityFilter(), { [EXCLUDED_PATH[name]]: { $exists: false } }] };
    const searchable = new Set((await model.find(searchableQuery).select('_id').lean()).map((d) => String(d._id)));
    const raws = await model.collection.find({}).sort({ _id: 1 }).toArray();
    out[name] = raws.map((raw) => ({
      _id: String(raw._id),
      searchable: searchable.has(String(raw._id)),
      unfinished: raw.unfinished === true,
      hasUser: raw.user !== undefined && raw.user !== null,
      doc: model.hydrate(raw).preprocessObjectForIndex(),
    }));
  }
  return out;
}

/**
 * LibreChat's own indexes on messages and conversations (its schemas' and the
 * mongoMeili plugin's, as LibreChat builds them at start): what a benchmark's
 * collections must carry, since they set what every write costs. Prints the
 * index names each collection has afterwards.
 */
async function indexes() {
  await buildIndexes();
  const out = {};
  for (const model of [lib.models.Message, lib.models.Conversation]) {
    const name = model.collection.collectionName;
    out[name] = (await model.collection.indexes()).map((index) => index.name).sort();
  }
  return out;
}

/**
 * LibreChat's own bulk sync, as its API replicas run it at start: each
 * model's `syncWithMeili()` (its cleanup of the index first, then pages of
 * MEILI_SYNC_BATCH_SIZE unindexed documents — 100 by default — each sent
 * with addDocumentsInBatches and marked, MEILI_SYNC_DELAY_MS apart — 100 ms
 * by default), messages then conversations, into the fixed indexes
 * `messages` and `convos`. Times until both calls return and until
 * Meilisearch has indexed everything they enqueued.
 */
async function librechatSync() {
  const { Message, Conversation } = lib.models;
  const client = new lib.MeiliSearch({ host: process.env.MEILI_HOST, apiKey: process.env.MEILI_MASTER_KEY });
  const since = new Date(Date.now() - 5);
  const latest = await client.getTasks({ limit: 1 });
  const before = latest.results.length > 0 ? latest.results[0].uid : -1;
  const started = Date.now();
  await Message.syncWithMeili();
  await Conversation.syncWithMeili();
  const returnedMs = Date.now() - started;
  for (;;) {
    const busy = await client.getTasks({ indexUids: ['messages', 'convos'], statuses: ['enqueued', 'processing'], afterEnqueuedAt: since, limit: 1 });
    if (busy.results.length === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const doneMs = Date.now() - started;
  const [messages, conversations] = await Promise.all([Message.getSyncProgress(), Conversation.getSyncProgress()]);
  // The document tasks Meilisearch failed: LibreChat enqueued them and never
  // looked at their outcome. Listed newest first, all pages.
  const failed = [];
  for (let from; ;) {
    const page = await client.getTasks({ indexUids: ['messages', 'convos'], statuses: ['failed'], types: ['documentAdditionOrUpdate'], limit: 1000, ...(from === undefined ? {} : { from }) });
    const recent = page.results.filter((t) => t.uid > before);
    for (const t of recent) {
      failed.push({ uid: t.uid, indexUid: t.indexUid, code: t.error ? t.error.code : null, receivedDocuments: t.details ? t.details.receivedDocuments : null });
    }
    if (recent.length < page.results.length || page.next == null) break;
    from = page.next;
  }
  failed.reverse();
  return { returned_secs: returnedMs / 1000, secs: doneMs / 1000, progress: { messages, conversations }, failed_tasks: failed };
}

/**
 * What the real Meilisearch holds against LibreChat's own projection: per
 * index, the documents LibreChat's hooks index (searchable by its filter, not
 * `unfinished`; its preprocessObjectForIndex() of each), and of those how
 * many Meilisearch holds equal, holds differing, lacks (and how many of these
 * MongoDB flags `_meiliIndex: true`), plus the documents it holds that its
 * hooks would not (unfinished, or not searchable). Read-only; a few examples
 * each.
 */
async function compare(meili) {
  const { Message, Conversation } = lib.models;
  const client = new lib.MeiliSearch({ host: meili.host, apiKey: meili.key });
  const EXAMPLES = 3;
  const out = {};
  for (const [name, model, uid, pk] of [['messages', Message, 'messages', 'messageId'], ['conversations', Conversation, 'convos', 'conversationId']]) {
    const held = new Map();
    try {
      for (let offset = 0; ;) {
        const page = await client.index(uid).getDocuments({ limit: 1000, offset });
        for (const doc of page.results) held.set(String(doc[pk]), doc);
        if (page.results.length < 1000) break;
        offset += page.results.length;
      }
    } catch (err) {
      if (!err || err.code !== 'index_not_found') throw err;
    }
    const searchableQuery = { $and: [lib.ds.buildRetentionVisibilityFilter(), { [EXCLUDED_PATH[name]]: { $exists: false } }] };
    const searchable = new Set((await model.find(searchableQuery).select('_id').lean()).map((d) => String(d._id)));
    const counts = { expected: 0, held: held.size, matching: 0, differing: 0, missing: 0, missingFlagged: 0, unexpected: 0 };
    const examples = { differing: [], missingFlagged: [], unexpected: [] };
    const note = (kind, value) => { if (examples[kind].length < EXAMPLES) examples[kind].push(value); };
    const wanted = new Set();
    for await (const raw of model.collection.find({}).sort({ _id: 1 })) {
      if (!searchable.has(String(raw._id)) || raw.unfinished === true) continue;
      const doc = JSON.parse(JSON.stringify(model.hydrate(raw).preprocessObjectForIndex()));
      const id = String(doc[pk]);
      wanted.add(id);
      counts.expected += 1;
      const have = held.get(id);
      if (have === undefined) {
        counts.missing += 1;
        if (raw._meiliIndex === true) {
          counts.missingFlagged += 1;
          note('missingFlagged', id);
        }
      } else if (isDeepStrictEqual(have, doc)) {
        counts.matching += 1;
      } else {
        counts.differing += 1;
        note('differing', { held: have, librechat: doc });
      }
    }
    for (const id of held.keys()) {
      if (!wanted.has(id)) {
        counts.unexpected += 1;
        note('unexpected', id);
      }
    }
    out[name] = { index: uid, ...counts, examples };
  }
  return out;
}

async function hookIndex(flags) {
  const name = flags.collection;
  if (name !== 'messages' && name !== 'conversations') throw new UsageError('--collection must be messages or conversations');
  if (!flags.ids) throw new UsageError('--ids is required');
  const ids = flags.ids.split(',').map((s) => s.trim()).filter(Boolean);
  for (const id of ids) if (!/^[0-9a-f]{24}$/i.test(id)) throw new UsageError(`not an ObjectId: ${id}`);
  const model = name === 'messages' ? lib.models.Message : lib.models.Conversation;
  const select = ['+_meiliIndex', '+_meiliIndexAttempted', '+_meiliIndexVersion', '+_meiliIndexSchemaVersion', '+_meiliCleanupVersion'];
  if (name === 'messages') select.push('+subagentTask'); // so the pre-save hook sees the exclusion
  const docs = await model.find({ _id: { $in: ids } }).select(select.join(' '));
  const touched = { messages: new Set(), conversations: new Set() };
  const saved = [];
  for (const doc of docs) {
    // LibreChat's own save path: its pre-save hook stamps the document, its post-save hook indexes it.
    await doc.save();
    touched[name].add(String(doc._id));
    saved.push(String(doc._id));
  }
  const order = new Map(ids.map((id, i) => [id.toLowerCase(), i]));
  saved.sort((a, b) => order.get(a) - order.get(b));
  const found = new Set(saved);
  const settle = await settleHooks(touched);
  return { collection: name, saved, missing: ids.filter((id) => !found.has(id.toLowerCase())), settled: settle.settled, ...(settle.pending ? { pending: settle.pending } : {}) };
}

// ---------------------------------------------------------------------------

async function main() {
  const { command, flags } = parseArgs(process.argv.slice(2));
  prepareLogging();
  let inert;
  let realMeili;
  const useRealMeili = () => {
    if (!process.env.MEILI_HOST || !process.env.MEILI_MASTER_KEY) throw new UsageError(`${command} needs MEILI_HOST and MEILI_MASTER_KEY`);
    process.env.SEARCH = 'true';
  };
  switch (command) {
    case 'history':
      if (flags.phase === 'off') {
        // Search off: the plugin is not applied, LibreChat never contacts Meilisearch.
        delete process.env.MEILI_HOST;
        delete process.env.MEILI_MASTER_KEY;
        delete process.env.SEARCH;
      } else if (flags.phase === 'on') {
        useRealMeili();
      } else {
        throw new UsageError('--phase must be off or on');
      }
      intFlag(flags, 'seed');
      break;
    case 'hook-index':
    case 'sync':
      useRealMeili();
      break;
    case 'chats':
      // Search off, as `history --phase off`.
      delete process.env.MEILI_HOST;
      delete process.env.MEILI_MASTER_KEY;
      delete process.env.SEARCH;
      intFlag(flags, 'seed');
      intFlag(flags, 'conversations', undefined, 1);
      break;
    case 'compare':
      if (!process.env.MEILI_HOST || !process.env.MEILI_MASTER_KEY) throw new UsageError('compare needs MEILI_HOST and MEILI_MASTER_KEY');
      realMeili = { host: process.env.MEILI_HOST, key: process.env.MEILI_MASTER_KEY };
    // falls through: the models get the inert stand-in, the comparison reads the real one
    case 'progress':
    case 'expected':
    case 'indexes':
      inert = await startInertMeili();
      process.env.MEILI_HOST = inert.host;
      process.env.MEILI_MASTER_KEY = 'librechat-harness-inert';
      delete process.env.SEARCH;
      break;
    default:
      throw new UsageError(command ? `unknown command: ${command}` : 'no command');
  }
  loadLibreChat();
  await connect();
  let result;
  try {
    if (command === 'history') result = await history(flags);
    else if (command === 'progress') result = await progress();
    else if (command === 'expected') result = await expected();
    else if (command === 'indexes') result = await indexes();
    else if (command === 'sync') result = await librechatSync();
    else if (command === 'chats') result = await chats(flags);
    else if (command === 'compare') result = await compare(realMeili);
    else result = await hookIndex(flags);
  } finally {
    await lib.mongoose.disconnect().catch(() => undefined);
    if (inert) inert.server.close();
  }
  log(`${command} done in ${Date.now() - startedAt} ms`);
  return result;
}

main().then(
  (result) => {
    writeStdout(`${JSON.stringify(result)}\n`, () => process.exit(0));
  },
  (err) => {
    if (err instanceof UsageError) {
      log(`error: ${err.message}\n${USAGE}`);
      process.exit(2);
    }
    log(`error: ${err && err.stack ? err.stack : err}`);
    process.exit(1);
  },
);
