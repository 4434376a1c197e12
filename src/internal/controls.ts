/**
 * Control characters written out as visible escapes, for text any program may have put in a row (a terminal or a
 * browser would otherwise act on them). Each caller picks which characters count (`pattern`, global) and may give
 * some a name of their own.
 */
export const escapeMatches = (text: string, pattern: RegExp, named: Readonly<Record<string, string>> = {}): string =>
  text.replace(pattern, (c) => {
    const name = named[c]
    if (name !== undefined) return name
    const code = c.charCodeAt(0)
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`
  })
