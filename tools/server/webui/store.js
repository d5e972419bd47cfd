// What the page keeps in the browser: the settings and the conversations, in localStorage under
// "phi4mm.settings" and "phi4mm.conversations". A conversation is
//   {id, title, created, messages: [{role: "user", text, attachments: [{kind: "image"|"audio",
//     name, mime, dataUrl, tokens}]} | {role: "assistant", text, finish, usage, toolCalls, error}]}
// with each attachment kept as a data: URL, so a conversation exported as JSON is complete. When the
// browser's quota is full, save() says so (the page shows it) instead of losing the chat silently.

const SETTINGS_KEY = 'phi4mm.settings';
const CONVERSATIONS_KEY = 'phi4mm.conversations';

export const DEFAULT_SETTINGS = {
  systemPrompt: '',
  temperature: 0,
  topP: '',
  maxTokens: '',
  seed: '',
  theme: 'auto',
  apiKey: '',
  detail: 'auto',
  crops: '',
};

function read(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch (_) {
    return fallback;
  }
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS_KEY, {}) };
}

export function saveSettings(settings) {
  localStorage.setItem(SETTINGS_KEY, JSON.stringify(settings));
}

export function loadConversations() {
  const list = read(CONVERSATIONS_KEY, []);
  return Array.isArray(list) ? list.filter((c) => c && c.id && Array.isArray(c.messages)) : [];
}

// Saves every conversation; returns null, or a sentence saying what could not be kept.
export function saveConversations(conversations) {
  try {
    localStorage.setItem(CONVERSATIONS_KEY, JSON.stringify(conversations));
    return null;
  } catch (e) {
    return 'This browser\'s storage is full: the conversation is kept on this page only until you reload it. ' +
      'Export it as JSON, or delete old conversations.';
  }
}

export function newConversation() {
  return {
    id: `c${Date.now().toString(36)}${Math.random().toString(36).slice(2, 8)}`,
    title: 'New chat',
    created: new Date().toISOString(),
    messages: [],
  };
}

// Offers `value` as a JSON file download named `name`.
export function downloadJson(name, value) {
  const blob = new Blob([JSON.stringify(value, null, 2)], { type: 'application/json' });
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
