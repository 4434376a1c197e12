/**
 * Wake-up notifications: an idle runner (or an open dashboard) hears at once that work may have arrived or a live
 * setting changed, instead of waiting for its next poll. A hint only: the poll stays the source of truth. Postgres
 * delivers them by LISTEN/NOTIFY (an item inserted even by plain SQL, a change of `scheduler_meta`, an operator's
 * change to a job); in memory, the memory adapters' writes signal them.
 */
import * as Context from "effect/Context"
import type * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

/**
 * What a wake-up is about: "queue" (an item arrived), "settings" (a live setting or the pause switch changed), or
 * "jobs" (an operator changed a job — paused, resumed or fired it — or the subscription came back after an outage,
 * when changes may have been missed: look at everything again).
 */
export type WakeTopic = "queue" | "jobs" | "settings"

/** A held subscription. */
export interface Subscription {
  /**
   * Whether it listens now: every settings change reaches `wake` while it does, and one that came while it did not
   * is followed by a "jobs" wake-up once it listens again. A runner trusts the settings it last read only while this
   * holds.
   */
  readonly live: () => boolean
}

/** The wake-up notifications. */
export class WakeUps extends Context.Tag("kairos/WakeUps")<
  WakeUps,
  {
    /**
     * Calls `wake` (synchronously, from outside any fiber) on every notification, until the scope closes; and
     * `reconnected`, the same way, each time the subscription listens again after its connection was lost: the
     * database is reachable again (a runner backing off after failed ticks resumes at once). A "jobs" wake-up follows
     * it. A subscription that cannot lose its connection (in memory) never calls it.
     */
    readonly subscribe: (
      wake: (topic: WakeTopic) => void,
      reconnected?: () => void
    ) => Effect.Effect<Subscription, never, Scope.Scope>
  }
>() {}
