// Two Messages agent sessions driven by the real Node Anthropic SDK (required from
// ANTHROPIC_PKG), through compactd (BASE_URL), each asking for compaction the way Anthropic's API
// offers it: the compact_20260112 edit with an input_tokens trigger (TRIGGER), beta
// compact-2026-01-12. One session uses messages.create (JSON), the other messages.stream, whose
// accumulator must assemble compactd's compaction block from its events. Every turn asks the
// model to read a file; the "agent" runs the tool itself and feeds back a large output, the
// first one holding FACT_LINE. The client keeps the whole history and sends every response's
// content back as it came, compaction blocks included. The stream session's last turn asks ASK.
// It prints one JSON report per session: per request the content types, any compaction block,
// the stop reason, the iterations and (stream) the event sequence.
const sdk = require(process.env.ANTHROPIC_PKG);
const Anthropic = sdk.Anthropic || sdk.default;

const client = new Anthropic({ baseURL: process.env.BASE_URL, apiKey: 'sk-ant-test', maxRetries: 0 });
const trigger = parseInt(process.env.TRIGGER, 10);
const filler = (i) => Array.from({ length: 240 }, (_, k) => `file ${i}: the parser reads one more line here and keeps going through the whole input, line ${k}`).join('\n');
const tools = [{ name: 'read_file', description: 'Read a file',
  input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } }];
const params = (messages) => ({
  model: 'claude-fake', max_tokens: 1024, system: 'You are a careful coding agent.', tools, messages,
  context_management: { edits: [{ type: 'compact_20260112', trigger: { type: 'input_tokens', value: trigger } }] },
  betas: ['compact-2026-01-12'],
});

async function call(session, messages) {
  const rec = { raw: '', types: [], compaction: null, stopReason: '', iterations: null, events: [], compactionEvents: 0 };
  session.requests.push(rec);
  let msg;
  if (!session.stream) {
    msg = await client.beta.messages.create(params(messages));
  } else {
    const s = client.beta.messages.stream(params(messages));
    s.on('streamEvent', (e) => {
      const b = e.content_block || e.delta;
      rec.events.push(e.type + (b && b.type ? ':' + b.type : ''));
    });
    s.on('compaction', () => { rec.compactionEvents++; });
    msg = await s.finalMessage();
  }
  rec.raw = JSON.stringify(msg);
  rec.types = msg.content.map((b) => b.type);
  const c = msg.content.find((b) => b.type === 'compaction');
  if (c) rec.compaction = { content: c.content, encrypted: c.encrypted_content, at: msg.content.indexOf(c) };
  rec.stopReason = msg.stop_reason;
  rec.iterations = msg.usage && msg.usage.iterations;
  messages.push({ role: 'assistant', content: msg.content });
  return msg;
}

async function turn(session, messages, ask) {
  messages.push({ role: 'user', content: ask });
  for (let round = 0; round < 4; round++) {
    const msg = await call(session, messages);
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    if (uses.length === 0) {
      return msg.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
    }
    messages.push({ role: 'user', content: uses.map((u) => {
      if (!u.input || typeof u.input.path !== "string") throw new Error("tool_use without a path: " + JSON.stringify(u) + " after " + messages.length + " messages; last user: " + JSON.stringify(messages[messages.length-2]).slice(0, 400) + " requests " + session.requests.length);
      const i = parseInt(u.input.path.replace(/\D/g, ''), 10);
      return { type: 'tool_result', tool_use_id: u.id, content: (i === 0 ? process.env.FACT_LINE + '\n' : '') + filler(i) };
    }) });
  }
  throw new Error('the model kept calling tools');
}

async function session(stream, turns, ask) {
  const s = { stream, requests: [], final: '', clientBytes: 0 };
  const messages = [];
  for (let i = 0; i < turns; i++) {
    await turn(s, messages, `Step ${i}: please read the next source file and tell me what it does [[call:read_file {"path":"src/file${i}.go"}]]`);
  }
  if (ask) s.final = await turn(s, messages, ask);
  s.clientBytes = JSON.stringify(messages).length;
  return s;
}

(async () => {
  const report = {};
  report.json = await session(false, parseInt(process.env.JSON_TURNS, 10), '');
  report.stream = await session(true, parseInt(process.env.STREAM_TURNS, 10), process.env.ASK);
  process.stdout.write(JSON.stringify(report));
})().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
