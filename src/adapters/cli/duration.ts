/**
 * Durations as typed on a command line: `200ms`, `1s`, `30s`, `5m`, `1h`, or Effect's `"5 minutes"` form.
 */
import { Duration, Option } from "effect"

const SHORT = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h)$/

export const parseDuration = (input: string): Option.Option<Duration.Duration> => {
  const m = SHORT.exec(input.trim())
  if (m !== null) {
    const n = Number(m[1])
    const unit = m[2]
    const ms = unit === "ms" ? n : unit === "s" ? n * 1000 : unit === "m" ? n * 60_000 : n * 3_600_000
    return ms > 0 ? Option.some(Duration.millis(ms)) : Option.none()
  }
  return Duration.decodeUnknown(input).pipe(
    Option.filter((d) => Duration.isFinite(d) && Duration.greaterThan(d, Duration.zero))
  )
}
