// A long Chat Completions agent session driven by the real Node openai SDK (required from
// OPENAI_PKG), through compactd (BASE_URL). Every turn asks the model to read a file; the
// "agent" runs the tool itself and feeds back a large output, the first one holding FACT_LINE.
// Turns alternate JSON and streaming (with stream_options.include_usage). The last turn asks
// ASK. It prints one JSON report: per request the X-Compactd-Compaction header, the raw
// responses or chunks the SDK parsed, the assembled text and tool calls, the usage.
const { OpenAI } = require(process.env.OPENAI_PKG);

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'sk-test', maxRetries: 0 });
const turns = parseInt(process.env.TURNS, 10);
const filler = (i) => Array.from({ length: 120 }, (_, k) => `the parser reads one more line here and keeps going through the whole input, line ${k}`).join('\n');
const tools = [{ type: 'function', function: { name: 'read_file', description: 'Read a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] } } }];
const messages = [{ role: 'system', content: 'You are a careful coding agent.' }];
const report = { requests: [] };

async function call(stream) {
  const rec = { stream, raw: [], text: '', toolCalls: [], usage: null, compaction: null };
  report.requests.push(rec);
  if (!stream) {
    const { data, response } = await client.chat.completions.create({ model: 'fake-model', messages, tools }).withResponse();
    rec.compaction = response.headers.get('x-compactd-compaction');
    rec.raw.push(JSON.stringify(data));
    const m = data.choices[0].message;
    rec.text = m.content || '';
    rec.toolCalls = m.tool_calls || [];
    rec.usage = data.usage;
    return rec;
  }
  const { data, response } = await client.chat.completions
    .create({ model: 'fake-model', messages, tools, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  rec.compaction = response.headers.get('x-compactd-compaction');
  const calls = [];
  for await (const chunk of data) {
    rec.raw.push(JSON.stringify(chunk));
    if (chunk.usage) rec.usage = chunk.usage;
    const d = chunk.choices[0] && chunk.choices[0].delta;
    if (!d) continue;
    if (d.content) rec.text += d.content;
    for (const tc of d.tool_calls || []) {
      const c = (calls[tc.index] = calls[tc.index] || { id: '', type: 'function', function: { name: '', arguments: '' } });
      if (tc.id) c.id = tc.id;
      if (tc.function && tc.function.name) c.function.name += tc.function.name;
      if (tc.function && tc.function.arguments) c.function.arguments += tc.function.arguments;
    }
  }
  rec.toolCalls = calls;
  return rec;
}

async function turn(ask, stream) {
  messages.push({ role: 'user', content: ask });
  for (let round = 0; round < 4; round++) {
    const rec = await call(stream);
    if (rec.toolCalls.length === 0) {
      messages.push({ role: 'assistant', content: rec.text });
      return rec;
    }
    messages.push({ role: 'assistant', content: rec.text || null, tool_calls: rec.toolCalls });
    for (const tc of rec.toolCalls) {
      const path = JSON.parse(tc.function.arguments).path;
      const i = parseInt(path.replace(/\D/g, ''), 10);
      const out = (i === 0 ? process.env.FACT_LINE + '\n' : '') + filler(i);
      messages.push({ role: 'tool', tool_call_id: tc.id, content: out });
    }
  }
  throw new Error('the model kept calling tools');
}

(async () => {
  for (let i = 0; i < turns; i++) {
    await turn(`Step ${i}: please read the next source file and tell me what it does [[call:read_file {"path":"src/file${i}.go"}]]`, i % 2 === 1);
  }
  report.final = await turn(process.env.ASK, true);
  report.clientBytes = JSON.stringify(messages).length;
  process.stdout.write(JSON.stringify(report));
})().catch((e) => {
  console.error(e && e.stack ? e.stack : e);
  process.exit(1);
});
