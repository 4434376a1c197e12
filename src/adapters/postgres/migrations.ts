/**
 * kairos's migrations, run through @effect/sql's Migrator with its own migrations table in the target schema.
 * Never edit a shipped migration: add the next one. `test/fixtures/schema.sql` is the reviewed result.
 */
import * as Migrator from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import type { SqlError } from "@effect/sql/SqlError"
import type * as Statement from "@effect/sql/Statement"
import * as Data from "effect/Data"
import * as Effect from "effect/Effect"
import { channel, type PgOptions, schemaName } from "./PgSchema.js"

/**
 * Migrating failed. The message names the migration (when one failed) and carries the database's own message,
 * SQLSTATE code, detail and hint, e.g. `migration 0002_queue failed: relation "queue_items" already exists
 * (SQLSTATE 42P07)`.
 */
export class MigrationError extends Data.TaggedError("kairos/MigrationError")<{
  /** `Unavailable`: the database could not be reached; `Failed`: it refused a statement. */
  readonly reason: "Failed" | "Unavailable"
  readonly message: string
  /** The migration that failed, e.g. `0002_queue`; absent when the failure came before any migration ran. */
  readonly migration?: string | undefined
  readonly cause?: unknown
}> {}

/** What the database said, read off the first error in `cause`'s chain that carries a code (the driver's error). */
const databaseReason = (cause: unknown): { readonly text: string; readonly connection: boolean } | undefined => {
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const e = current as { code?: unknown; message?: unknown; detail?: unknown; hint?: unknown; cause?: unknown }
    if (typeof e.code === "string" && typeof e.message === "string") {
      // Postgres's SQLSTATE codes are five characters; anything else (ECONNREFUSED...) is the network's.
      const sqlState = /^[0-9A-Z]{5}$/.test(e.code)
      const parts = [sqlState ? `${e.message} (SQLSTATE ${e.code})` : `${e.message} (${e.code})`]
      if (typeof e.detail === "string" && e.detail.length > 0) parts.push(`detail: ${e.detail}`)
      if (typeof e.hint === "string" && e.hint.length > 0) parts.push(`hint: ${e.hint}`)
      return { text: parts.join("; "), connection: !sqlState || e.code.startsWith("08") }
    }
    current = e.cause
  }
  return undefined
}

/** The innermost message of `cause`'s chain, for failures without a database error (a defect in a migration). */
const innermostMessage = (cause: unknown): string => {
  let message = String(cause)
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    const m = (current as { message?: unknown }).message
    if (typeof m === "string" && m.length > 0) message = m
    current = (current as { cause?: unknown }).cause
  }
  return message
}

/** The kairos error in `cause`'s chain, if a named migration put one there (see `named`). */
const failedMigration = (cause: unknown): MigrationError | undefined => {
  let current: unknown = cause
  for (let depth = 0; depth < 8 && typeof current === "object" && current !== null; depth++) {
    if (current instanceof MigrationError) return current
    current = (current as { cause?: unknown }).cause
  }
  return undefined
}

/** One clear error for anything that went wrong while migrating: which migration, and the database's reason. */
const toMigrationError = (cause: unknown): MigrationError => {
  const named = failedMigration(cause)
  if (named !== undefined) return named
  const reason = databaseReason(cause)
  return new MigrationError({
    reason: reason?.connection === true ? "Unavailable" : "Failed",
    message: `migration failed: ${reason?.text ?? innermostMessage(cause)}`,
    cause
  })
}

/**
 * A migration whose failure says its name: @effect/sql's Migrator turns a failed migration into a defect whose
 * message is only `Migration "2_queue" failed`, with the database's reason two causes down.
 */
const named = <E, R>(name: string, migration: Effect.Effect<void, E, R>): Effect.Effect<void, MigrationError, R> =>
  migration.pipe(
    Effect.catchAllDefect((defect) => Effect.fail(defect)),
    Effect.mapError((error) => {
      const reason = databaseReason(error)
      return new MigrationError({
        reason: reason?.connection === true ? "Unavailable" : "Failed",
        message: `migration ${name} failed: ${reason?.text ?? innermostMessage(error)}`,
        migration: name,
        cause: error
      })
    })
  )

const migration0001 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    yield* sql`
      CREATE TABLE ${s}.scheduled_jobs (
        id          bigserial PRIMARY KEY,
        name        text NOT NULL UNIQUE,
        task_type   text NOT NULL,
        payload     text DEFAULT '',
        schedule    jsonb NOT NULL,
        enabled     boolean NOT NULL DEFAULT true,
        next_run_at timestamptz,
        missed_slots text CHECK (missed_slots IN ('latest', 'skip')),
        overlap     text NOT NULL DEFAULT 'skip' CHECK (overlap IN ('skip', 'allow')),
        created_at  timestamptz NOT NULL DEFAULT now(),
        updated_at  timestamptz NOT NULL DEFAULT now()
      )`
    yield* sql`CREATE INDEX scheduled_jobs_due ON ${s}.scheduled_jobs (next_run_at NULLS FIRST, id) WHERE enabled`
    yield* sql`
      CREATE TABLE ${s}.job_runs (
        id            bigserial PRIMARY KEY,
        job_id        bigint NOT NULL REFERENCES ${s}.scheduled_jobs (id) ON DELETE CASCADE,
        scheduled_for timestamptz NOT NULL,
        attempt       int NOT NULL CHECK (attempt >= 1),
        status        text NOT NULL CHECK (status IN ('pending', 'running', 'success', 'failed', 'skipped')),
        started_at    timestamptz,
        finished_at   timestamptz,
        output        jsonb,
        error         text,
        due_at        timestamptz,
        owner         text,
        lease_until   timestamptz,
        lease_token   text,
        UNIQUE (job_id, scheduled_for, attempt)
      )`
    yield* sql`CREATE INDEX job_runs_pending_due ON ${s}.job_runs (due_at, id) WHERE status = 'pending'`
    yield* sql`CREATE INDEX job_runs_running ON ${s}.job_runs (job_id, lease_until) WHERE status = 'running'`
    yield* sql`CREATE INDEX job_runs_running_lease ON ${s}.job_runs (lease_until) WHERE status = 'running'`
    yield* sql`
      CREATE TABLE ${s}.scheduler_meta (
        key   text PRIMARY KEY,
        value text NOT NULL
      )`
  })

const migration0002 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    yield* sql`
      CREATE TABLE ${s}.queue_items (
        id         bigserial PRIMARY KEY,
        task_type  text NOT NULL,
        payload    text,
        status     text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing')),
        priority   int NOT NULL DEFAULT 0,
        max_runs   int NOT NULL DEFAULT 1,
        thread     int NOT NULL DEFAULT 0,
        in_flight  int NOT NULL DEFAULT 0,
        runs_done  int NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`
    // Whoever inserts (API, CLI, plain SQL), the stored values follow the contract's rules.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_queue_items_normalize() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        NEW.max_runs := CASE WHEN NEW.max_runs = -1 OR NEW.max_runs >= 1 THEN NEW.max_runs ELSE 1 END;
        NEW.thread := CASE WHEN NEW.thread = 1 THEN 1 ELSE 0 END;
        NEW.priority := coalesce(NEW.priority, 0);
        NEW.status := 'pending';
        NEW.in_flight := 0;
        NEW.runs_done := 0;
        NEW.created_at := coalesce(NEW.created_at, now());
        NEW.updated_at := coalesce(NEW.updated_at, NEW.created_at);
        RETURN NEW;
      END
      $fn$`
    yield* sql`
      CREATE TRIGGER queue_items_normalize BEFORE INSERT ON ${s}.queue_items
      FOR EACH ROW EXECUTE FUNCTION ${s}.kairos_queue_items_normalize()`
    // One wake-up per INSERT statement, non-empty (empty payloads are dropped by some listeners), on the
    // schema's own channel.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_queue_items_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_notify(${sql.literal(`'${channel(schema)}'`)}, 'queue_items');
        RETURN NULL;
      END
      $fn$`
    yield* sql`
      CREATE TRIGGER queue_items_notify AFTER INSERT ON ${s}.queue_items
      FOR EACH STATEMENT EXECUTE FUNCTION ${s}.kairos_queue_items_notify()`
    // What can be claimed: nothing in flight, or a concurrent item with room for another repetition.
    yield* sql`
      CREATE INDEX queue_items_claimable ON ${s}.queue_items (task_type, thread, priority DESC, id)
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs))`
    // At most one sequential execution per task type, cluster-wide: the claim's lock is the first guard,
    // this index the last.
    yield* sql`
      CREATE UNIQUE INDEX queue_items_one_sequential ON ${s}.queue_items (task_type)
      WHERE status = 'processing' AND thread = 0`
    yield* sql`
      CREATE TABLE ${s}.queue_leases (
        id          bigserial PRIMARY KEY,
        item_id     bigint NOT NULL REFERENCES ${s}.queue_items (id) ON DELETE CASCADE,
        token       text NOT NULL,
        owner       text NOT NULL,
        started_at  timestamptz NOT NULL,
        lease_until timestamptz NOT NULL
      )`
    yield* sql`CREATE INDEX queue_leases_item ON ${s}.queue_leases (item_id)`
    yield* sql`CREATE INDEX queue_leases_until ON ${s}.queue_leases (lease_until)`
    yield* sql`CREATE INDEX queue_leases_owner ON ${s}.queue_leases (owner)`
    yield* sql`
      CREATE TABLE ${s}.processed_items (
        id            bigserial PRIMARY KEY,
        queue_item_id bigint NOT NULL,
        task_type     text NOT NULL,
        payload       text,
        status        text NOT NULL CHECK (status IN ('ok', 'error')),
        error_msg     text NOT NULL DEFAULT '',
        started_at    timestamptz NOT NULL,
        finished_at   timestamptz NOT NULL,
        duration_ms   int NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now()
      )`
    yield* sql`CREATE INDEX processed_items_item ON ${s}.processed_items (queue_item_id)`
    // Insert-only in the database itself: privileges do not bind a superuser. TRUNCATE stays possible.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_processed_items_insert_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        RAISE EXCEPTION 'processed_items is insert-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
      END
      $fn$`
    yield* sql`
      CREATE TRIGGER processed_items_insert_only BEFORE UPDATE OR DELETE ON ${s}.processed_items
      FOR EACH ROW EXECUTE FUNCTION ${s}.kairos_processed_items_insert_only()`
    yield* sql`
      CREATE TABLE ${s}.scheduler_workers (
        id           text PRIMARY KEY,
        task_types   text[] NOT NULL DEFAULT '{}',
        started_at   timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz NOT NULL DEFAULT now()
      )`
  })

const migration0003 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    const notify = sql.literal(`'${channel(schema)}'`)
    // Queue order and pacing. `seq` orders items of equal priority: insertion order, and a repeating item that
    // just started goes behind its peers (it takes a new `seq`). `run_after` (NULL: at once) gates when an item may
    // start: a forever-repeating item waits a poll interval after each start. `runs_started` numbers the executions, so
    // concurrent repetitions of one item each get their own attempt number.
    yield* sql`CREATE SEQUENCE ${s}.queue_items_seq`
    yield* sql`ALTER TABLE ${s}.queue_items
      ADD COLUMN seq bigint,
      ADD COLUMN run_after timestamptz,
      ADD COLUMN runs_started int NOT NULL DEFAULT 0`
    yield* sql`UPDATE ${s}.queue_items SET seq = id, runs_started = runs_done + in_flight`
    yield* sql`SELECT setval(${`${schema}.queue_items_seq`}::regclass, greatest(1, (SELECT max(id) FROM ${s}.queue_items)))`
    yield* sql`ALTER TABLE ${s}.queue_items
      ALTER COLUMN seq SET DEFAULT nextval(${sql.literal(`'${schema}.queue_items_seq'`)}::regclass),
      ALTER COLUMN seq SET NOT NULL`
    yield* sql`ALTER TABLE ${s}.queue_leases ADD COLUMN attempt int NOT NULL DEFAULT 1`
    yield* sql`
      CREATE OR REPLACE FUNCTION ${s}.kairos_queue_items_normalize() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        NEW.max_runs := CASE WHEN NEW.max_runs = -1 OR NEW.max_runs >= 1 THEN NEW.max_runs ELSE 1 END;
        NEW.thread := CASE WHEN NEW.thread = 1 THEN 1 ELSE 0 END;
        NEW.priority := coalesce(NEW.priority, 0);
        NEW.status := 'pending';
        NEW.in_flight := 0;
        NEW.runs_done := 0;
        NEW.runs_started := 0;
        NEW.created_at := coalesce(NEW.created_at, now());
        NEW.updated_at := coalesce(NEW.updated_at, NEW.created_at);
        RETURN NEW;
      END
      $fn$`
    yield* sql`DROP INDEX ${s}.queue_items_claimable`
    yield* sql`
      CREATE INDEX queue_items_claimable ON ${s}.queue_items (task_type, thread, priority DESC, seq)
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs))`
    // One pause switch. `scheduler.paused` and the `semaphore` are the same thing: a write of
    // `scheduler.paused` (by any program) is stored as the semaphore row, so there is one row to read and no
    // two rows can disagree. A value that is neither true nor false is refused with a clear error.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_scheduler_meta_paused() RETURNS trigger LANGUAGE plpgsql AS $fn$
      DECLARE v text := lower(trim(NEW.value));
      BEGIN
        IF v IN ('true', '1', 'yes', 'on', 'red') THEN v := 'red';
        ELSIF v IN ('false', '0', 'no', 'off', 'green') THEN v := 'green';
        ELSE RAISE EXCEPTION 'scheduler.paused must be true or false (got %)', NEW.value USING ERRCODE = 'check_violation';
        END IF;
        INSERT INTO ${s}.scheduler_meta (key, value) VALUES ('semaphore', v)
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
        RETURN NULL;
      END
      $fn$`
    // A `scheduler.paused` row written before this migration becomes the semaphore now; none exists after it.
    yield* sql`
      INSERT INTO ${s}.scheduler_meta (key, value)
      SELECT 'semaphore', CASE WHEN lower(trim(value)) IN ('true', '1', 'yes', 'on', 'red') THEN 'red' ELSE 'green' END
      FROM ${s}.scheduler_meta WHERE key = 'scheduler.paused'
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`
    yield* sql`DELETE FROM ${s}.scheduler_meta WHERE key = 'scheduler.paused'`
    yield* sql`
      CREATE TRIGGER scheduler_meta_paused BEFORE INSERT OR UPDATE ON ${s}.scheduler_meta
      FOR EACH ROW WHEN (NEW.key = 'scheduler.paused') EXECUTE FUNCTION ${s}.kairos_scheduler_meta_paused()`
    // Any change of a live setting (the switch, enabled, the poll interval) wakes every runner of the schema.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_scheduler_meta_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_notify(${notify}, 'settings');
        RETURN NULL;
      END
      $fn$`
    yield* sql`
      CREATE TRIGGER scheduler_meta_notify AFTER INSERT OR UPDATE OR DELETE ON ${s}.scheduler_meta
      FOR EACH STATEMENT EXECUTE FUNCTION ${s}.kairos_scheduler_meta_notify()`
    // Each worker says how long its heartbeat holds (it depends on its own heartbeat interval): one rule for
    // "live" everywhere, `live_until > now`.
    yield* sql`ALTER TABLE ${s}.scheduler_workers
      ADD COLUMN live_until timestamptz NOT NULL DEFAULT now() + interval '2 minutes'`
    yield* sql`UPDATE ${s}.scheduler_workers SET live_until = heartbeat_at + interval '2 minutes'`
  })

const migration0004 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // A lease is written and deleted once per execution: the hot path. Its foreign key cost a row lock on the item
    // per lease written and a cascade check per item deleted; the owner index, an index write per lease for a
    // lookup made once per forced stop. The store keeps what the key guaranteed: a lease whose item is gone is
    // not renewed (its handler is aborted), and recording it writes nothing to queue_items.
    yield* sql`ALTER TABLE ${s}.queue_leases DROP CONSTRAINT IF EXISTS queue_leases_item_id_fkey`
    yield* sql`DROP INDEX IF EXISTS ${s}.queue_leases_owner`
    // Leases left behind by items deleted by hand while they ran (before this migration the key removed them).
    yield* sql`DELETE FROM ${s}.queue_leases l WHERE NOT EXISTS (SELECT 1 FROM ${s}.queue_items i WHERE i.id = l.item_id)`
    // The claim and the record of run-once executions, the two statements of the hot path, as functions: a
    // function's plans are cached for its session, so these large statements are planned once per connection
    // instead of once per call (planning took as long as running them). Generic plans from the first call: their
    // parameters never change the best plan (per-type index scans).
    //
    // The claim, per task type over the claimable index:
    // - concurrent items, locked as they are read; each gets one execution, or up to its remaining runs while the
    //   limit allows, each with its own lease and attempt number;
    // - at most one sequential item, when the type has none in flight (a blocked backlog is never scanned: the type
    //   fails the NOT EXISTS on the index of processing sequential items), under a per-type lock held for the
    //   statement, so two claimers never take two of a type's items at once. A claimer whose snapshot predates
    //   another's committed claim can still try: the unique index of processing sequential items refuses it, and
    //   the caller tries again with a fresh snapshot.
    // A forever-repeating item waits until `repeat_after` and goes behind its peers (a new seq).
    const seqLock = sql.literal(`'kairos.seq.${schema}.'`)
    const seqName = sql.literal(`'${schema}.queue_items_seq'`)
    const itemColumns = sql.literal(
      "i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, " +
        "i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq"
    )
    yield* sql`
      CREATE FUNCTION ${s}.kairos_claim(
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
        runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
        in_flight int, seq bigint, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
      #variable_conflict use_column
      BEGIN
        RETURN QUERY
        WITH cand AS (
          SELECT c.* FROM unnest(p_types) AS t(task_type)
          CROSS JOIN LATERAL (
            SELECT ${itemColumns} FROM ${s}.queue_items i
            WHERE i.task_type = t.task_type AND i.thread = 1
              AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
              AND (i.run_after IS NULL OR i.run_after <= p_now)
            ORDER BY i.priority DESC, i.seq LIMIT p_limit
            FOR UPDATE SKIP LOCKED
          ) c
          UNION ALL
          SELECT c.* FROM (
            SELECT t.task_type FROM unnest(p_types) AS t(task_type)
            WHERE NOT EXISTS (
              SELECT 1 FROM ${s}.queue_items b
              WHERE b.task_type = t.task_type AND b.status = 'processing' AND b.thread = 0
            ) AND pg_try_advisory_xact_lock(hashtext(${seqLock} || t.task_type))
          ) t
          CROSS JOIN LATERAL (
            SELECT ${itemColumns} FROM ${s}.queue_items i
            WHERE i.task_type = t.task_type AND i.thread = 0 AND i.in_flight = 0
              AND (i.run_after IS NULL OR i.run_after <= p_now)
            ORDER BY i.priority DESC, i.seq LIMIT 1
            FOR UPDATE SKIP LOCKED
          ) c
        ), ranked AS (
          SELECT w.*, sum(w.want) OVER (ORDER BY w.priority DESC, w.seq, w.id ROWS UNBOUNDED PRECEDING) AS upto
          FROM (
            SELECT c.*, CASE WHEN c.thread = 0 OR c.max_runs = -1 THEN 1 ELSE c.max_runs - c.in_flight END AS want
            FROM cand c
          ) w
          WHERE w.want > 0
        ), planned AS (
          SELECT r.*, least(r.want, p_limit - (r.upto - r.want))::int AS n FROM ranked r
          WHERE r.upto - r.want < p_limit
        ), updated AS (
          UPDATE ${s}.queue_items i SET in_flight = i.in_flight + p.n, runs_started = i.runs_started + p.n,
            status = 'processing', updated_at = p_now,
            run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
            seq = CASE WHEN i.max_runs = -1 THEN nextval(${seqName}::regclass) ELSE i.seq END
          FROM planned p WHERE i.id = p.id
        ), leased AS (
          INSERT INTO ${s}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
          SELECT p.id, gen_random_uuid()::text, p_owner, p_now, p_lease_until, p.runs_started + g.k
          FROM planned p CROSS JOIN LATERAL generate_series(1, p.n) AS g(k)
          RETURNING q.id, q.item_id, q.token, q.attempt
        )
        SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
          p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, l.id, l.token, l.attempt
        FROM leased l JOIN planned p ON p.id = l.item_id
        ORDER BY p.priority DESC, p.seq, l.id;
      END
      $fn$`
    // Executions of items that run once (the common case): only those whose lease is still held (deleted here) and
    // whose item still exists are logged, and their items deleted. Such an item has one execution at a time, so no
    // other instance writes its row meanwhile. A row changed by hand to run again (max_runs raised while it ran) is
    // updated instead of deleted. Returns the lease ids recorded.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_record_once(
        p_lease_ids bigint[], p_tokens text[], p_task_types text[], p_payloads text[], p_statuses text[],
        p_errors text[], p_started timestamptz[], p_finished timestamptz[], p_durations int[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
      BEGIN
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_task_types, p_payloads, p_statuses, p_errors, p_started, p_finished, p_durations
          ) AS x(lease_id, token, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
        ), l AS (
          DELETE FROM ${s}.queue_leases q USING input x WHERE q.id = x.lease_id AND q.token = x.token
            AND EXISTS (SELECT 1 FROM ${s}.queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id
        ), log AS (
          INSERT INTO ${s}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, x.task_type, x.payload, x.status, x.error_msg, x.started_at, x.finished_at, x.duration_ms
          FROM l JOIN input x ON x.lease_id = l.id
        ), gone AS (
          DELETE FROM ${s}.queue_items i USING l WHERE i.id = l.item_id AND i.max_runs <= 1 AND i.in_flight <= 1
        ), kept AS (
          UPDATE ${s}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            updated_at = now()
          FROM l WHERE i.id = l.item_id AND NOT (i.max_runs <= 1 AND i.in_flight <= 1)
        )
        SELECT l.id FROM l;
      END
      $fn$`
  })

const migration0005 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // Timestamps written by other programs must be finite: 'infinity' and '-infinity' are valid timestamptz values,
    // but no Date holds them, and one such row in a batch the runner reads failed every tick (a -infinity
    // next_run_at sorts first, so it stopped every job). Refused at insert with the constraint's name as the reason.
    // Existing infinite values in scheduled_jobs are repaired first (a job without a slot gets its first slot from
    // created_at); the other tables' constraints bind new and updated rows only.
    yield* sql`UPDATE ${s}.scheduled_jobs SET next_run_at = NULL WHERE NOT isfinite(next_run_at)`
    yield* sql`UPDATE ${s}.scheduled_jobs SET created_at = now() WHERE NOT isfinite(created_at)`
    yield* sql`UPDATE ${s}.scheduled_jobs SET updated_at = now() WHERE NOT isfinite(updated_at)`
    yield* sql`ALTER TABLE ${s}.scheduled_jobs ADD CONSTRAINT scheduled_jobs_times_must_be_finite
      CHECK (isfinite(next_run_at) AND isfinite(created_at) AND isfinite(updated_at))`
    yield* sql`ALTER TABLE ${s}.queue_items ADD CONSTRAINT queue_items_times_must_be_finite
      CHECK (isfinite(created_at) AND isfinite(updated_at) AND isfinite(run_after)) NOT VALID`
    yield* sql`ALTER TABLE ${s}.job_runs ADD CONSTRAINT job_runs_times_must_be_finite
      CHECK (isfinite(scheduled_for) AND isfinite(started_at) AND isfinite(finished_at) AND isfinite(due_at)
        AND isfinite(lease_until)) NOT VALID`
  })

const migration0006 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // Executions of an item taken back because their lease expired (they never finished): past a bound, that run is
    // given up and recorded as an error, so a handler that kills its process cannot make an item run for ever.
    yield* sql`ALTER TABLE ${s}.queue_items ADD COLUMN unfinished int NOT NULL DEFAULT 0`
  })

/**
 * The claim function as migration 0007 created it, but for how its UPDATE finds the planned rows (`updateFrom`, a
 * FROM … WHERE clause binding `p.id` and `p.n`): 0010 replaces that clause alone.
 */
const claimFunction = (
  sql: SqlClient.SqlClient,
  schema: string,
  updateFrom: Statement.Fragment,
  create: "CREATE" | "CREATE OR REPLACE" = "CREATE",
  token = "gen_random_uuid()::text",
  rowLeases: false | "concurrent" | "run-once" = false
) => {
  const s = sql(schema)
  // With rowLeases (0014's overload), an execution of a run-once concurrent item holds its lease on the item row
  // (lease_token, lease_owner, lease_until), reported with the item's id negated as its lease id: no lease row is
  // inserted now and deleted at its record. Every other execution holds a row of queue_leases, as before. Since
  // 0016 ("run-once"), a run-once sequential item's too: like a run-once concurrent one, it is claimed for one
  // execution at a time (a sequential item only while none of it is in flight).
  // Since 0016, no sequential scan: the generic plan found the claimed rows for its UPDATE by hashing a scan of the
  // whole queue whenever the queue was small enough for the estimate to prefer it (up to a few thousand rows): a claim
  // of one item from a queue of 1,200 cost ~375 us of server CPU that way, ~225 us through the primary key.
  const settings = rowLeases === "run-once" ? " SET enable_seqscan = off" : ""
  const rowLeasedOf = (row: string) =>
    rowLeases === "run-once"
      ? `p_row_leases AND ${row}.max_runs = 1`
      : `p_row_leases AND ${row}.thread = 1 AND ${row}.max_runs = 1`
  const rowLeased = rowLeasedOf("i")
  const parameters = rowLeases ? ",\n      p_row_leases boolean" : ""
  const leaseColumns = rowLeases
    ? `,\n          lease_token = CASE WHEN ${rowLeased} THEN ${token} ELSE i.lease_token END,` +
      `\n          lease_owner = CASE WHEN ${rowLeased} THEN p_owner ELSE i.lease_owner END,` +
      `\n          lease_until = CASE WHEN ${rowLeased} THEN p_lease_until ELSE i.lease_until END`
    : ""
  const updatedReturning = rowLeases
    ? `\n        RETURNING i.id, i.lease_token, i.runs_started, ${rowLeased} AS row_leased`
    : ""
  const leasedWhere = rowLeases ? `\n        WHERE NOT (${rowLeasedOf("p")})` : ""
  const rowLeasedClaims = rowLeases
    ? `\n      UNION ALL
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, -u.id, u.lease_token,
        u.runs_started
      FROM updated u JOIN planned p ON p.id = u.id WHERE u.row_leased`
    : ""
  // A union's order names its output columns, by position: priority, seq, the lease id.
  const order = rowLeases ? "ORDER BY 5 DESC, 14, 16" : "ORDER BY p.priority DESC, p.seq, l.id"
  const seqLock = sql.literal(`'kairos.seq.${schema}.'`)
  const seqName = sql.literal(`'${schema}.queue_items_seq'`)
  const itemColumns = sql.literal(
    "i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, " +
      "i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq, i.unique_key"
  )
  return sql`
    ${sql.literal(create)} FUNCTION ${s}.kairos_claim(
      p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
      p_repeat_after timestamptz${sql.literal(parameters)}
    ) RETURNS TABLE (
      id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
      runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
      in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
    ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off${sql.literal(settings)} AS $fn$
    #variable_conflict use_column
    BEGIN
      RETURN QUERY
      WITH cand AS (
        SELECT c.* FROM unnest(p_types) AS t(task_type)
        CROSS JOIN LATERAL (
          SELECT ${itemColumns} FROM ${s}.queue_items i
          WHERE i.task_type = t.task_type AND i.thread = 1
            AND (i.in_flight = 0 OR (i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)))
            AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
          ORDER BY i.priority DESC, i.seq LIMIT p_limit
          FOR UPDATE SKIP LOCKED
        ) c
        UNION ALL
        SELECT c.* FROM (
          SELECT t.task_type FROM unnest(p_types) AS t(task_type)
          WHERE NOT EXISTS (
            SELECT 1 FROM ${s}.queue_items b
            WHERE b.task_type = t.task_type AND b.status = 'processing' AND b.thread = 0
          ) AND pg_try_advisory_xact_lock(hashtext(${seqLock} || t.task_type))
        ) t
        CROSS JOIN LATERAL (
          SELECT ${itemColumns} FROM ${s}.queue_items i
          WHERE i.task_type = t.task_type AND i.thread = 0 AND i.in_flight = 0
            AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
          ORDER BY i.priority DESC, i.seq LIMIT 1
          FOR UPDATE SKIP LOCKED
        ) c
      ), ranked AS (
        SELECT w.*, sum(w.want) OVER (ORDER BY w.priority DESC, w.seq, w.id ROWS UNBOUNDED PRECEDING) AS upto
        FROM (
          SELECT c.*, CASE WHEN c.thread = 0 OR c.max_runs = -1 THEN 1 ELSE c.max_runs - c.in_flight END AS want
          FROM cand c
        ) w
        WHERE w.want > 0
      ), planned AS (
        SELECT r.*, least(r.want, p_limit - (r.upto - r.want))::int AS n FROM ranked r
        WHERE r.upto - r.want < p_limit
      ), updated AS (
        UPDATE ${s}.queue_items i SET in_flight = i.in_flight + p.n, runs_started = i.runs_started + p.n,
          status = 'processing', updated_at = p_now,
          run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
          seq = CASE WHEN i.max_runs = -1 THEN nextval(${seqName}::regclass) ELSE i.seq END${sql.literal(leaseColumns)}
        ${updateFrom}${sql.literal(updatedReturning)}
      ), leased AS (
        INSERT INTO ${s}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        SELECT p.id, ${sql.literal(token)}, p_owner, p_now, p_lease_until, p.runs_started + g.k
        FROM planned p CROSS JOIN LATERAL generate_series(1, p.n) AS g(k)${sql.literal(leasedWhere)}
        RETURNING q.id, q.item_id, q.token, q.attempt
      )
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, l.id, l.token,
        l.attempt
      FROM leased l JOIN planned p ON p.id = l.item_id${sql.literal(rowLeasedClaims)}
      ${sql.literal(order)};
    END
    $fn$`
}

const migration0007 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // Delayed items reuse `run_after` (added by 0003 to pace repeating items): NULL still means "at once", so an
    // item enqueued without a delay does not depend on which clock wrote it; a time delays the item until then.
    //
    // Unique items: while an item with a key is queued (pending or processing: finished items are deleted), no
    // other item with that key can be inserted. Enqueuers use `ON CONFLICT (unique_key) WHERE unique_key IS NOT
    // NULL DO NOTHING` and read the existing id, so concurrent enqueuers never race.
    yield* sql`ALTER TABLE ${s}.queue_items ADD COLUMN unique_key text`
    yield* sql`CREATE UNIQUE INDEX queue_items_unique_key ON ${s}.queue_items (unique_key) WHERE unique_key IS NOT NULL`
    // The claim scans per type in queue order; a delayed item sorting first is skipped on the index tuple itself
    // (its run_after is a key column the claim's condition reads), never by fetching its row.
    yield* sql`DROP INDEX ${s}.queue_items_claimable`
    yield* sql`
      CREATE INDEX queue_items_claimable ON ${s}.queue_items
        (task_type, thread, priority DESC, seq, (coalesce(run_after, '-infinity'::timestamptz)))
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs))`
    // An idle runner sleeps until the earliest delayed item of its types: per type, the first future run_after.
    yield* sql`CREATE INDEX queue_items_run_after ON ${s}.queue_items (task_type, run_after) WHERE run_after IS NOT NULL`
    // The claim of 0004 with the delay read through the index above, and returning the key. Its result type
    // changes, so it is dropped and created again (in this migration's transaction: callers never see it missing).
    // Without JIT: the generic plan's estimates grow with the table (a million-row sort, for a claim of ten), and
    // past `jit_above_cost` every call compiled the query first: measured ~1 s per claim with 200,000 delayed items
    // queued, ~11 ms without.
    yield* sql`DROP FUNCTION ${s}.kairos_claim(text[], int, text, timestamptz, timestamptz, timestamptz)`
    yield* claimFunction(sql, schema, sql.literal("FROM planned p WHERE i.id = p.id"))
  })

const migration0008 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // Retention: the one sanctioned path past processed_items' insert-only rule. The prune functions set a
    // transaction-local flag the trigger lets a DELETE through with; every other UPDATE or DELETE is still refused.
    yield* sql`
      CREATE OR REPLACE FUNCTION ${s}.kairos_processed_items_insert_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        IF TG_OP = 'DELETE' AND current_setting('kairos.pruning', true) = 'on' THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION 'processed_items is insert-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
      END
      $fn$`
    yield* sql`CREATE INDEX processed_items_created ON ${s}.processed_items (created_at, id)`
    yield* sql`CREATE INDEX job_runs_finished ON ${s}.job_runs (finished_at, id)
      WHERE status IN ('success', 'failed', 'skipped')`
    // One batch: rows older than `older_than` (NULL: any age) and not among the newest `keep_last` (NULL: no floor),
    // oldest first, at most `batch`; rows another pruner holds are skipped, so instances pruning at once do not wait.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_prune_processed(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        n int;
      BEGIN
        IF keep_last IS NOT NULL THEN
          SELECT id INTO keep_from FROM ${s}.processed_items ORDER BY id DESC OFFSET greatest(keep_last, 0) LIMIT 1;
          -- No more than keep_last rows: none is beyond them.
          IF keep_from IS NULL THEN RETURN 0; END IF;
        END IF;
        PERFORM set_config('kairos.pruning', 'on', true);
        DELETE FROM ${s}.processed_items WHERE id IN (
          SELECT id FROM ${s}.processed_items
          WHERE (older_than IS NULL OR created_at < older_than)
            AND (keep_from IS NULL OR id <= keep_from)
          ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM set_config('kairos.pruning', 'off', true);
        RETURN n;
      END
      $fn$`
    yield* sql`
      CREATE FUNCTION ${s}.kairos_prune_runs(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        n int;
      BEGIN
        IF keep_last IS NOT NULL THEN
          SELECT id INTO keep_from FROM ${s}.job_runs WHERE status IN ('success', 'failed', 'skipped')
            ORDER BY id DESC OFFSET greatest(keep_last, 0) LIMIT 1;
          IF keep_from IS NULL THEN RETURN 0; END IF;
        END IF;
        -- Finished runs only: a pending or running run (and the slot it stands for) is never pruned.
        DELETE FROM ${s}.job_runs WHERE id IN (
          SELECT id FROM ${s}.job_runs
          WHERE status IN ('success', 'failed', 'skipped')
            AND (older_than IS NULL OR finished_at < older_than)
            AND (keep_from IS NULL OR id <= keep_from)
          ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
      END
      $fn$`
  })

/**
 * When a recorded execution was its item's last run: the item is deleted, else kept. As shipped up to 0015, a
 * `max_runs` of -1 (forever) matched too, so a row changed by SQL to run forever while it ran was deleted after that
 * run; from 0016 it is kept. (Other values below 1 count as 1, as the contract says.)
 */
const lastRunAsShipped = "i.max_runs <= 1 AND i.in_flight <= 1"
const lastRun = "i.max_runs <= 1 AND i.max_runs <> -1 AND i.in_flight <= 1"

/**
 * How a recorded execution leaves an item it does not delete (`r`: the failures retried, by item id): one run fewer
 * in flight, one more done, the retry's delay or the runs left counted down. Set by 0009's record and by 0014's.
 */
const keptColumns = `            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 OR r.item_id IS NOT NULL THEN i.max_runs
              ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = CASE WHEN r.item_id IS NOT NULL THEN i.failures + 1 ELSE 0 END,
            run_after = coalesce(r.retry_at, i.run_after),
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,`

/**
 * kairos_record_once from its log row on, as 0009 wrote it: the log, the retries, the items deleted or kept. 0013's
 * overload (without task types and payloads) ends the same way; only how the held leases are found differs.
 */
const recordOnceRest = (sql: SqlClient.SqlClient, schema: string, last = lastRunAsShipped) => {
  const s = sql(schema)
  const isLast = sql.literal(last)
  return sql`        ), log AS (
          INSERT INTO ${s}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
          FROM l
        ), r AS (
          -- Failures with an attempt left, and when they run again. Only failures are looked at: a batch of
          -- successes (the hot path) costs what it did before retries.
          SELECT l.item_id, l.finished_at + ${s}.kairos_retry_delay_ms(e.backoff_ms, e.exponential, e.max_backoff_ms,
            i.failures) * interval '1 millisecond' AS retry_at
          FROM l JOIN ${s}.queue_items i ON i.id = l.item_id
          CROSS JOIN LATERAL ${s}.kairos_retry_policy(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
            i.retry_max_backoff_ms, l.attempts, l.backoff_ms, l.exponential, l.max_backoff_ms) AS e
          WHERE l.status = 'error' AND i.failures + 1 < e.attempts
        ), gone AS (
          DELETE FROM ${s}.queue_items i USING l
          WHERE i.id = l.item_id AND ${isLast}
            AND NOT EXISTS (SELECT 1 FROM r WHERE r.item_id = l.item_id)
        ), kept AS (
          UPDATE ${s}.queue_items i SET
${sql.literal(keptColumns)}
            updated_at = now()
          FROM l LEFT JOIN r ON r.item_id = l.item_id
          WHERE i.id = l.item_id AND (r.item_id IS NOT NULL OR NOT (${isLast}))
        )
        SELECT l.id FROM l;
      END
      $fn$`
}

const migration0009 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // The numbers are Retry's, written out so this migration stays as it was applied: MAX_ATTEMPTS 1000,
    // MAX_BACKOFF_MS a year of 366 days, DEFAULT_DELAY_MS a second, DEFAULT_MAX_MS an hour.
    //
    // Retries for queue items. An item's own policy (NULL attempts: its task type's, which the runner passes with
    // each result) and the failed attempts at its current run. Plain SQL may set some columns only: see
    // Retry.fromColumns for how NULLs read. Out-of-range values are refused at insert, the constraint naming why.
    yield* sql`ALTER TABLE ${s}.queue_items
      ADD COLUMN retry_attempts int,
      ADD COLUMN retry_backoff_ms bigint,
      ADD COLUMN retry_exponential boolean,
      ADD COLUMN retry_max_backoff_ms bigint,
      ADD COLUMN failures int NOT NULL DEFAULT 0`
    yield* sql`ALTER TABLE ${s}.queue_items
      ADD CONSTRAINT queue_items_retry_attempts_from_1_to_1000 CHECK (retry_attempts BETWEEN 1 AND 1000),
      ADD CONSTRAINT queue_items_retry_backoff_from_0_to_a_year
        CHECK (retry_backoff_ms BETWEEN 0 AND 31622400000
          AND retry_max_backoff_ms BETWEEN 0 AND 31622400000),
      ADD CONSTRAINT queue_items_failures_not_negative CHECK (failures >= 0)`
    // What recording one execution does to its item, as Retry.settle says for one execution at a time: the
    // effective policy (the item's own, else the task type's passed in), then retry (the item stays, waits the
    // backoff from its finish, and uses up no run) or use up a run (failures reset; deleted after its last).
    yield* sql`
      CREATE FUNCTION ${s}.kairos_retry_delay_ms(base bigint, exponential boolean, max_ms bigint, failures_before int)
      RETURNS double precision LANGUAGE sql IMMUTABLE AS $fn$
        SELECT CASE WHEN exponential THEN least(max_ms, base * power(2, least(failures_before, 40))) ELSE base END
      $fn$`
    yield* sql`
      CREATE FUNCTION ${s}.kairos_retry_policy(
        item_attempts int, item_backoff_ms bigint, item_exponential boolean, item_max_backoff_ms bigint,
        type_attempts int, type_backoff_ms bigint, type_exponential boolean, type_max_backoff_ms bigint,
        OUT attempts int, OUT backoff_ms bigint, OUT exponential boolean, OUT max_backoff_ms bigint
      ) LANGUAGE sql IMMUTABLE AS $fn$
        SELECT CASE WHEN item_attempts IS NULL THEN type_attempts ELSE item_attempts END,
          CASE WHEN item_attempts IS NULL THEN type_backoff_ms ELSE coalesce(item_backoff_ms, 1000) END,
          e.exp,
          CASE WHEN item_attempts IS NULL THEN type_max_backoff_ms
            ELSE coalesce(item_max_backoff_ms, CASE WHEN e.exp
              THEN greatest(coalesce(item_backoff_ms, 1000), 3600000)
              ELSE coalesce(item_backoff_ms, 1000) END) END
        FROM (SELECT CASE WHEN item_attempts IS NULL THEN type_exponential
          ELSE coalesce(item_exponential, item_backoff_ms IS NULL) END AS exp) e
      $fn$`
    // The record of run-once executions (0004), now with the task types' policies as four more arrays.
    yield* sql`DROP FUNCTION ${s}.kairos_record_once(bigint[], text[], text[], text[], text[], text[], timestamptz[],
      timestamptz[], int[])`
    yield* sql`
      CREATE FUNCTION ${s}.kairos_record_once(
        p_lease_ids bigint[], p_tokens text[], p_task_types text[], p_payloads text[], p_statuses text[],
        p_errors text[], p_started timestamptz[], p_finished timestamptz[], p_durations int[], p_attempts int[],
        p_backoff_ms bigint[], p_exponential boolean[], p_max_backoff_ms bigint[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
      BEGIN
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_task_types, p_payloads, p_statuses, p_errors, p_started, p_finished, p_durations,
            p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms
          ) AS x(lease_id, token, task_type, payload, status, error_msg, started_at, finished_at, duration_ms,
            attempts, backoff_ms, exponential, max_backoff_ms)
        ), l AS (
          -- The input's columns come back with each lease held: no join of the two afterwards (its planner
          -- estimates, a row or ten for each, made it a nested loop, quadratic in the batch).
          DELETE FROM ${s}.queue_leases q USING input x WHERE q.id = x.lease_id AND q.token = x.token
            AND EXISTS (SELECT 1 FROM ${s}.queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id, x.task_type, x.payload, x.status, x.error_msg, x.started_at, x.finished_at,
            x.duration_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms
${recordOnceRest(sql, schema)}`
    // The record of run-once executions and a claim, in one call, as two statements: the claim's fresh snapshot
    // sees the record (a sequential type's slot freed by it), so the chain result -> next item of the type costs one
    // round trip. Recorded lease ids come as rows with only `recorded` set; claimed executions with it NULL.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_record_and_claim(
        p_lease_ids bigint[], p_tokens text[], p_task_types text[], p_payloads text[], p_statuses text[],
        p_errors text[], p_started timestamptz[], p_finished timestamptz[], p_durations int[], p_attempts int[],
        p_backoff_ms bigint[], p_exponential boolean[], p_max_backoff_ms bigint[],
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql AS $fn$
      BEGIN
        RETURN QUERY SELECT r, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
          NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
          NULL::text, NULL::bigint, NULL::text, NULL::int
        FROM ${s}.kairos_record_once(p_lease_ids, p_tokens, p_task_types, p_payloads, p_statuses, p_errors, p_started,
          p_finished, p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        RETURN QUERY SELECT NULL::bigint, c.* FROM ${s}.kairos_claim(p_types, p_limit, p_owner, p_now, p_lease_until,
          p_repeat_after) AS c;
      END
      $fn$`
  })

/** How kairos_claim's UPDATE finds the planned rows since 0010: by primary key, from two arrays. */
const updatePlannedById =
  "FROM unnest(ARRAY(SELECT pl.id FROM planned pl), ARRAY(SELECT pl.n FROM planned pl)) AS p(id, n) " +
  "WHERE i.id = p.id"

/** A lease token since 0013: 52 random bits from the session's generator (see migration0013). */
const randomToken = "to_hex((random() * 4503599627370496)::bigint)"

const migration0010 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // The claim's UPDATE joined the planned rows to queue_items; under the function's generic plan (the planned rows
    // estimated in thousands) that join was a hash join over a sequential scan of the whole queue: a claim of 20
    // items cost ~10 ms with 40,000 queued, growing with the backlog. The planned ids and counts now come as two
    // arrays, estimated as a few rows, so each row is found through the primary key: flat in the queue's size.
    yield* claimFunction(sql, schema, sql.literal(updatePlannedById), "CREATE OR REPLACE")
  })

/**
 * 0011's choice of a chain's next item, into `c` (or RETURN when there is none): the best claimable concurrent item,
 * and the next sequential one when the type is free and its lock taken, whichever comes first in queue order. Shared
 * by 0011's kairos_record_and_claim_next and 0016's overload.
 */
const chainNextChoice = (sql: SqlClient.SqlClient, schema: string) => {
  const s = sql(schema)
  const seqLock = sql.literal(`'kairos.seq.${schema}.'`)
  return sql`        -- Room for another run implies the claimable index's predicate: that index is used.
        SELECT i.* INTO c1 FROM ${s}.queue_items i
        WHERE i.task_type = p_type AND i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)
          AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
        ORDER BY i.priority DESC, i.seq LIMIT 1
        FOR UPDATE SKIP LOCKED;
        has1 := FOUND;
        -- The type's slot is looked at before its lock is tried: a busy type's lock is never held for nothing.
        IF NOT EXISTS (
          SELECT 1 FROM ${s}.queue_items b WHERE b.task_type = p_type AND b.status = 'processing' AND b.thread = 0
        ) AND pg_try_advisory_xact_lock(hashtext(${seqLock} || p_type)) THEN
          SELECT i.* INTO c0 FROM ${s}.queue_items i
          WHERE i.task_type = p_type AND i.thread = 0 AND i.in_flight = 0
            AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
          ORDER BY i.priority DESC, i.seq LIMIT 1
          FOR UPDATE SKIP LOCKED;
          has0 := FOUND;
        END IF;
        IF has1 AND (NOT has0 OR c1.priority > c0.priority
            OR (c1.priority = c0.priority AND (c1.seq, c1.id) < (c0.seq, c0.id))) THEN
          c := c1;
        ELSIF has0 THEN
          c := c0;
        ELSE
          RETURN;
        END IF;`
}

/**
 * 0011's record of one success held by a lease row, into `v_recorded` (NULL when the lease was not held): the lease
 * deleted (fenced by its token), the log row, then the item deleted after its last run (`last`) or kept as a finished
 * run. 0016's chain step records a lease row the same way, `indent` deeper, with its own `last`.
 */
const leaseRowRecordOne = (schema: string, last: string, indent = "") =>
  `        WITH l AS (
          DELETE FROM "${schema}".queue_leases q WHERE q.id = p_lease_id AND q.token = p_token
            AND EXISTS (SELECT 1 FROM "${schema}".queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id
        ), log AS (
          INSERT INTO "${schema}".processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT i.id, i.task_type, i.payload, 'ok', '', p_started, p_finished, p_duration
          FROM l JOIN "${schema}".queue_items i ON i.id = l.item_id
        ), gone AS (
          DELETE FROM "${schema}".queue_items i USING l
          WHERE i.id = l.item_id AND ${last}
        ), kept AS (
          UPDATE "${schema}".queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 THEN i.max_runs ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = 0,
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            updated_at = now()
          FROM l WHERE i.id = l.item_id AND NOT (${last})
        )
        SELECT l.id INTO v_recorded FROM l;`
    .split("\n")
    .map((line) => (line === "" ? line : indent + line))
    .join("\n")

/**
 * The start of kairos_record_and_claim_next, up to its BEGIN: 0011's, and 0016's overload that takes `p_row_leases`.
 */
const chainStepHead = (sql: SqlClient.SqlClient, schema: string, rowLeases: boolean) => {
  const s = sql(schema)
  const rowLeasesParam = sql.literal(rowLeases ? ",\n        p_row_leases boolean" : "")
  return sql`CREATE FUNCTION ${s}.kairos_record_and_claim_next(
        p_lease_id bigint, p_token text, p_started timestamptz, p_finished timestamptz, p_duration int,
        p_type text, p_owner text, p_now timestamptz, p_lease_until timestamptz, p_repeat_after timestamptz${rowLeasesParam}
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET jit = off AS $fn$
      #variable_conflict use_column
      DECLARE
        v_recorded bigint;
        c1 ${s}.queue_items%ROWTYPE;
        c0 ${s}.queue_items%ROWTYPE;
        c ${s}.queue_items%ROWTYPE;
        has1 boolean;
        has0 boolean := false;
        v_lease bigint;
        v_token text;
      BEGIN`
}

/** The end of kairos_record_and_claim_next (0011's and 0016's): the claimed item `c` returned with its lease. */
const chainStepTail = `        id := c.id; task_type := c.task_type; payload := c.payload; status := c.status; priority := c.priority;
        max_runs := c.max_runs; thread := c.thread; runs_done := c.runs_done; runs_started := c.runs_started;
        run_after := c.run_after; created_at := c.created_at; updated_at := c.updated_at; in_flight := c.in_flight;
        seq := c.seq; unique_key := c.unique_key; lease_id := v_lease; token := v_token;
        attempt := c.runs_started + 1;
        RETURN NEXT;
      END`

const migration0011 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    const seqName = sql.literal(`'${schema}.queue_items_seq'`)
    // A chain of sequential items records one success and claims its type's next item, once per item. Through
    // kairos_record_and_claim that is two nested functions of set-based CTEs built for batches, most of whose cost
    // for one item is starting their plans; here it is a handful of single-row statements (measured with plain pg,
    // round trip included: a step takes about two thirds of the time it took).
    //
    // The record is kairos_record_once's for one success (its log row takes the task type and payload from the item
    // row, so the client sends neither). The claim is kairos_claim(ARRAY[p_type], 1, ...) for one type:
    // the best claimable concurrent item, and the next sequential one when the type is free and its lock taken,
    // whichever comes first in queue order. Rows as kairos_record_and_claim's: the recorded lease, then the claim.
    yield* sql`
      ${chainStepHead(sql, schema, false)}
        -- kairos_record_once for one success, its retry step left out. The lease goes first (fenced by its token),
        -- then the item: deleted after its last run, else updated as a finished run, each condition checked again on
        -- the row's latest version, so an item changed meanwhile (by SQL, or by another instance taking back its
        -- lease) is never left in flight without a lease.
${sql.literal(leaseRowRecordOne(schema, lastRunAsShipped))}
        IF v_recorded IS NOT NULL THEN
          recorded := v_recorded;
          RETURN NEXT;
          recorded := NULL;
        END IF;

${chainNextChoice(sql, schema)}

        UPDATE ${s}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
          status = 'processing', updated_at = p_now,
          run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
          seq = CASE WHEN i.max_runs = -1 THEN nextval(${seqName}::regclass) ELSE i.seq END
        WHERE i.id = c.id;
        INSERT INTO ${s}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        VALUES (c.id, gen_random_uuid()::text, p_owner, p_now, p_lease_until, c.runs_started + 1)
        RETURNING q.id, q.token INTO v_lease, v_token;
${sql.literal(chainStepTail)}
      $fn$`
  })

const migration0012 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // The normalising trigger runs only for a row it would change. A row from the API is normal already, and a
    // PL/pgSQL call per row was a fifth of a bulk insert's time; this condition is evaluated without one. It lists
    // exactly what kairos_queue_items_normalize (0003) rewrites.
    yield* sql`DROP TRIGGER queue_items_normalize ON ${s}.queue_items`
    yield* sql`
      CREATE TRIGGER queue_items_normalize BEFORE INSERT ON ${s}.queue_items
      FOR EACH ROW WHEN (
        NEW.max_runs IS NULL OR NOT (NEW.max_runs = -1 OR NEW.max_runs >= 1)
        OR (NEW.thread IS DISTINCT FROM 0 AND NEW.thread IS DISTINCT FROM 1)
        OR NEW.priority IS NULL
        OR NEW.status IS DISTINCT FROM 'pending'
        OR NEW.in_flight IS DISTINCT FROM 0 OR NEW.runs_done IS DISTINCT FROM 0 OR NEW.runs_started IS DISTINCT FROM 0
        OR NEW.created_at IS NULL OR NEW.updated_at IS NULL
      ) EXECUTE FUNCTION ${s}.kairos_queue_items_normalize()`
  })

/**
 * The start of a function that records a batch of results given as eleven arrays (0013's kairos_record_once, 0014's
 * kairos_record_row_leases): its parameters, and the arrays as the rows of `input`.
 */
const recordFunctionHead = (
  sql: SqlClient.SqlClient,
  schema: string,
  name: string,
  create: "CREATE" | "CREATE OR REPLACE" = "CREATE",
  prelude: Statement.Fragment = sql.literal("      BEGIN")
) => {
  const s = sql(schema)
  return sql`${sql.literal(create)} FUNCTION ${s}.${sql.literal(name)}(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
${prelude}
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished, p_durations, p_attempts, p_backoff_ms,
            p_exponential, p_max_backoff_ms
          ) AS x(lease_id, token, status, error_msg, started_at, finished_at, duration_ms, attempts, backoff_ms,
            exponential, max_backoff_ms)`
}

/** 0013's overload of kairos_record_once: the held leases found with their items' task types and payloads. */
const recordOnceFunction = (
  sql: SqlClient.SqlClient,
  schema: string,
  create: "CREATE" | "CREATE OR REPLACE",
  last = lastRunAsShipped
) => {
  const s = sql(schema)
  return sql`
      ${recordFunctionHead(sql, schema, "kairos_record_once", create)}
        ), l AS (
          DELETE FROM ${s}.queue_leases q USING input x, ${s}.queue_items i
          WHERE q.id = x.lease_id AND q.token = x.token AND i.id = q.item_id
          RETURNING q.id, q.item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at, x.finished_at,
            x.duration_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms
${recordOnceRest(sql, schema, last)}`
}

const migration0013 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // A lease's token is 52 random bits from the session's generator, not a UUID: gen_random_uuid() reads the
    // system's strong random source, ~2.7 us a call on this machine kind, a quarter of a claim of 500 (measured:
    // 459 -> 349 ms for 20,000 items claimed 500 at a time). The token fences an execution together with its
    // lease's id, which is never reused; it needs to differ, not to be secret.
    yield* claimFunction(sql, schema, sql.literal(updatePlannedById), "CREATE OR REPLACE", randomToken)
    // Recording run-once executions without their task types and payloads: the log row takes both from the item
    // row (as kairos_record_and_claim_next does), so a batch no longer sends every payload back to the server.
    // New overloads with two arrays fewer; those of 0009 stay, for instances not yet upgraded.
    yield* recordOnceFunction(sql, schema, "CREATE")
    yield* sql`
      CREATE FUNCTION ${s}.kairos_record_and_claim(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[],
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql AS $fn$
      BEGIN
        RETURN QUERY SELECT r, NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
          NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
          NULL::text, NULL::bigint, NULL::text, NULL::int
        FROM ${s}.kairos_record_once(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished, p_durations,
          p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        RETURN QUERY SELECT NULL::bigint, c.* FROM ${s}.kairos_claim(p_types, p_limit, p_owner, p_now, p_lease_until,
          p_repeat_after) AS c;
      END
      $fn$`
  })

/**
 * Since 0017, kairos_record_row_leases first records a batch without failures the short way: it deletes the items of
 * their last runs and logs them in one statement, and returns when that recorded every result (the common batch of a
 * drain). Only a batch with a failure, or one left with results it did not record (an item kept to run again, a lost
 * lease, a lease id sent twice), goes on to the general statement, which finds nothing left of what the first deleted.
 */
const successesFirstPrelude = (sql: SqlClient.SqlClient, schema: string, last: string) => {
  const s = sql(schema)
  return sql`      DECLARE
        v_recorded bigint;
      BEGIN
        IF NOT ('error' = ANY(p_statuses)) THEN
          RETURN QUERY
          WITH gone AS (
            DELETE FROM ${s}.queue_items i
            USING unnest(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished, p_durations)
              AS x(lease_id, token, status, error_msg, started_at, finished_at, duration_ms)
            WHERE i.id = -x.lease_id AND i.lease_token = x.token AND ${sql.literal(last)}
            RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
              x.finished_at, x.duration_ms
          ), log AS (
            INSERT INTO ${s}.processed_items
              (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
            SELECT g.item_id, g.task_type, g.payload, g.status, g.error_msg, g.started_at, g.finished_at, g.duration_ms
            FROM gone g
          )
          SELECT g.lease_id FROM gone g;
          GET DIAGNOSTICS v_recorded = ROW_COUNT;
          IF v_recorded = cardinality(p_lease_ids) THEN
            RETURN;
          END IF;
        END IF;`
}

/**
 * kairos_record_row_leases: records executions that hold row leases (their lease ids are their items' ids negated),
 * fenced by the token on the row: as kairos_record_once records, the item deleted or kept (a retry, or a row changed by
 * SQL to run again) with its lease cleared. `keptFrom` is the input of the update that keeps items (0014: every
 * result; 0015: those whose item was not deleted).
 */
const recordRowLeasesFunction = (
  sql: SqlClient.SqlClient,
  schema: string,
  create: "CREATE" | "CREATE OR REPLACE",
  keptFrom: string,
  last = lastRunAsShipped,
  successesFirst = false
) => {
  const s = sql(schema)
  const isLast = sql.literal(last)
  const prelude = successesFirst ? successesFirstPrelude(sql, schema, last) : undefined
  return sql`
      ${recordFunctionHead(sql, schema, "kairos_record_row_leases", create, prelude)}
        ), r AS (
          -- Failures with an attempt left, and when they run again. Only failures are looked at.
          SELECT i.id AS item_id, x.finished_at + ${s}.kairos_retry_delay_ms(e.backoff_ms, e.exponential,
            e.max_backoff_ms, i.failures) * interval '1 millisecond' AS retry_at
          FROM input x JOIN ${s}.queue_items i ON i.id = -x.lease_id AND i.lease_token = x.token
          CROSS JOIN LATERAL ${s}.kairos_retry_policy(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
            i.retry_max_backoff_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms) AS e
          WHERE x.status = 'error' AND i.failures + 1 < e.attempts
        ), gone AS (
          DELETE FROM ${s}.queue_items i USING input x
          WHERE i.id = -x.lease_id AND i.lease_token = x.token AND ${isLast}
            AND NOT EXISTS (SELECT 1 FROM r WHERE r.item_id = i.id)
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), kept AS (
          UPDATE ${s}.queue_items i SET
${sql.literal(keptColumns)}
            lease_token = NULL, lease_owner = NULL, lease_until = NULL,
            updated_at = now()
          FROM ${sql.literal(keptFrom)} LEFT JOIN r ON r.item_id = -x.lease_id
          WHERE i.id = -x.lease_id AND i.lease_token = x.token
            AND (r.item_id IS NOT NULL OR NOT (${isLast}))
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), l AS (
          SELECT * FROM gone UNION ALL SELECT * FROM kept
        ), log AS (
          INSERT INTO ${s}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
          FROM l
        )
        SELECT l.lease_id FROM l;
      END
      $fn$`
}

const migration0014 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    // An execution of a run-once concurrent item (thread 1, max_runs 1: the bulk of a queue) holds its lease on the
    // item row: no lease row is inserted at its claim and deleted at its record, which was a third of Postgres's
    // work per item (measured in a bare loop of claims and records of 500 on the machine's Postgres: 41.5 -> 31.5 us
    // an item). Executions of items that run more than once, and sequential ones, keep their rows in queue_leases:
    // each in-flight repetition holds its own lease there. The index finds expired row leases for the rescue.
    yield* sql`ALTER TABLE ${s}.queue_items ADD COLUMN lease_token text, ADD COLUMN lease_owner text,
      ADD COLUMN lease_until timestamptz`
    yield* sql`CREATE INDEX queue_items_leased ON ${s}.queue_items (lease_until) WHERE lease_token IS NOT NULL`
    // The claim that takes row leases is a new overload (p_row_leases); the one of 0013 stays for instances not yet
    // upgraded, and for kairos_record_and_claim, which claims through it.
    yield* claimFunction(sql, schema, sql.literal(updatePlannedById), "CREATE", randomToken, "concurrent")
    yield* recordRowLeasesFunction(sql, schema, "CREATE", "input x")
  })

/** 0015's input of the update that keeps items: the results whose item the DELETE did not return. */
const resultsNotDeleted =
  "(SELECT * FROM input y WHERE NOT EXISTS (SELECT 1 FROM gone g WHERE g.lease_id = y.lease_id)) x"

const migration0015 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // The update that keeps items (a retry, a row changed by SQL to run again) looked up every result's item by its
    // key only to keep none in the common batch of run-once successes, all deleted by the statement's DELETE: it now
    // takes only the results whose item that DELETE did not return (a bare loop of claims and records of 500 on the
    // machine's Postgres: the record ~7 % cheaper). Same rows written: an item the DELETE deleted matches neither
    // update (its row is gone for the statement), and one it did not is looked at as before.
    yield* recordRowLeasesFunction(sql, schema, "CREATE OR REPLACE", resultsNotDeleted)
  })

const migration0016 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const s = sql(schema)
    const token = sql.literal(randomToken)
    const isLast = sql.literal(lastRun)
    // The claim's columns of a row that reports a recorded lease.
    const noClaim = sql.literal(`NULL::bigint, NULL::text, NULL::text, NULL::text, NULL::int, NULL::int, NULL::int,
            NULL::int, NULL::int, NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::int, NULL::bigint,
            NULL::text, NULL::bigint, NULL::text, NULL::int`)
    // A run-once sequential item's execution holds its lease on the item row, as a run-once concurrent one's does
    // since 0014: a chain of sequential items inserted and deleted a lease row per item, with three index entries,
    // in statements of their own (a bare loop of chain steps on the machine's Postgres: ~380 -> ~300 us of server
    // CPU a step). The claim of 0014 is replaced in place: an instance not yet upgraded records such leases with
    // kairos_record_row_leases, as it does a concurrent item's, and claims its chain's next item in a second
    // statement.
    yield* claimFunction(sql, schema, sql.literal(updatePlannedById), "CREATE OR REPLACE", randomToken, "run-once")
    // An item changed by SQL to run forever while it ran is kept after that run, not deleted (see lastRun): the
    // record functions in use are replaced with that condition. (0009's and 0011's, which only instances not yet
    // upgraded past them call, keep theirs.)
    yield* recordOnceFunction(sql, schema, "CREATE OR REPLACE", lastRun)
    yield* recordRowLeasesFunction(sql, schema, "CREATE OR REPLACE", resultsNotDeleted, lastRun)
    // The chain's step for both kinds of lease: a negative lease id is an item row's (its id negated). A new overload
    // (p_row_leases), so an instance not yet upgraded keeps 0011's, which it calls with lease rows only. The lease
    // row of an execution that holds one takes a token as the claim's do (0013), not a UUID.
    yield* sql`
      ${chainStepHead(sql, schema, true)}
        IF p_lease_id < 0 THEN
          -- A lease on the item row, fenced by its token: the item deleted after its last run (the common case, one
          -- statement), else, in a second one, kept as a finished run with its lease cleared (a row changed by SQL
          -- to run again while it ran). The log row takes the task type and payload from the item row.
          WITH gone AS (
            DELETE FROM ${s}.queue_items i
            WHERE i.id = -p_lease_id AND i.lease_token = p_token AND ${isLast}
            RETURNING i.id, i.task_type, i.payload
          ), log AS (
            INSERT INTO ${s}.processed_items
              (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
            SELECT g.id, g.task_type, g.payload, 'ok', '', p_started, p_finished, p_duration FROM gone g
          )
          SELECT -g.id INTO v_recorded FROM gone g;
          IF v_recorded IS NULL THEN
            WITH kept AS (
              UPDATE ${s}.queue_items i SET
                in_flight = greatest(0, i.in_flight - 1),
                max_runs = CASE WHEN i.max_runs = -1 THEN i.max_runs ELSE greatest(0, i.max_runs - 1) END,
                runs_done = i.runs_done + 1,
                failures = 0,
                status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
                lease_token = NULL, lease_owner = NULL, lease_until = NULL,
                updated_at = now()
              WHERE i.id = -p_lease_id AND i.lease_token = p_token
              RETURNING i.id, i.task_type, i.payload
            ), log AS (
              INSERT INTO ${s}.processed_items
                (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
              SELECT k.id, k.task_type, k.payload, 'ok', '', p_started, p_finished, p_duration FROM kept k
            )
            SELECT -k.id INTO v_recorded FROM kept k;
          END IF;
        ELSE
          -- A lease row: 0011's record.
${sql.literal(leaseRowRecordOne(schema, lastRun, "  "))}
        END IF;
        IF v_recorded IS NOT NULL THEN
          recorded := v_recorded;
          RETURN NEXT;
          recorded := NULL;
        END IF;

${chainNextChoice(sql, schema)}

        v_token := ${token};
        IF p_row_leases AND c.max_runs = 1 AND c.in_flight = 0 THEN
          -- One execution of a run-once item: its lease on the row.
          UPDATE ${s}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            lease_token = v_token, lease_owner = p_owner, lease_until = p_lease_until
          WHERE i.id = c.id;
          v_lease := -c.id;
        ELSE
          UPDATE ${s}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
            status = 'processing', updated_at = p_now,
            run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
            seq = CASE WHEN i.max_runs = -1 THEN nextval(${sql.literal(`'${schema}.queue_items_seq'`)}::regclass)
              ELSE i.seq END
          WHERE i.id = c.id;
          INSERT INTO ${s}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
          VALUES (c.id, v_token, p_owner, p_now, p_lease_until, c.runs_started + 1)
          RETURNING q.id INTO v_lease;
        END IF;
${sql.literal(chainStepTail)}
      $fn$`
    // A batch of run-once results and a claim in one call, as 0013's kairos_record_and_claim, for both kinds of
    // lease: each result is recorded by the function of its kind (a row lease's id is negative, and the other
    // function finds nothing for it), and the claim takes row leases. A new overload: an instance not yet upgraded
    // keeps 0013's.
    yield* sql`
      CREATE FUNCTION ${s}.kairos_record_and_claim(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[],
        p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
        p_repeat_after timestamptz, p_row_leases boolean
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql AS $fn$
      DECLARE
        v_on_rows boolean;
        v_in_rows boolean;
      BEGIN
        SELECT bool_or(l < 0), bool_or(l > 0) INTO v_on_rows, v_in_rows FROM unnest(p_lease_ids) AS l;
        IF v_on_rows THEN
          RETURN QUERY SELECT r, ${noClaim}
          FROM ${s}.kairos_record_row_leases(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished,
            p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        END IF;
        IF v_in_rows THEN
          RETURN QUERY SELECT r, ${noClaim}
          FROM ${s}.kairos_record_once(p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished,
            p_durations, p_attempts, p_backoff_ms, p_exponential, p_max_backoff_ms) AS r;
        END IF;
        RETURN QUERY SELECT NULL::bigint, c.* FROM ${s}.kairos_claim(p_types, p_limit, p_owner, p_now, p_lease_until,
          p_repeat_after, p_row_leases) AS c;
      END
      $fn$`
  })

const migration0017 = (schema: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // The record of a batch of run-once successes, the bulk of a drain, in one short statement (a delete of the items
    // and an insert of their log rows) instead of the general one, which also looks for retries and for items to
    // keep, and returns their union: measured in a loop of claims and records inside the machine's Postgres, the
    // record 12.5 -> 9 us an item in batches of 1,000 and 22 -> 16.5 us in batches of 20. The general statement, as
    // 0016 left it, handles whatever the short one did not record. Replaced in place: its callers do not change.
    yield* recordRowLeasesFunction(sql, schema, "CREATE OR REPLACE", resultsNotDeleted, lastRun, true)
  })

/** The migrations of a schema, by id. */
export const migrations = (schema: string) => ({
  "0001_scheduled_jobs": named("0001_scheduled_jobs", migration0001(schema)),
  "0002_queue": named("0002_queue", migration0002(schema)),
  "0003_pipeline": named("0003_pipeline", migration0003(schema)),
  "0004_lean_leases": named("0004_lean_leases", migration0004(schema)),
  "0005_bad_rows": named("0005_bad_rows", migration0005(schema)),
  "0006_unfinished_runs": named("0006_unfinished_runs", migration0006(schema)),
  "0007_delayed_unique_items": named("0007_delayed_unique_items", migration0007(schema)),
  "0008_retention": named("0008_retention", migration0008(schema)),
  "0009_item_retries": named("0009_item_retries", migration0009(schema)),
  "0010_claim_by_index": named("0010_claim_by_index", migration0010(schema)),
  "0011_record_and_claim_next": named("0011_record_and_claim_next", migration0011(schema)),
  "0012_normalize_when_needed": named("0012_normalize_when_needed", migration0012(schema)),
  "0013_lighter_claims_and_records": named("0013_lighter_claims_and_records", migration0013(schema)),
  "0014_row_leases": named("0014_row_leases", migration0014(schema)),
  "0015_lighter_row_lease_records": named("0015_lighter_row_lease_records", migration0015(schema)),
  "0016_sequential_row_leases": named("0016_sequential_row_leases", migration0016(schema)),
  "0017_record_successes_first": named("0017_record_successes_first", migration0017(schema))
})

/**
 * Creates or upgrades kairos's tables in the schema. Idempotent, and safe when several processes start at once:
 * @effect/sql's Migrator alone is not (its table check races), so it runs under a per-schema advisory lock held
 * by an enclosing transaction, with `CREATE SCHEMA IF NOT EXISTS` inside it.
 * Returns the migrations applied now (empty when up to date).
 */
export const migrate = (
  options: PgOptions = {}
): Effect.Effect<ReadonlyArray<readonly [id: number, name: string]>, MigrationError, SqlClient.SqlClient> =>
  Effect.gen(function* () {
    const schema = schemaName(options)
    const sql = yield* SqlClient.SqlClient
    const run = Migrator.make({})({
      loader: Migrator.fromRecord(migrations(schema)),
      table: `${schema}.kairos_migrations`
    })
    return yield* sql.withTransaction(
      Effect.gen(function* () {
        // A migration may take longer than the sessions' statement timeout (an index on a big table): not this one.
        yield* sql`SET LOCAL statement_timeout = 0`
        yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`kairos.migrate.${schema}`}))`
        yield* sql`CREATE SCHEMA IF NOT EXISTS ${sql(schema)}`
        // The Migrator probes its table with a query that fails when it is missing, which would abort this
        // enclosing transaction: create it first, in the Migrator's own shape.
        yield* sql`
          CREATE TABLE IF NOT EXISTS ${sql(schema)}.kairos_migrations (
            migration_id integer PRIMARY KEY,
            created_at timestamptz NOT NULL DEFAULT now(),
            name text NOT NULL
          )`
        return yield* run
      })
    )
  }).pipe(
    // A failed migration reaches here as a defect (the Migrator dies with it), other failures as errors.
    Effect.catchAllDefect((defect) => Effect.fail(toMigrationError(defect))),
    Effect.mapError((e: SqlError | Migrator.MigrationError | MigrationError) => toMigrationError(e))
  )
