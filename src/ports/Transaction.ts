/**
 * Transactional executions: a handler that runs inside one transaction of the store's own database, its result
 * recorded in that same transaction, fenced by the execution's lease (both commit, or neither does). Each store
 * runs them (`QueueStore.transact`, `JobStore.transact`) with the record of its own kind; the runtime only hands it
 * the handler's run and says what to record.
 */
import type * as Effect from "effect/Effect"

/** The rows a statement returned, as the driver parsed them. */
export interface QueryResult<Row = Record<string, unknown>> {
  readonly rows: ReadonlyArray<Row>
}

/**
 * The transaction a transactional handler runs in, for code that is not Effect (an Effect handler sees it as its
 * `SqlClient`). Valid until the handler returns: a statement sent later is refused.
 */
export interface Transaction {
  /** Runs one statement in the transaction, its parameters `$1`, `$2`, … taken from `values`. */
  readonly query: <Row = Record<string, unknown>>(
    text: string,
    values?: ReadonlyArray<unknown>
  ) => Promise<QueryResult<Row>>
}

/**
 * How a transactional execution ended in its store, with what its run returned:
 * - `Committed`: its record and everything the run wrote committed together;
 * - `Refused`: its lease was lost (another instance took the work over, or it was cancelled): rolled back whole,
 *   nothing recorded;
 * - `RolledBack`: the run's value was not to be recorded here (a failure: it is recorded in a transaction of its
 *   own, as every other result is): rolled back.
 */
export type Transacted<A> =
  | { readonly _tag: "Committed"; readonly value: A }
  | { readonly _tag: "Refused"; readonly value: A }
  | { readonly _tag: "RolledBack"; readonly value: A }

/** What a transactional execution runs under. */
export interface TransactOptions {
  /**
   * The handler's timeout (ms): the runner interrupts it then, and the database's own limits on the transaction
   * (statements, idle time) are set a little past it, so a handler awaiting other work is not cut short before.
   */
  readonly timeoutMs: number
}

/**
 * Runs `run` inside one transaction of the store's database (an Effect there uses it as its `SqlClient`; other code
 * uses the `Transaction` it is given), then, in that same transaction, the record `record` makes of its value, fenced
 * by the execution's lease: both commit (`Committed`), or everything is rolled back when the lease was lost
 * (`Refused`). `record` answering undefined rolls back too (`RolledBack`). A run that dies or is interrupted is
 * rolled back, and ends with that cause. Fails when the transaction cannot begin, record or commit (nothing then
 * says whether a commit whose answer was lost went through): the runner lets an execution whose transaction failed
 * for want of the database (`Unavailable`) go to its lease, and records another failure afterwards, fenced (refused
 * if the commit went through). In memory there is no database: the run runs, and its record is made at once, fenced.
 */
export type Transact<Rec, E> = <A>(
  run: (tx: Transaction) => Effect.Effect<A>,
  record: (value: A) => Rec | undefined,
  options: TransactOptions
) => Effect.Effect<Transacted<A>, E>
