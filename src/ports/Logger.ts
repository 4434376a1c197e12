/**
 * Logging. Effect's own `Logger` serves as the port: kairos writes every line with `Effect.logInfo` /
 * `Effect.logWarning` / `Effect.logError`, annotated (`Effect.annotateLogs`) with what it is about (a task type, a
 * job, a channel). Replace Effect's default logger (`Logger.replace(Logger.defaultLogger, yours)`) to send the lines
 * elsewhere; the Promise API does that for a plain `logger` object (see `Kairos.create`'s `logger` option).
 */
export {}
