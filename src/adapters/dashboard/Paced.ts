/**
 * Live refreshes paced by what a page costs the database. An open page is fetched again after each change, at most
 * once a second, and while work flows that is every second. A page that counts or sorts the whole queue (the
 * overview's depth by task type and its chart of the last hour, the queue's first page) takes ~0.2–0.9 s of the
 * database's CPU a read with a million items queued or recorded in the hour, so a tab left open took a core.
 *
 * A refresh is therefore given the page as last read while that read's time is less than `share` of its age: live
 * pages take at most that share of the database's time, however long the queue and however many tabs are open (they
 * share one read, and one in progress). A page read in under 50 ms is read afresh every time, as before. A navigation
 * or a reload always reads afresh, and an operator's change (an action sent through the dashboard; the switch, a job
 * or limits changed from anywhere, which the schema's channel says) forgets every page read.
 */
import * as Clock from "effect/Clock"
import * as Deferred from "effect/Deferred"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"

/** A page's data as read: when its read began (ms since the epoch) and how long it took. */
export interface Read<A> {
  readonly value: A
  readonly at: number
  readonly ms: number
}

export interface Paced<A, E> {
  /**
   * `load`'s value for `key`: as last read when `reuse` (a live refresh) and that read is recent enough, or awaited
   * when one is in progress; else read now (and kept for the refreshes that follow).
   */
  readonly read: <R>(key: string, reuse: boolean, load: Effect.Effect<A, E, R>) => Effect.Effect<Read<A>, E, R>
  /** Forgets every read: the next request for any page reads afresh. */
  readonly forget: Effect.Effect<void>
  /** How long a read that took `ms` is given to refreshes (ms). */
  readonly holdMs: (ms: number) => number
}

export interface PacedOptions {
  /** The most of the database's time live refreshes may take: 0.05 reuses a read of 1 s for 20 s. */
  readonly share: number
  /** However long a read takes, it is given to refreshes for at most this long (ms). */
  readonly maxHoldMs: number
  /**
   * A read given for less than this is not given at all (ms): pages refresh at most once a second, so holding a read
   * of a few milliseconds for a fraction of one saves nothing and would only delay a change.
   */
  readonly minHoldMs: number
  /** Pages kept at most (each its own path and query); the oldest read goes first. */
  readonly pages: number
}

export const make = <A, E>(options: PacedOptions): Paced<A, E> => {
  // In the order read (a Map keeps insertion order): the first is the oldest.
  const reads = new Map<string, Deferred.Deferred<Read<A>, E>>()
  const holdMs = (ms: number) => {
    const hold = Math.min(options.maxHoldMs, ms / options.share)
    return hold < options.minHoldMs ? 0 : hold
  }

  const readNow = <R>(key: string, load: Effect.Effect<A, E, R>): Effect.Effect<Read<A>, E, R> =>
    Effect.gen(function* () {
      const done = yield* Deferred.make<Read<A>, E>()
      reads.delete(key)
      reads.set(key, done)
      while (reads.size > options.pages) reads.delete(reads.keys().next().value as string)
      const at = yield* Clock.currentTimeMillis
      // Whatever ends the read (a failure, an interruption: the request went away) ends it for whoever awaits it too;
      // only a value is kept.
      const exit = yield* Effect.exit(
        Effect.flatMap(load, (value) =>
          Effect.map(Clock.currentTimeMillis, (end): Read<A> => ({ value, at, ms: end - at }))
        )
      ).pipe(
        Effect.onInterrupt(() =>
          Effect.zipRight(
            Effect.sync(() => forgetRead(key, done)),
            Deferred.interrupt(done)
          )
        )
      )
      if (Exit.isFailure(exit)) forgetRead(key, done)
      yield* Deferred.done(done, exit)
      return yield* exit
    })

  const forgetRead = (key: string, done: Deferred.Deferred<Read<A>, E>) => {
    if (reads.get(key) === done) reads.delete(key)
  }

  const read = <R>(key: string, reuse: boolean, load: Effect.Effect<A, E, R>): Effect.Effect<Read<A>, E, R> =>
    Effect.gen(function* () {
      const last = reads.get(key)
      if (!reuse || last === undefined) return yield* readNow(key, load)
      if (!(yield* Deferred.isDone(last))) {
        // One in progress: its value, unless it was cut short (another request's read, interrupted), then our own.
        const shared = yield* Effect.exit(Deferred.await(last))
        return Exit.isInterrupted(shared) ? yield* readNow(key, load) : yield* shared
      }
      const held = yield* Effect.exit(Deferred.await(last))
      const now = yield* Clock.currentTimeMillis
      if (Exit.isSuccess(held) && now - held.value.at < holdMs(held.value.ms)) return held.value
      return yield* readNow(key, load)
    })

  return { read, forget: Effect.sync(() => reads.clear()), holdMs }
}
