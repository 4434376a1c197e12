/**
 * Change notices for open dashboard pages. One source per dashboard, however many tabs are open: the schema's NOTIFY
 * channel (new items, the switch and settings, operator changes to jobs) wakes pages at once, and a poll of a cheap
 * signature catches what sends no NOTIFY (finished executions, runs, workers coming and going). The poll runs only
 * while some page listens. A tab that closes only drops its subscription; the listener connection is shared.
 */
import * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import * as PubSub from "effect/PubSub"
import * as Ref from "effect/Ref"
import * as Runtime from "effect/Runtime"
import type * as Scope from "effect/Scope"
import * as Stream from "effect/Stream"
import type { WakeTopic } from "../../ports/WakeUps.js"

/** A running change source: subscribe with `events`. */
export interface Live {
  readonly hub: PubSub.PubSub<string>
  readonly listeners: Ref.Ref<number>
}

/** Where changes come from. */
export interface LiveOptions {
  /** A text that changes whenever a page would; polled. Its failure (database away) is itself a change. */
  readonly signature: Effect.Effect<string, unknown>
  /** The store's wake-up subscription (LISTEN on the schema's channel), held until the scope closes. */
  readonly subscribe: (wake: (topic: WakeTopic) => void) => Effect.Effect<unknown, never, Scope.Scope>
  readonly pollInterval: Duration.DurationInput
}

/** Starts the listener and the poll, until the scope closes. Neither ever ends on any failure. */
export const make = (options: LiveOptions): Effect.Effect<Live, never, Scope.Scope> =>
  Effect.gen(function* () {
    // Sliding: a tab that reads slowly loses old notices, never blocks the others (one notice is as good as many).
    const hub = yield* PubSub.sliding<string>(16)
    const listeners = yield* Ref.make(0)
    const runtime = yield* Effect.runtime<never>()
    const publish = (topic: string) => Runtime.runFork(runtime)(PubSub.publish(hub, topic))
    yield* options
      .subscribe((topic) => void publish(topic))
      .pipe(Effect.catchAllCause((cause) => Effect.logWarning("dashboard: listening for changes failed", cause)))

    let last: string | undefined
    const look = Effect.gen(function* () {
      if ((yield* Ref.get(listeners)) === 0) return
      const now = yield* options.signature.pipe(Effect.orElseSucceed(() => "unavailable"))
      if (last !== undefined && now !== last) yield* PubSub.publish(hub, "poll")
      last = now
    })
    yield* Effect.sleep(options.pollInterval).pipe(
      Effect.zipRight(look),
      Effect.catchAllCause((cause) => Effect.logWarning("dashboard: polling for changes failed", cause)),
      Effect.forever,
      Effect.forkScoped
    )
    return { hub, listeners }
  })

/**
 * The server-sent-event text for one page: a `change` event per notice, a comment every 15 seconds (so a dead
 * connection is noticed), until the client goes away. The subscription is counted while it is open.
 */
export const events = (live: Live): Stream.Stream<string> =>
  Stream.unwrapScoped(
    Effect.gen(function* () {
      yield* Effect.acquireRelease(
        Ref.update(live.listeners, (n) => n + 1),
        () => Ref.update(live.listeners, (n) => n - 1)
      )
      const subscription = yield* PubSub.subscribe(live.hub)
      const changes = Stream.fromQueue(subscription).pipe(Stream.map((topic) => `event: change\ndata: ${topic}\n\n`))
      const pings = Stream.tick(Duration.seconds(15)).pipe(Stream.map(() => ": ping\n\n"))
      return Stream.concat(Stream.make("retry: 3000\n: connected\n\n"), Stream.merge(changes, pings))
    })
  )
