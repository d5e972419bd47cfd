// The page's side of phi4mm's OpenAI-compatible API: the model list, the token cost of media
// (POST /v1/chat/completions/input_tokens) and streamed chat answers read from the SSE body. Every
// call sends the API key as a Bearer token when one is set, and every failure becomes an ApiError
// carrying the server's own message, code and status, which the page shows as it is.

export class ApiError extends Error {
  constructor(message, { status = 0, code = '', param = '', retryAfter = 0 } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.param = param;
    this.retryAfter = retryAfter;
  }
}

let apiKey = '';
export function setApiKey(key) { apiKey = key || ''; }

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  if (apiKey) h.Authorization = `Bearer ${apiKey}`;
  return h;
}

// An error response's JSON ({"error": {...}}) as an ApiError; the status text when it has none.
async function errorFrom(res) {
  let message = `${res.status} ${res.statusText}`.trim();
  let code = '';
  let param = '';
  try {
    const body = await res.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code || '';
      param = body.error.param || '';
    }
  } catch (_) { /* not JSON: keep the status line */ }
  const retryAfter = Number(res.headers.get('Retry-After') || 0);
  return new ApiError(message, { status: res.status, code, param, retryAfter });
}

async function request(path, { method = 'GET', body, signal } = {}) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: headers(body !== undefined),
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: 'no-store',
    });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('The server cannot be reached (is `phi4mm serve` still running?)', { code: 'unreachable' });
  }
  if (!res.ok) throw await errorFrom(res);
  return res;
}

export async function listModels() {
  const res = await request('/v1/models');
  return (await res.json()).data || [];
}

// The server's count of `messages` as a prompt: input_tokens, text/image/audio_tokens, dynamic_hd.
export async function countTokens(messages, extra = {}, signal) {
  const res = await request('/v1/chat/completions/input_tokens', {
    method: 'POST', body: { model: 'phi4mm', messages, ...extra }, signal,
  });
  return res.json();
}

// Streams a chat answer. Calls onDelta(text) for each content delta and returns
// {text, finishReason, usage, toolCalls}. Aborting `signal` closes the connection, which cancels
// the request on the server.
export async function streamChat(body, { signal, onDelta }) {
  const res = await request('/v1/chat/completions', {
    method: 'POST',
    body: { ...body, stream: true, stream_options: { include_usage: true } },
    signal,
  });
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const out = { text: '', finishReason: null, usage: null, toolCalls: [] };
  let buffer = '';
  let done = false;
  const handle = (data) => {
    if (data === '[DONE]') { done = true; return; }
    const chunk = JSON.parse(data);
    if (chunk.error) {
      throw new ApiError(chunk.error.message || 'the answer failed', {
        status: 500, code: chunk.error.code || '', param: chunk.error.param || '',
      });
    }
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices || []) {
      const delta = choice.delta || {};
      if (delta.content) {
        out.text += delta.content;
        onDelta(delta.content);
      }
      for (const call of delta.tool_calls || []) {
        const i = call.index || 0;
        out.toolCalls[i] = out.toolCalls[i] || { id: call.id, name: '', arguments: '' };
        if (call.function && call.function.name) out.toolCalls[i].name += call.function.name;
        if (call.function && call.function.arguments) out.toolCalls[i].arguments += call.function.arguments;
      }
      if (choice.finish_reason) out.finishReason = choice.finish_reason;
    }
  };
  while (!done) {
    const { value, done: end } = await reader.read();
    if (end) break;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data) handle(data);
      if (done) break;
    }
  }
  if (!done) throw new ApiError('The connection closed before the answer ended', { code: 'incomplete' });
  return out;
}
