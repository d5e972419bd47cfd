// Drawing the page's state: the message list (user turns with their attachments, assistant answers
// rendered as safe Markdown, errors in words), the composer's attachment tray with each item's token
// cost, and the conversation list. Only DOM building here; what the buttons do comes in as callbacks.

import { renderMarkdown } from './markdown.js';

export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'className') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2).toLowerCase(), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

function button(label, onClick, attrs = {}) {
  return el('button', { type: 'button', onClick, ...attrs }, label);
}

// One attachment as shown in a message or in the composer's tray.
export function attachmentView(a, { onRemove } = {}) {
  const item = el('li', { className: `attachment ${a.kind}${a.error ? ' has-error' : ''}`, dataset: { kind: a.kind } });
  if (a.kind === 'image') {
    item.append(el('img', { src: a.dataUrl, alt: `image ${a.name}` }));
  } else {
    item.append(el('audio', { src: a.dataUrl, controls: true, preload: 'metadata', 'aria-label': `audio ${a.name}` }));
  }
  const caption = el('span', { className: 'attachment-name' }, a.name);
  item.append(caption);
  if (a.error) {
    item.append(el('span', { className: 'attachment-error', role: 'alert' }, a.error));
  } else if (a.counting) {
    item.append(el('span', { className: 'attachment-cost muted' }, 'counting tokens…'));
  } else if (a.tokens) {
    const crops = a.kind === 'image' && a.dynamicHd ? `, up to ${a.dynamicHd} crops` : '';
    item.append(el('span', { className: 'attachment-cost muted' }, `${a.tokens} tokens${crops}`));
  }
  if (onRemove) item.append(button('×', onRemove, { className: 'remove', 'aria-label': `Remove ${a.name}`, title: 'Remove' }));
  return item;
}

function finishNote(m) {
  if (m.error) return null;
  if (m.finish === 'stopped') return 'stopped';
  if (m.finish === 'length') return 'cut off at the token limit';
  if (m.finish === 'tool_calls') return 'tool calls';
  return null;
}

// The message list. `busyIndex` is the assistant message being streamed (or -1).
export function renderMessages(list, messages, busyIndex, actions) {
  list.replaceChildren();
  const lastAssistant = messages.map((m) => m.role).lastIndexOf('assistant');
  messages.forEach((m, index) => {
    const li = el('li', { className: `message ${m.role}`, dataset: { index: String(index) } });
    li.append(el('div', { className: 'who' }, m.role === 'user' ? 'You' : 'phi4mm'));
    if (m.role === 'user') {
      if (m.attachments?.length) {
        li.append(el('ul', { className: 'attachments', 'aria-label': 'Attachments' },
          ...m.attachments.map((a) => attachmentView(a))));
      }
      if (actions.editing === index) {
        const area = el('textarea', { className: 'edit-box', 'aria-label': 'Edit message', rows: '3' });
        area.value = m.text;
        li.append(area, el('div', { className: 'message-actions' },
          button('Send', () => actions.onEditSend(index, area.value), { className: 'primary edit-send' }),
          button('Cancel', () => actions.onEditCancel())));
        queueMicrotask(() => area.focus());
      } else {
        li.append(el('div', { className: 'text' }, m.text));
        if (busyIndex < 0) {
          li.append(el('div', { className: 'message-actions' },
            button('Edit', () => actions.onEdit(index), { className: 'edit', 'aria-label': 'Edit and resend this message' })));
        }
      }
    } else {
      const body = el('div', { className: 'text answer', dataset: { raw: m.text } });
      body.append(renderMarkdown(m.text));
      if (index === busyIndex && !m.text) body.append(el('span', { className: 'typing muted' }, 'thinking…'));
      li.append(body);
      for (const call of m.toolCalls || []) {
        li.append(el('pre', { className: 'tool-call' }, `${call.name}(${call.arguments})`));
      }
      if (m.error) li.append(el('div', { className: 'error', role: 'alert' }, m.error));
      const note = finishNote(m);
      const meta = [];
      if (note) meta.push(note);
      if (m.usage) meta.push(`${m.usage.prompt_tokens} prompt + ${m.usage.completion_tokens} answer tokens`);
      if (meta.length) li.append(el('div', { className: 'meta muted' }, meta.join(' · ')));
      if (busyIndex < 0) {
        const row = el('div', { className: 'message-actions' },
          button('Copy', () => navigator.clipboard?.writeText(m.text), { className: 'copy-answer' }));
        if (index === lastAssistant) row.append(button('Regenerate', () => actions.onRegenerate(index), { className: 'regenerate' }));
        li.append(row);
      }
    }
    list.append(li);
  });
}

export function renderConversationList(ul, conversations, currentId, onSelect) {
  ul.replaceChildren(...conversations.map((c) => el('li', {},
    el('button', {
      type: 'button',
      className: c.id === currentId ? 'current' : '',
      'aria-current': c.id === currentId ? 'true' : undefined,
      onClick: () => onSelect(c.id),
    }, c.title || 'New chat'))));
}

export function renderAttachments(ul, attachments, onRemove) {
  ul.replaceChildren(...attachments.map((a, i) => attachmentView(a, { onRemove: () => onRemove(i) })));
}
