/**
 * Transactional executions in memory. There is no database to hold a transaction: the handler runs, and its record
 * is made at once, in one step, fenced by its lease like every other record of the memory stores. A lost lease
 * refuses the record (and undoes nothing the handler did: it wrote nowhere kairos could roll back). Every statement
 * sent through the handler's `tx` is refused, saying why.
 */
import * as Effect from "effect/Effect"
import type { Transact, Transacted, Transaction } from "../../ports/Transaction.js"

/** The transaction a handler gets in memory: every statement refused. */
export const noDatabase: Transaction = {
  query: () =>
    Promise.reject(
      new Error(
        "kairos's memory stores have no database: a transactional handler's tx.query runs on Postgres only " +
          "(test the handler's SQL against Postgres)"
      )
    )
}

/** `transact` over a store's fenced record of a batch (one record here, made at once). */
export const transactWith =
  <Rec, E>(recordAll: (records: ReadonlyArray<Rec>) => Effect.Effect<ReadonlyArray<boolean>, E>): Transact<Rec, E> =>
  <A>(run: (tx: Transaction) => Effect.Effect<A>, record: (value: A) => Rec | undefined) =>
    Effect.flatMap(run(noDatabase), (value): Effect.Effect<Transacted<A>, E> => {
      const made = record(value)
      if (made === undefined) return Effect.succeed({ _tag: "RolledBack", value })
      return Effect.map(recordAll([made]), ([held]) => ({ _tag: held === true ? "Committed" : "Refused", value }))
    })
