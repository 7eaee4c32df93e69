// Drives server-everything over Streamable HTTP twice with the real MCP TypeScript SDK client
// (StreamableHTTPClientTransport): once directly (the server in its own streamableHttp mode)
// and once through `effectfence wrap --listen -- mcp-server-everything` (stdio child behind the
// gateway). It prints one JSON report, {"direct": {...}, "gateway": {...}}; the Go test
// (TestRealSDKClientThroughGateway) judges it. The script asserts nothing itself: every step
// records what it saw, or the error it got, and goes on.
//
//   PEERS=.peers DIRECT_URL=http://127.0.0.1:P/mcp GATEWAY_URL=http://127.0.0.1:Q/mcp node gateway_client.mjs
const { PEERS, DIRECT_URL, GATEWAY_URL } = process.env;
if (!PEERS || !DIRECT_URL || !GATEWAY_URL) {
  console.error('gateway_client.mjs: set PEERS, DIRECT_URL and GATEWAY_URL');
  process.exit(2);
}
const sdk = `${PEERS}/node_modules/@modelcontextprotocol/sdk/dist/esm`;
const { Client } = await import(`${sdk}/client/index.js`);
const { StreamableHTTPClientTransport } = await import(`${sdk}/client/streamableHttp.js`);
const types = await import(`${sdk}/types.js`);

// No step may hang the script: each waits at most this long, then records a timeout.
const STEP_MS = 20000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
function within(p, what, ms = STEP_MS) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timeout: ${what} after ${ms} ms`)), ms); }),
  ]);
}
async function waitUntil(cond, ms = 10000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(25)) {
    if (cond()) return true;
  }
  return cond();
}
const errText = (e) => String(e?.message ?? e);

const ROOT = { uri: 'file:///tmp/effectfence-gateway-e2e', name: 'e2e root' };
const ROOT2 = { uri: 'file:///tmp/effectfence-gateway-e2e-2', name: 'second root' };
const ELICITED = { name: 'Ada Lovelace', check: true, integer: 7 };

// One client session against url, with every client capability the server can exercise, and
// a fetch that can cut one chosen POST's response stream (a broken stream mid-call).
async function connect(url) {
  const seen = { logs: [], updated: [], rootsAsked: 0, sampled: [], elicited: 0, errors: [] };
  const cut = { match: null, controller: null };
  const cuttableFetch = (u, init) => {
    if (cut.match && init?.method === 'POST' && typeof init.body === 'string') {
      let m = null;
      try { m = JSON.parse(init.body); } catch { /* not ours */ }
      if (m && cut.match(m)) {
        cut.match = null;
        cut.controller = new AbortController();
        const signal = init.signal ? AbortSignal.any([init.signal, cut.controller.signal]) : cut.controller.signal;
        return fetch(u, { ...init, signal });
      }
    }
    return fetch(u, init);
  };
  const client = new Client(
    { name: 'effectfence-gateway-e2e', version: '1.0.0' },
    { capabilities: { sampling: {}, elicitation: {}, roots: { listChanged: true } } },
  );
  client.onerror = (e) => seen.errors.push(errText(e));
  client.setNotificationHandler(types.LoggingMessageNotificationSchema, (n) => { seen.logs.push(n.params); });
  client.setNotificationHandler(types.ResourceUpdatedNotificationSchema, (n) => { seen.updated.push(n.params.uri); });
  client.setRequestHandler(types.ListRootsRequestSchema, async () => {
    seen.rootsAsked++;
    if (seen.moreRoots) seen.rootsAskedMore = (seen.rootsAskedMore ?? 0) + 1;
    return { roots: seen.moreRoots ? [ROOT, ROOT2] : [ROOT] };
  });
  client.setRequestHandler(types.CreateMessageRequestSchema, async (req) => {
    const asked = req.params.messages.map((m) => m.content?.text ?? '').join(' ');
    seen.sampled.push(asked);
    if (cut.controller && asked.includes('broken-stream')) {
      // The call's response stream breaks while the server waits for this answer: the
      // call has certainly reached the server, and it finishes once we answer.
      cut.controller.abort();
      await sleep(100);
    }
    return { model: 'e2e-model', role: 'assistant', content: { type: 'text', text: `sampled answer to: ${asked}` } };
  });
  client.setRequestHandler(types.ElicitRequestSchema, async () => {
    seen.elicited++;
    return { action: 'accept', content: ELICITED };
  });
  await within(client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: cuttableFetch })), 'connect');
  return { client, seen, cut };
}

// A tool call as the report records it.
async function call(client, name, args, opts) {
  try {
    const res = await within(client.callTool({ name, arguments: args }, undefined, opts), `tools/call ${name}`);
    return summarize(res);
  } catch (e) {
    return { error: errText(e) };
  }
}
function summarize(res) {
  return {
    isError: !!res.isError,
    // wrap's replay note (marked in its _meta) is not part of the tool's answer.
    text: res.content?.filter((c) => !c._meta?.['effectfence/note']).map((c) => c.text ?? c.type).join('\n') ?? '',
    structured: res.structuredContent ?? null,
    replayed: res._meta?.['effectfence/replayed'] === true,
  };
}
async function step(fn) {
  try {
    return await fn();
  } catch (e) {
    return { error: errText(e) };
  }
}

async function run(url) {
  const r = {};
  const { client, seen, cut } = await connect(url);
  const c = client;

  // Roots: the server asks for the client's roots shortly after initialization (on no
  // request of the client's) and logs what it got; get-roots-list shows them.
  r.toolsList = await step(async () => JSON.stringify(await within(c.listTools(), 'tools/list')));
  r.rootsAskedAtStart = await waitUntil(() => seen.rootsAsked > 0) ? seen.rootsAsked : 0;
  r.roots = await call(c, 'get-roots-list', {});
  // The roots change: on the client's notification the server asks again, while no request of
  // the client's is open (so through the gateway the request travels on the GET stream).
  seen.moreRoots = true;
  r.rootsChanged = await step(async () => {
    await within(c.sendRootsListChanged(), 'notifications/roots/list_changed');
    // Asked again after the change (a server may also ask on its own at other times), and the
    // answer, a POST of its own, reaches the server before the next call only eventually:
    // look until the listing shows the change.
    if (!await waitUntil(() => (seen.rootsAskedMore ?? 0) > 0)) return { error: 'the server did not ask for the roots again' };
    let listed;
    for (let i = 0; i < 50; i++) {
      listed = await call(c, 'get-roots-list', {});
      if (listed.error || listed.text.includes('2 total')) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    return listed;
  });

  // Logging: the level is accepted; the subscribe handler logs at info.
  r.setLevel = await step(async () => { await within(c.setLoggingLevel('info'), 'logging/setLevel'); return 'ok'; });

  // Resources.
  r.resources = await step(async () => {
    const list = await within(c.listResources(), 'resources/list');
    const templates = await within(c.listResourceTemplates(), 'resources/templates/list');
    const first = list.resources[0];
    const read = await within(c.readResource({ uri: first.uri }), 'resources/read');
    await within(c.subscribeResource({ uri: first.uri }), 'resources/subscribe');
    return { list: JSON.stringify(list), templates: JSON.stringify(templates), uri: first.uri, read: JSON.stringify(read) };
  });
  r.subscribeLogged = await waitUntil(() => seen.logs.some((l) => String(l.data).startsWith('Received Subscribe Resource request')));
  // toggle-subscriber-updates sends an update for each subscribed resource at once.
  r.toggleUpdates = await call(c, 'toggle-subscriber-updates', {});
  r.updated = await waitUntil(() => seen.updated.length > 0) ? seen.updated[0] : '';
  r.unsubscribe = await step(async () => { await within(c.unsubscribeResource({ uri: r.resources.uri }), 'resources/unsubscribe'); return 'ok'; });

  // Prompts.
  r.prompts = await step(async () => {
    const list = await within(c.listPrompts(), 'prompts/list');
    const got = await within(c.getPrompt({ name: 'simple-prompt' }), 'prompts/get');
    return { list: JSON.stringify(list), get: JSON.stringify(got) };
  });

  // Fenced at the gateway: four identical calls at once, then a tool with an outputSchema
  // twice (the SDK validates the replay's structuredContent against the schema too).
  r.echo = await Promise.all([1, 2, 3, 4].map(() => call(c, 'echo', { message: 'once over http' })));
  r.structured = [
    await call(c, 'get-structured-content', { location: 'New York' }),
    await call(c, 'get-structured-content', { location: 'New York' }),
  ];

  // Progress on a long-running pass-through call.
  let progress = 0;
  r.longRun = await call(c, 'trigger-long-running-operation', { duration: 1, steps: 2 }, { onprogress: () => { progress++; } });
  r.progress = progress;

  // Sampling and elicitation: the server asks the client during a tool call.
  r.sampling = await call(c, 'trigger-sampling-request', { prompt: 'say hello', maxTokens: 20 });
  r.elicitation = await call(c, 'trigger-elicitation-request', {});
  r.elicited = seen.elicited;

  // Cancellation: abort a long-running pass-through call once it reports progress; the
  // client gets the abort and the session goes on.
  r.cancel = await step(async () => {
    const ac = new AbortController();
    let beforeAbort = 0;
    const p = c.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 10, steps: 10 } }, undefined, {
      signal: ac.signal,
      onprogress: () => { beforeAbort++; ac.abort('the e2e client gave up'); },
    });
    let outcome;
    try {
      await within(p, 'the aborted call');
      outcome = 'answered';
    } catch (e) {
      outcome = errText(e);
    }
    const ping = await step(async () => { await within(c.ping(), 'ping'); return 'ok'; });
    const after = await call(c, 'echo', { message: 'after the cancellation' });
    return { progressBeforeAbort: beforeAbort, outcome, aborted: ac.signal.aborted, ping, after };
  });

  // Tasks: a task-augmented call followed to its final result by the SDK (tasks/get polls,
  // tasks/result); a duplicate sent while the task runs (a plain call: no task) waits for it.
  r.tasks = await step(async () => {
    const statuses = [];
    let taskId = '';
    let final = null;
    let dup = null;
    const stream = c.experimental.tasks.callToolStream(
      { name: 'simulate-research-query', arguments: { topic: 'fencing tokens' } },
      undefined,
      { task: { ttl: 300000 } },
    );
    const consume = (async () => {
      for await (const m of stream) {
        if (m.type === 'taskCreated') {
          taskId = m.task.taskId;
          dup = step(async () => summarize(await within(
            c.request({ method: 'tools/call', params: { name: 'simulate-research-query', arguments: { topic: 'fencing tokens' } } }, types.CallToolResultSchema),
            'the duplicate of a running task')));
        } else if (m.type === 'taskStatus') {
          statuses.push(m.task.status);
        } else if (m.type === 'result') {
          final = summarize(m.result);
        } else if (m.type === 'error') {
          final = { error: errText(m.error) };
        }
      }
    })();
    await within(consume, 'the task stream', 60000);
    // The same task-augmented call again, once the task is done: through the gateway a task
    // that is already completed, whose result is the recorded one.
    const again = [];
    await within((async () => {
      for await (const m of c.experimental.tasks.callToolStream(
        { name: 'simulate-research-query', arguments: { topic: 'fencing tokens' } }, undefined, { task: { ttl: 300000 } })) {
        again.push(m.type === 'error' ? `error: ${errText(m.error)}`
          : m.type === 'result' ? `result: ${(m.result.content?.[0]?.text ?? '').slice(0, 40)}` : m.type);
      }
    })(), 'the later task-augmented duplicate', 60000).catch((e) => again.push(errText(e)));
    return { taskId, statuses, final, duplicate: dup ? await dup : null, again };
  });

  // A broken stream: the response stream of a fenced call that waits for the client (it asks
  // for sampling) is cut after the server asked; the client then re-sends the same call (a
  // new JSON-RPC id). The server's sampling requests show how often it ran.
  r.broken = await step(async () => {
    const args = { prompt: 'broken-stream', maxTokens: 5 };
    cut.match = (m) => m.method === 'tools/call' && m.params?.name === 'trigger-sampling-request' && m.params?.arguments?.prompt === 'broken-stream';
    let firstOutcome = 'pending';
    // The cut call's promise may never settle (nothing answers it once its stream is gone);
    // it is settled by close() at the end, or by the server when it resumes the stream.
    const first = c.callTool({ name: 'trigger-sampling-request', arguments: args }, undefined, { timeout: 600000 })
      .then((res) => { firstOutcome = summarize(res); }, (e) => { firstOutcome = { error: errText(e) }; });
    void first;
    if (!await waitUntil(() => cut.controller?.signal.aborted, STEP_MS)) {
      return { error: 'the stream was never cut: the server did not ask for sampling' };
    }
    const resent = await call(c, 'trigger-sampling-request', args);
    await sleep(200);
    return {
      resent,
      executions: seen.sampled.filter((s) => s.includes('broken-stream')).length,
      firstOutcome,
    };
  });

  r.rootsAsked = seen.rootsAsked;
  r.sampled = seen.sampled.length;
  r.logs = seen.logs.map((l) => `${l.level} ${String(l.data).slice(0, 60)}`);
  r.transportErrors = seen.errors;
  await within(c.close(), 'close', 10000).catch(() => {});
  return r;
}

const report = {};
report.direct = await step(() => run(DIRECT_URL));
report.gateway = await step(() => run(GATEWAY_URL));
console.log(JSON.stringify(report));
process.exit(0);
