// The chat page's controller: the state (conversations, the one being shown, the composer's
// attachments, the answer being streamed) and what every control does. Answers stream from
// /v1/chat/completions; Stop aborts the fetch, which closes the connection and cancels the request
// on the server. Each image and clip is counted with the server's input_tokens route before it is
// sent, with the detail/crops choice the request will use.

import { ApiError, countTokens, listModels, setApiKey, streamChat } from './api.js';
import { Recorder, decodeToMono16k, encodeWav } from './audio.js';
import { renderMarkdown } from './markdown.js';
import {
  downloadJson, loadConversations, loadSettings, newConversation, saveConversations, saveSettings,
} from './store.js';
import { renderAttachments, renderConversationList, renderMessages } from './view.js';

const $ = (id) => document.getElementById(id);
const AUDIO_FORMATS = { 'audio/wav': 'wav', 'audio/x-wav': 'wav', 'audio/wave': 'wav', 'audio/vnd.wave': 'wav',
  'audio/mpeg': 'mp3', 'audio/mp3': 'mp3', 'audio/flac': 'flac', 'audio/x-flac': 'flac', 'audio/ogg': 'ogg' };
const EXTENSIONS = { wav: 'wav', mp3: 'mp3', flac: 'flac', ogg: 'ogg', oga: 'ogg' };

const state = {
  settings: loadSettings(),
  conversations: loadConversations(),
  current: null,
  pending: [],         // the composer's attachments
  busy: null,          // {conversation, index, controller} while an answer streams
  editing: -1,
  recorder: null,
  context: 0,
};

// ---- small helpers ----

function notice(text) {
  const n = $('notice');
  n.textContent = text || '';
  n.hidden = !text;
}

function errorText(e) {
  if (e instanceof ApiError) {
    if (e.status === 401) return `${e.message}. Enter the server's API key in Settings.`;
    if (e.status === 429 && e.retryAfter) return `${e.message} (try again in ${e.retryAfter} s)`;
    return e.message;
  }
  return e && e.message ? e.message : String(e);
}

function readAsDataUrl(blob) {
  return new Promise((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(r.result);
    r.onerror = () => reject(new Error(`${blob.name || 'the file'} could not be read`));
    r.readAsDataURL(blob);
  });
}

function bytesToDataUrl(bytes, mime) {
  return readAsDataUrl(new Blob([bytes], { type: mime }));
}

function persist() {
  const problem = saveConversations(state.conversations);
  if (problem) notice(problem);
}

// ---- requests ----

function imageDetail() {
  const extra = {};
  const crops = parseInt(state.settings.crops, 10);
  if (crops > 0) extra.dynamic_hd = crops;
  return extra;
}

function mediaPart(a) {
  if (a.kind === 'image') {
    return { type: 'image_url', image_url: { url: a.dataUrl, detail: state.settings.detail } };
  }
  const data = a.dataUrl.slice(a.dataUrl.indexOf(',') + 1);
  const audio = { data };
  if (a.format) audio.format = a.format;
  return { type: 'input_audio', input_audio: audio };
}

function apiMessages(messages) {
  const out = [];
  if (state.settings.systemPrompt.trim()) out.push({ role: 'system', content: state.settings.systemPrompt });
  for (const m of messages) {
    if (m.role === 'user') {
      const parts = (m.attachments || []).map(mediaPart);
      if (m.text) parts.push({ type: 'text', text: m.text });
      out.push({ role: 'user', content: parts.length === 1 && parts[0].type === 'text' ? m.text : parts });
    } else if (m.role === 'assistant' && !m.error) {
      out.push({ role: 'assistant', content: m.text });
    }
  }
  return out;
}

function requestBody(messages) {
  const s = state.settings;
  const body = { model: 'phi4mm', messages: apiMessages(messages), ...imageDetail() };
  const t = parseFloat(s.temperature);
  if (Number.isFinite(t)) body.temperature = t;
  const p = parseFloat(s.topP);
  if (Number.isFinite(p)) body.top_p = p;
  const n = parseInt(s.maxTokens, 10);
  if (n > 0) body.max_completion_tokens = n;
  const seed = parseInt(s.seed, 10);
  if (Number.isFinite(seed)) body.seed = seed;
  return body;
}

// ---- drawing ----

function conversation() {
  return state.conversations.find((c) => c.id === state.current);
}

function draw() {
  const c = conversation();
  const busyIndex = state.busy && state.busy.conversation === c ? state.busy.index : -1;
  renderMessages($('messages'), c ? c.messages : [], busyIndex, {
    editing: state.editing,
    onEdit: (i) => { state.editing = i; draw(); },
    onEditCancel: () => { state.editing = -1; draw(); },
    onEditSend: (i, text) => editAndResend(i, text),
    onRegenerate: (i) => regenerate(i),
  });
  $('empty-hint').hidden = Boolean(c && c.messages.length);
  renderConversationList($('conversation-list'), state.conversations, state.current, (id) => {
    if (state.busy) return;
    state.current = id;
    state.editing = -1;
    closeHistoryOnPhone();
    draw();
  });
  const busy = Boolean(state.busy);
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  $('messages').setAttribute('aria-busy', busy ? 'true' : 'false');
  drawPending();
}

function drawPending() {
  renderAttachments($('attachments'), state.pending, (i) => {
    state.pending.splice(i, 1);
    drawPending();
    updateCost();
  });
}

// Updates only the streaming answer (the rest of the list stays as it is drawn).
let frame = 0;
function drawStreaming() {
  if (frame) return;
  frame = requestAnimationFrame(() => {
    frame = 0;
    if (!state.busy || state.busy.conversation !== conversation()) return;
    const m = state.busy.conversation.messages[state.busy.index];
    const li = $('messages').querySelector(`li[data-index="${state.busy.index}"] .answer`);
    if (!li) return;
    li.dataset.raw = m.text;
    li.replaceChildren(renderMarkdown(m.text));
    li.scrollIntoView({ block: 'end' });
  });
}

// ---- token costs ----

// The count route lists image and audio tokens per item.
const total = (v) => (Array.isArray(v) ? v.reduce((a, b) => a + b, 0) : v || 0);

async function countAttachment(a) {
  a.counting = true;
  a.error = '';
  drawPending();
  try {
    const r = await countTokens([{ role: 'user', content: [mediaPart(a)] }], imageDetail());
    a.tokens = total(a.kind === 'image' ? r.image_tokens : r.audio_tokens);
    a.dynamicHd = r.dynamic_hd;
  } catch (e) {
    a.error = errorText(e);
  }
  a.counting = false;
  drawPending();
  updateCost();
}

let costTimer = 0;
function updateCost() {
  clearTimeout(costTimer);
  costTimer = setTimeout(async () => {
    const c = conversation();
    const pendingOk = state.pending.every((a) => !a.error && !a.counting);
    if (!state.pending.length || !pendingOk) { $('cost').textContent = ''; return; }
    const messages = [...(c ? c.messages : []), { role: 'user', text: $('input').value, attachments: state.pending }];
    try {
      const r = await countTokens(apiMessages(messages), imageDetail());
      const of = state.context ? ` of the ${state.context}-token context` : '';
      $('cost').textContent =
        `This prompt: ${r.input_tokens} tokens${of} (images ${total(r.image_tokens)}, audio ${total(r.audio_tokens)}).`;
    } catch (e) {
      $('cost').textContent = errorText(e);
    }
  }, 250);
}

function recountImages() {
  for (const a of state.pending) if (a.kind === 'image') countAttachment(a);
}

// ---- attachments ----

function audioFormat(file) {
  const byMime = AUDIO_FORMATS[(file.type || '').split(';')[0]];
  if (byMime) return byMime;
  return EXTENSIONS[(file.name || '').split('.').pop().toLowerCase()] || '';
}

async function addFile(file) {
  const isImage = (file.type || '').startsWith('image/');
  const isAudio = (file.type || '').startsWith('audio/') || Boolean(EXTENSIONS[(file.name || '').split('.').pop().toLowerCase()]);
  if (!isImage && !isAudio) {
    notice(`${file.name || 'This file'} is not an image or an audio file.`);
    return;
  }
  try {
    const a = { kind: isImage ? 'image' : 'audio', name: file.name || (isImage ? 'pasted image' : 'audio'), mime: file.type };
    if (isAudio) {
      a.format = audioFormat(file);
      if (!a.format) {
        // A format the server does not read (m4a, webm, ...): the browser converts it to a WAV file.
        const samples = await decodeToMono16k(await file.arrayBuffer());
        a.dataUrl = await bytesToDataUrl(encodeWav(samples), 'audio/wav');
        a.format = 'wav';
        a.name += ' (as WAV)';
      }
    }
    if (!a.dataUrl) a.dataUrl = await readAsDataUrl(file);
    state.pending.push(a);
    notice('');
    countAttachment(a);
  } catch (e) {
    notice(`${file.name}: ${errorText(e)}`);
  }
}

async function toggleRecording() {
  const button = $('record');
  if (!state.recorder) {
    const r = new Recorder();
    try {
      await r.start();
    } catch (e) {
      notice(`The microphone cannot be used: ${errorText(e)}`);
      return;
    }
    state.recorder = r;
    button.textContent = 'Stop recording';
    button.setAttribute('aria-pressed', 'true');
    button.classList.add('recording');
    return;
  }
  const r = state.recorder;
  state.recorder = null;
  button.textContent = 'Record';
  button.setAttribute('aria-pressed', 'false');
  button.classList.remove('recording');
  try {
    const { wav, seconds } = await r.stop();
    const stamp = new Date().toTimeString().slice(0, 8).replace(/:/g, '');
    const a = { kind: 'audio', name: `recording-${stamp}.wav (${seconds.toFixed(1)} s)`, mime: 'audio/wav', format: 'wav' };
    a.dataUrl = await bytesToDataUrl(wav, 'audio/wav');
    state.pending.push(a);
    notice('');
    countAttachment(a);
  } catch (e) {
    notice(`The recording failed: ${errorText(e)}`);
  }
}

// ---- sending ----

async function answer(c) {
  const index = c.messages.length;
  c.messages.push({ role: 'assistant', text: '', finish: null, usage: null });
  const m = c.messages[index];
  const controller = new AbortController();
  state.busy = { conversation: c, index, controller };
  const body = requestBody(c.messages.slice(0, index));
  draw();
  try {
    const r = await streamChat(body, {
      signal: controller.signal,
      onDelta: (d) => { m.text += d; drawStreaming(); },
    });
    m.text = r.text;
    m.finish = r.finishReason;
    m.usage = r.usage;
    if (r.toolCalls.length) m.toolCalls = r.toolCalls;
  } catch (e) {
    if (e.name === 'AbortError') {
      m.finish = 'stopped';
    } else {
      m.error = errorText(e);
    }
  }
  state.busy = null;
  persist();
  draw();
  $('input').focus();
}

async function send() {
  if (state.busy) return;
  const text = $('input').value.trim();
  if (!text && !state.pending.length) return;
  if (state.pending.some((a) => a.counting)) { notice('Wait a moment: the attachments are still being counted.'); return; }
  const refused = state.pending.find((a) => a.error);
  if (refused) { notice(`Remove ${refused.name} first: ${refused.error}`); return; }
  let c = conversation();
  if (!c) {
    c = newConversation();
    state.conversations.unshift(c);
    state.current = c.id;
  }
  const attachments = state.pending.map(({ kind, name, mime, format, dataUrl, tokens }) => ({ kind, name, mime, format, dataUrl, tokens }));
  c.messages.push({ role: 'user', text, attachments });
  if (c.title === 'New chat') c.title = (text || attachments.map((a) => a.name).join(', ')).slice(0, 60);
  state.pending = [];
  $('input').value = '';
  $('cost').textContent = '';
  notice('');
  persist();
  await answer(c);
}

async function regenerate(index) {
  const c = conversation();
  if (state.busy || !c) return;
  c.messages.splice(index);
  await answer(c);
}

async function editAndResend(index, text) {
  const c = conversation();
  if (state.busy || !c) return;
  state.editing = -1;
  c.messages[index].text = text.trim();
  c.messages.splice(index + 1);
  persist();
  await answer(c);
}

function stop() {
  if (state.busy) state.busy.controller.abort();
}

// ---- settings, conversations, server ----

function applySettings() {
  const s = state.settings;
  document.documentElement.dataset.theme = s.theme;
  setApiKey(s.apiKey);
  $('detail').value = s.detail;
  $('crops').value = s.crops;
}

const SETTING_INPUTS = {
  'system-prompt': 'systemPrompt', temperature: 'temperature', 'top-p': 'topP', 'max-tokens': 'maxTokens',
  seed: 'seed', theme: 'theme', 'api-key': 'apiKey',
};

function openSettings() {
  for (const [id, key] of Object.entries(SETTING_INPUTS)) $(id).value = state.settings[key];
  $('settings').showModal();
}

function closeSettings() {
  for (const [id, key] of Object.entries(SETTING_INPUTS)) state.settings[key] = $(id).value;
  saveSettings(state.settings);
  applySettings();
  checkServer();
}

function startNewChat() {
  if (state.busy) return;
  const c = newConversation();
  state.conversations.unshift(c);
  state.current = c.id;
  state.editing = -1;
  persist();
  draw();
  $('input').focus();
}

function closeHistoryOnPhone() {
  document.body.classList.remove('history-open');
  $('toggle-history').setAttribute('aria-expanded', 'false');
}

let retryTimer = 0;
async function checkServer() {
  clearTimeout(retryTimer);
  try {
    const models = await listModels();
    const model = models[0] || {};
    $('model-name').textContent = model.id ? `· ${model.id}` : '';
    state.context = model.max_model_len || 0;
    $('server-state').textContent = '';
    notice('');
  } catch (e) {
    const loading = e instanceof ApiError && e.status === 503;
    $('server-state').textContent = loading ? 'loading the model…' : 'not connected';
    notice(errorText(e));
    if (e instanceof ApiError && e.status === 401) return;
    retryTimer = setTimeout(checkServer, loading ? 1000 : 3000);
  }
}

function wire() {
  $('composer').addEventListener('submit', (e) => { e.preventDefault(); send(); });
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); }
  });
  $('input').addEventListener('input', () => { if (state.pending.length) updateCost(); });
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && state.busy) stop(); });
  $('stop').addEventListener('click', stop);
  $('record').addEventListener('click', toggleRecording);
  for (const id of ['file-input', 'camera-input']) {
    $(id).addEventListener('change', async (e) => {
      for (const f of Array.from(e.target.files)) await addFile(f);
      e.target.value = '';
    });
  }
  document.addEventListener('paste', async (e) => {
    const files = Array.from(e.clipboardData?.files || []);
    if (!files.length) return;
    e.preventDefault();
    for (const f of files) await addFile(f);
  });
  const main = $('main');
  main.addEventListener('dragover', (e) => { e.preventDefault(); main.classList.add('dropping'); });
  main.addEventListener('dragleave', () => main.classList.remove('dropping'));
  main.addEventListener('drop', async (e) => {
    e.preventDefault();
    main.classList.remove('dropping');
    for (const f of Array.from(e.dataTransfer?.files || [])) await addFile(f);
  });
  $('detail').addEventListener('change', () => {
    state.settings.detail = $('detail').value;
    saveSettings(state.settings);
    recountImages();
  });
  $('crops').addEventListener('change', () => {
    state.settings.crops = $('crops').value;
    saveSettings(state.settings);
    recountImages();
  });
  $('new-chat').addEventListener('click', startNewChat);
  $('open-settings').addEventListener('click', openSettings);
  $('settings').addEventListener('close', closeSettings);
  $('toggle-history').addEventListener('click', () => {
    const open = document.body.classList.toggle('history-open');
    $('toggle-history').setAttribute('aria-expanded', open ? 'true' : 'false');
  });
  $('export-chat').addEventListener('click', () => {
    const c = conversation();
    if (c) downloadJson(`phi4mm-chat-${c.id}.json`, c);
  });
  $('export-all').addEventListener('click', () => downloadJson('phi4mm-chats.json', state.conversations));
  $('delete-chat').addEventListener('click', () => {
    const c = conversation();
    if (state.busy || !c) return;
    if (!window.confirm(`Delete the conversation "${c.title}"? It is kept nowhere else.`)) return;
    state.conversations = state.conversations.filter((c) => c.id !== state.current);
    state.current = state.conversations[0]?.id ?? null;
    persist();
    draw();
  });
}

applySettings();
state.current = state.conversations[0]?.id ?? null;
wire();
draw();
checkServer();
