/**
 * The pause switch: the seed's Semaphore (`IsGreen` / `SetGreen` / `SetRed`). Green: work starts; red: nothing new
 * starts on any instance (running executions finish). It is the one way code reads or writes the switch; it is
 * stored as the `semaphore` row of `scheduler_meta` (`green` / `red`), where plain SQL may write it too (a
 * `scheduler.paused` row written by SQL is stored as it). A missing row reads green; an instance created with
 * `startGreen: false` writes `red` into a database that has no row yet (the seed's
 * `NewPersistedSemaphore(store, startGreen)`), and leaves a row that exists as it is: the switch outlives restarts.
 */
import * as Context from "effect/Context"
import * as Data from "effect/Data"
import type * as Effect from "effect/Effect"
import { GREEN, RED, SEMAPHORE_KEY } from "../domain/SettingValues.js"

/** The `scheduler_meta` key the switch is stored under: `"semaphore"`. */
export const SemaphoreKey = SEMAPHORE_KEY
/** The stored value of a green switch (work runs): `"green"`. */
export const Green = GREEN
/** The stored value of a red switch (nothing new starts): `"red"`. */
export const Red = RED

/** Reading or writing the switch failed. */
export class SemaphoreError extends Data.TaggedError("SemaphoreError")<{
  readonly reason: "Unavailable" | "Unknown"
  readonly message: string
  readonly cause?: unknown
}> {}

/** How an instance's switch starts. */
export interface SemaphoreOptions {
  /** False: a database with no switch row yet starts red (the row is written). Default true (no row: green). */
  readonly startGreen?: boolean | undefined
}

/** The pause switch. Every write wakes every runner on the database. */
export class Semaphore extends Context.Tag("kairos/Semaphore")<
  Semaphore,
  {
    /** True when work may start (green); a missing row is green. */
    readonly isGreen: Effect.Effect<boolean, SemaphoreError>
    /** Lets work start on every instance. */
    readonly setGreen: Effect.Effect<void, SemaphoreError>
    /** Stops new work from starting on every instance; running executions finish. */
    readonly setRed: Effect.Effect<void, SemaphoreError>
  }
>() {}
