/**
 * The one place text becomes HTML. Every value put into a page goes through the `html` tagged template, which escapes
 * it unless it is already `Html` (built by this template). Anything a user or a SQL writer can put in a row (task
 * types, payloads, errors, job names) is a plain string, so it is always escaped; control characters (ANSI escapes,
 * bidi overrides) are shown as visible `\xNN` / `\uNNNN` text instead of being passed to the browser.
 */
import { escapeMatches } from "../../internal/controls.js"

/** A piece of markup that is safe to emit as it is: only `html` and the helpers below make one. */
export class Html {
  constructor(readonly markup: string) {}
  toString(): string {
    return this.markup
  }
}

/** What a template hole accepts: text (escaped), numbers, markup, lists of these; `false`, `null`, `undefined` and `true` emit nothing. */
export type Part = Html | string | number | boolean | null | undefined | ReadonlyArray<Part>

const ENTITIES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }

// C0 controls but tab and newline, DEL, C1 controls, and the bidi and zero-width formatting characters that can
// make text read differently from what it is.
// eslint-disable-next-line no-control-regex
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]/g

/** Control characters as visible text: ESC becomes `\x1b`, a bidi override `\u202e`. */
export const showControls = (text: string): string => escapeMatches(text, CONTROLS)

/** Text as HTML text or attribute value (quoted with `"`): controls made visible, then `& < > " '` escaped. */
export const escape = (text: string): string => showControls(text).replace(/[&<>"']/g, (c) => ENTITIES[c]!)

const render = (part: Part): string => {
  if (part === null || part === undefined || typeof part === "boolean") return ""
  if (part instanceof Html) return part.markup
  if (typeof part === "number") return escape(String(part))
  if (typeof part === "string") return escape(part)
  return part.map(render).join("")
}

/** Markup from a template: the literal parts as written, every hole escaped unless it is `Html`. */
export const html = (strings: TemplateStringsArray, ...holes: ReadonlyArray<Part>): Html => {
  let out = strings[0] ?? ""
  holes.forEach((hole, i) => {
    out += render(hole) + (strings[i + 1] ?? "")
  })
  return new Html(out)
}

/** Markup the caller built from constants and numbers only (e.g. SVG geometry). Never pass row data. */
export const trusted = (markup: string): Html => new Html(markup)

/** Text cut to `max` characters with "…" when longer (the full text stays on the detail page). */
export const clip = (text: string, max: number): string =>
  text.length > max ? `${text.slice(0, Math.max(0, max - 1))}…` : text

/** A time in UTC, ISO 8601 to the second: `2026-05-01 09:30:00Z`. */
export const utc = (at: Date): string =>
  at
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d{3}Z$/, "Z")

/** How far `at` lies from `now`, in words: `3 min ago`, `in 2 h`, `just now`. */
export const relative = (at: Date, now: Date): string => {
  const ms = at.getTime() - now.getTime()
  const abs = Math.abs(ms)
  if (abs < 5_000) return "just now"
  const [amount, unit] =
    abs < 60_000
      ? [abs / 1_000, "s"]
      : abs < 3_600_000
        ? [abs / 60_000, "min"]
        : abs < 172_800_000
          ? [abs / 3_600_000, "h"]
          : [abs / 86_400_000, "d"]
  const text = `${Math.floor(amount)} ${unit}`
  return ms < 0 ? `${text} ago` : `in ${text}`
}

/** A `<time>` showing the UTC time and how long ago (or ahead) it is. */
export const time = (at: Date | null | undefined, now: Date): Html =>
  at === null || at === undefined
    ? html`<span class="muted">–</span>`
    : html`<time datetime="${at.toISOString()}" title="${at.toISOString()}">${utc(at)}</time>
        <span class="muted rel">${relative(at, now)}</span>`
