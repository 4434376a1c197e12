/**
 * The ISO 8601 times people type (`--run-after`, the dashboard's filters): a date, or a date and time with optional
 * seconds, fraction and offset. What a time without an offset means is the caller's to say.
 */

/**
 * Matches `2026-12-01`, `2026-12-01T09:00`, `2026-12-01 09:00:00.5+01:00`, `2026-12-01T09:00Z`; its one group is the
 * offset (`Z`, `+01:00`), undefined when the time has none.
 */
export const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?$/i
