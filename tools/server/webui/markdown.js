// A small Markdown renderer for the model's answers that never makes HTML from them: it builds DOM
// nodes and puts every piece of the answer in with textContent, so `<script>` or any other markup
// in an answer shows as text. It covers what chat answers use: fenced code blocks (an unclosed
// fence, as while streaming, runs to the end), headings, paragraphs, bullet and numbered lists,
// block quotes, rules, and inline code, bold, italic, strikethrough and links (http, https and
// mailto only; opened in a new tab without a referrer).

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function safeHref(url) {
  try {
    const u = new URL(url, window.location.href);
    return ['http:', 'https:', 'mailto:'].includes(u.protocol) ? u.href : null;
  } catch (_) {
    return null;
  }
}

// Inline spans: `code`, **bold**, __bold__, *italic*, _italic_, ~~strike~~, [text](url), <url>. As in
// CommonMark, underscores inside a word (snake_case, __init__ in a name) do not emphasise.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|(?<!\w)__([^_]+)__(?!\w)|\*([^*\s][^*]*)\*|(?<!\w)_([^_\s][^_]*)_(?!\w)|~~([^~]+)~~|\[([^\]]+)\]\(([^)\s]+)\)|<(https?:\/\/[^>\s]+)>/g;

export function renderInline(text, parent) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(text.slice(last, m.index));
    last = m.index + m[0].length;
    if (m[1]) {
      parent.append(el('code', '', m[2].replace(/^ (.*) $/, '$1')));
    } else if (m[3] !== undefined || m[4] !== undefined) {
      const b = el('strong');
      renderInline(m[3] ?? m[4], b);
      parent.append(b);
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const i = el('em');
      renderInline(m[5] ?? m[6], i);
      parent.append(i);
    } else if (m[7] !== undefined) {
      const s = el('del');
      renderInline(m[7], s);
      parent.append(s);
    } else {
      const label = m[8] ?? m[10];
      const href = safeHref(m[9] ?? m[10]);
      if (!href) {
        parent.append(m[0]);
        continue;
      }
      const a = el('a', '', label);
      a.href = href;
      a.target = '_blank';
      a.rel = 'noopener noreferrer nofollow';
      parent.append(a);
    }
  }
  if (last < text.length) parent.append(text.slice(last));
}

function appendLines(lines, parent) {
  lines.forEach((line, i) => {
    if (i > 0) parent.append(el('br'));
    renderInline(line, parent);
  });
}

function codeBlock(lang, code) {
  const wrap = el('div', 'code-block');
  const bar = el('div', 'code-bar');
  bar.append(el('span', 'code-lang', lang || 'text'));
  const copy = el('button', 'copy', 'Copy');
  copy.type = 'button';
  copy.setAttribute('aria-label', `Copy ${lang || 'code'}`);
  copy.addEventListener('click', () => {
    navigator.clipboard?.writeText(code).then(() => { copy.textContent = 'Copied'; }, () => { copy.textContent = 'Copy failed'; });
  });
  bar.append(copy);
  const pre = el('pre');
  const c = el('code', '', code);
  if (lang) c.dataset.lang = lang;
  pre.append(c);
  wrap.append(bar, pre);
  return wrap;
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const BULLET = /^(\s*)[-*+]\s+(.*)$/;
const NUMBERED = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;

// Renders `text` as Markdown into a new element and returns it.
export function renderMarkdown(text) {
  const root = el('div', 'md');
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(FENCE);
    if (fence) {
      const marker = fence[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trimStart().startsWith(marker)) body.push(lines[i++]);
      i += 1;  // the closing fence (or past the end)
      root.append(codeBlock(fence[2], body.join('\n')));
      continue;
    }
    if (!line.trim()) { i += 1; continue; }
    const heading = line.match(HEADING);
    if (heading) {
      const h = el(`h${Math.min(6, heading[1].length + 2)}`);
      renderInline(heading[2], h);
      root.append(h);
      i += 1;
      continue;
    }
    if (RULE.test(line)) { root.append(el('hr')); i += 1; continue; }
    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && QUOTE.test(lines[i])) body.push(lines[i++].match(QUOTE)[1]);
      const q = el('blockquote');
      q.append(renderMarkdown(body.join('\n')));
      root.append(q);
      continue;
    }
    const bullet = line.match(BULLET);
    const numbered = line.match(NUMBERED);
    if (bullet || numbered) {
      const list = el(bullet ? 'ul' : 'ol');
      if (numbered && numbered[2] !== '1') list.start = Number(numbered[2]);
      const pattern = bullet ? BULLET : NUMBERED;
      while (i < lines.length && pattern.test(lines[i])) {
        const m = lines[i].match(pattern);
        const item = el('li');
        const parts = [bullet ? m[2] : m[3]];
        i += 1;
        // Continuation lines: indented, not a new item or block.
        while (i < lines.length && /^\s{2,}\S/.test(lines[i]) && !pattern.test(lines[i]) && !FENCE.test(lines[i])) {
          parts.push(lines[i++].trim());
        }
        appendLines(parts, item);
        list.append(item);
      }
      root.append(list);
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i]) &&
           !QUOTE.test(lines[i]) && !BULLET.test(lines[i]) && !NUMBERED.test(lines[i]) && !RULE.test(lines[i])) {
      para.push(lines[i++]);
    }
    if (para.length === 0) {  // a line no rule took: keep it as text
      para.push(lines[i++]);
    }
    const p = el('p');
    appendLines(para, p);
    root.append(p);
  }
  return root;
}
