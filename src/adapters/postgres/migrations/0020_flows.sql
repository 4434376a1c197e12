      -- Items that wait for other items (NOTES.md, 0020). A waiting item lives in queue_waiting, outside every claim,
      -- and moves into queue_items (same id) when the last item it waits for finished successfully.
      CREATE TABLE IF NOT EXISTS {{schema}}.queue_waiting (
        id bigint PRIMARY KEY DEFAULT nextval('{{schema}}.queue_items_id_seq'::regclass),
        task_type text NOT NULL,
        payload text,
        priority int NOT NULL DEFAULT 0,
        max_runs int NOT NULL DEFAULT 1,
        thread int NOT NULL DEFAULT 0,
        run_after timestamptz,
        retry_attempts int,
        retry_backoff_ms bigint,
        retry_exponential boolean,
        retry_max_backoff_ms bigint,
        -- The items it waits for, by id; after_keys (a flow's) names each by its step key, for job.inputs.
        after bigint[] NOT NULL DEFAULT '{}',
        after_keys text[],
        step_key text,
        -- How many of them have not finished yet, and the first that failed or was cancelled (set at insert).
        remaining int NOT NULL DEFAULT 0,
        blocked_by bigint,
        created_at timestamptz NOT NULL DEFAULT now(),
        -- The same limits as queue_items: a row that could not move there is refused when it is written.
        CONSTRAINT queue_waiting_retry_attempts_from_1_to_1000 CHECK (retry_attempts BETWEEN 1 AND 1000),
        CONSTRAINT queue_waiting_retry_backoff_from_0_to_a_year CHECK (
          retry_backoff_ms BETWEEN 0 AND 31622400000 AND retry_max_backoff_ms BETWEEN 0 AND 31622400000),
        CONSTRAINT queue_waiting_times_must_be_finite CHECK (isfinite(run_after) AND isfinite(created_at)),
        CONSTRAINT queue_waiting_keys_match CHECK (after_keys IS NULL OR cardinality(after_keys) = cardinality(after))
      );
      -- Who waits for an item: looked up when it finishes. No pending list (fastupdate): every lookup would scan it,
      -- and a flow of thousands of steps fills it in one statement.
      CREATE INDEX IF NOT EXISTS queue_waiting_after ON {{schema}}.queue_waiting USING gin (after)
        WITH (fastupdate = off);

      -- An item something waits for (or that waited): its deletion settles its waiters. False for every other item,
      -- so the trigger below never fires on the plain path.
      ALTER TABLE {{schema}}.queue_items ADD COLUMN IF NOT EXISTS linked boolean NOT NULL DEFAULT false;
      -- A released item's inputs: the outputs of what it waited for, by step key or id.
      ALTER TABLE {{schema}}.queue_items ADD COLUMN IF NOT EXISTS inputs jsonb;
      -- What a successful execution's handler returned (NULL: nothing).
      ALTER TABLE {{schema}}.processed_items ADD COLUMN IF NOT EXISTS output jsonb;

      -- A success's output reaches the log through the record functions' error column (empty for every success):
      -- the record functions, and the claims they make, stay as they are.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_processed_output() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        NEW.output := NEW.error_msg::jsonb;
        NEW.error_msg := '';
        RETURN NEW;
      END
      $fn$;
      DROP TRIGGER IF EXISTS processed_items_output ON {{schema}}.processed_items;
      CREATE TRIGGER processed_items_output BEFORE INSERT ON {{schema}}.processed_items
        FOR EACH ROW WHEN (NEW.status = 'ok' AND NEW.error_msg <> '')
        EXECUTE FUNCTION {{schema}}.kairos_processed_output();

      -- Moves waiting items whose wait is over into queue_items, with their inputs. Every released item is linked:
      -- its deletion settles whatever waits for it, whenever that was enqueued.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_release(p_ids bigint[]) RETURNS void LANGUAGE plpgsql AS $fn$
      BEGIN
        WITH moved AS (
          DELETE FROM {{schema}}.queue_waiting w
          WHERE w.id = ANY(p_ids) AND w.remaining <= 0 AND w.blocked_by IS NULL
          RETURNING w.*
        )
        INSERT INTO {{schema}}.queue_items (id, task_type, payload, priority, max_runs, thread, run_after,
          retry_attempts, retry_backoff_ms, retry_exponential, retry_max_backoff_ms, created_at, updated_at, linked,
          unique_key, inputs)
        SELECT m.id, m.task_type, m.payload, m.priority, m.max_runs, m.thread, m.run_after, m.retry_attempts,
          m.retry_backoff_ms, m.retry_exponential, m.retry_max_backoff_ms, m.created_at, now(), true,
          -- The claim returns unique_key: it tells the runner that this item has inputs to read.
          CASE WHEN cardinality(m.after) > 0 THEN 'kairos:after:' || m.id END,
          CASE WHEN cardinality(m.after) > 0 THEN (
            SELECT jsonb_object_agg(coalesce(m.after_keys[k.n], m.after[k.n]::text), coalesce(o.output, 'null'::jsonb))
            FROM generate_subscripts(m.after, 1) AS k(n)
            LEFT JOIN LATERAL (
              SELECT p.output FROM {{schema}}.processed_items p
              WHERE p.queue_item_id = m.after[k.n] AND p.status = 'ok' ORDER BY p.id DESC LIMIT 1
            ) o ON true) END
        FROM moved m ORDER BY m.id;
      END
      $fn$;

      -- Waiting items that will never run (each for its cause: an item it waited for that failed, was cancelled or
      -- did not run), and transitively what waits for them: each recorded once as an error, and gone.
      -- (No sequential scans: each step of the recursion looks up the waiters of a few items, through the index.)
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_doom(p_ids bigint[], p_cause bigint, p_how text)
      RETURNS void LANGUAGE plpgsql SET enable_seqscan = off AS $fn$
      BEGIN
        WITH RECURSIVE d(id, cause, how) AS (
          SELECT x, p_cause, p_how FROM unnest(p_ids) AS x
          UNION
          SELECT w.id, d.id, 'did not run' FROM d JOIN {{schema}}.queue_waiting w ON w.after @> ARRAY[d.id]
        ), one AS (
          SELECT DISTINCT ON (d.id) d.id, d.cause, d.how FROM d ORDER BY d.id, d.cause
        ), gone AS (
          DELETE FROM {{schema}}.queue_waiting w USING one WHERE w.id = one.id
          RETURNING w.id, w.task_type, w.payload, one.cause, one.how
        )
        INSERT INTO {{schema}}.processed_items
          (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
        SELECT g.id, g.task_type, g.payload, 'error',
          format('not run: it waited for item %s, which %s', g.cause, g.how), now(), now(), 0
        FROM gone g ORDER BY g.id;
      END
      $fn$;

      -- A waiting item being written: each item it names is looked up (queued, waiting, or logged) and locked while
      -- this transaction lasts, so that it cannot finish unseen before this row commits.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_waiting_resolve() RETURNS trigger LANGUAGE plpgsql AS $fn$
      DECLARE
        v_dep bigint;
        v_linked boolean;
        v_live boolean;
        v_status text;
      BEGIN
        IF NEW.after IS NULL THEN NEW.after := '{}'; END IF;
        IF array_position(NEW.after, NULL) IS NOT NULL THEN
          RAISE EXCEPTION 'kairos: after holds a NULL item id' USING ERRCODE = 'foreign_key_violation';
        END IF;
        IF NEW.after_keys IS NULL THEN
          NEW.after := ARRAY(SELECT DISTINCT a FROM unnest(NEW.after) AS a ORDER BY a);
        END IF;
        NEW.remaining := 0;
        NEW.blocked_by := NULL;
        NEW.created_at := coalesce(NEW.created_at, now());
        FOREACH v_dep IN ARRAY NEW.after LOOP
          v_live := false;
          -- An item moves one way only (waiting, queued, gone): two looks in the live tables are enough.
          FOR pass IN 1..2 LOOP
            SELECT i.linked INTO v_linked FROM {{schema}}.queue_items i WHERE i.id = v_dep FOR SHARE;
            IF FOUND THEN
              IF NOT v_linked THEN
                UPDATE {{schema}}.queue_items SET linked = true WHERE id = v_dep;
              END IF;
              v_live := true;
              EXIT;
            END IF;
            PERFORM 1 FROM {{schema}}.queue_waiting w WHERE w.id = v_dep FOR SHARE;
            IF FOUND THEN
              v_live := true;
              EXIT;
            END IF;
          END LOOP;
          IF v_live THEN
            NEW.remaining := NEW.remaining + 1;
            CONTINUE;
          END IF;
          SELECT p.status INTO v_status FROM {{schema}}.processed_items p
            WHERE p.queue_item_id = v_dep ORDER BY p.id DESC LIMIT 1;
          IF NOT FOUND THEN
            RAISE EXCEPTION 'kairos: after names item %, which is unknown (not queued, not waiting, and no execution of it is logged)', v_dep
              USING ERRCODE = 'foreign_key_violation';
          END IF;
          IF v_status <> 'ok' AND NEW.blocked_by IS NULL THEN
            NEW.blocked_by := v_dep;
          END IF;
        END LOOP;
        RETURN NEW;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_waiting_resolve ON {{schema}}.queue_waiting;
      CREATE TRIGGER queue_waiting_resolve BEFORE INSERT ON {{schema}}.queue_waiting
        FOR EACH ROW EXECUTE FUNCTION {{schema}}.kairos_waiting_resolve();

      -- A waiting item with nothing left to wait for moves at once; one naming an item that already failed is
      -- recorded as not run, with what waits for it.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_waiting_ready() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        IF NEW.blocked_by IS NOT NULL THEN
          PERFORM {{schema}}.kairos_flow_doom(ARRAY[NEW.id], NEW.blocked_by, 'failed');
        ELSE
          PERFORM {{schema}}.kairos_flow_release(ARRAY[NEW.id]);
        END IF;
        RETURN NULL;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_waiting_ready ON {{schema}}.queue_waiting;
      CREATE TRIGGER queue_waiting_ready AFTER INSERT ON {{schema}}.queue_waiting
        FOR EACH ROW WHEN (NEW.remaining = 0 OR NEW.blocked_by IS NOT NULL)
        EXECUTE FUNCTION {{schema}}.kairos_waiting_ready();

      -- A linked item left the queue: how it ended is its log row written in this transaction (none: cancelled or
      -- deleted by hand). Success counts down its waiters and releases those with nothing left; anything else dooms
      -- them.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_item_gone() RETURNS trigger LANGUAGE plpgsql
      SET enable_seqscan = off AS $fn$
      DECLARE
        v_waiters bigint[];
        v_ready bigint[];
        v_status text;
      BEGIN
        SELECT array_agg(w.id ORDER BY w.id) INTO v_waiters FROM {{schema}}.queue_waiting w
          WHERE w.after @> ARRAY[OLD.id];
        IF v_waiters IS NULL THEN
          RETURN NULL;
        END IF;
        -- (created_at is the transaction's start: the same for a row a subtransaction of it wrote.)
        SELECT p.status INTO v_status FROM {{schema}}.processed_items p
          WHERE p.queue_item_id = OLD.id AND (p.xmin = pg_current_xact_id()::xid OR p.created_at = now())
          ORDER BY p.id DESC LIMIT 1;
        IF v_status = 'ok' THEN
          WITH d AS (
            UPDATE {{schema}}.queue_waiting w SET remaining = w.remaining - 1
            WHERE w.id = ANY(v_waiters) AND w.blocked_by IS NULL
            RETURNING w.id, w.remaining
          )
          SELECT array_agg(d.id ORDER BY d.id) INTO v_ready FROM d WHERE d.remaining <= 0;
          IF v_ready IS NOT NULL THEN
            PERFORM {{schema}}.kairos_flow_release(v_ready);
          END IF;
        ELSE
          PERFORM {{schema}}.kairos_flow_doom(v_waiters, OLD.id,
            CASE WHEN v_status = 'error' THEN 'failed' ELSE 'was cancelled' END);
        END IF;
        RETURN NULL;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_items_flow_settle ON {{schema}}.queue_items;
      CREATE TRIGGER queue_items_flow_settle AFTER DELETE ON {{schema}}.queue_items
        FOR EACH ROW WHEN (OLD.linked)
        EXECUTE FUNCTION {{schema}}.kairos_flow_item_gone();

      -- Cancels a waiting item: gone unrun (nothing logged for it), and what waits for it is doomed.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_cancel(p_id bigint) RETURNS boolean LANGUAGE plpgsql
      SET enable_seqscan = off AS $fn$
      DECLARE
        v_waiters bigint[];
      BEGIN
        DELETE FROM {{schema}}.queue_waiting WHERE id = p_id;
        IF NOT FOUND THEN
          RETURN false;
        END IF;
        SELECT array_agg(w.id ORDER BY w.id) INTO v_waiters FROM {{schema}}.queue_waiting w WHERE w.after @> ARRAY[p_id];
        IF v_waiters IS NOT NULL THEN
          PERFORM {{schema}}.kairos_flow_doom(v_waiters, p_id, 'was cancelled');
        END IF;
        RETURN true;
      END
      $fn$;
