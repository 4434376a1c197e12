
      -- A flow's steps outlive the queue (NOTES.md, 0023): each item written to queue_waiting (every flow step, every
      -- item enqueued with after) leaves a row here, with its step key and the ids it waited for, so that the flow
      -- can be drawn whole once its steps were released, ran, failed, were cancelled or not run. Items that wait for
      -- nothing never come here: plain enqueues write nothing more. Retention removes a row with its item's log.
      CREATE TABLE IF NOT EXISTS {{schema}}.flow_steps (
        id bigint PRIMARY KEY,
        task_type text NOT NULL,
        step_key text,
        after bigint[] NOT NULL,
        created_at timestamptz NOT NULL,
        -- When it left the queue with nothing logged for it (cancelled, or deleted by hand); NULL: it did not.
        cancelled_at timestamptz
      );
      -- What waits for an item (the walk down a flow), as queue_waiting_after; retention walks by age.
      CREATE INDEX IF NOT EXISTS flow_steps_after ON {{schema}}.flow_steps USING gin (after) WITH (fastupdate = off);
      CREATE INDEX IF NOT EXISTS flow_steps_created ON {{schema}}.flow_steps (created_at, id);

      -- One statement per insert into queue_waiting, whatever its row count (a flow of thousands of steps is one).
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_steps_keep() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        INSERT INTO {{schema}}.flow_steps (id, task_type, step_key, after, created_at)
        SELECT n.id, n.task_type, n.step_key, n.after, n.created_at FROM kept n ORDER BY n.id
        ON CONFLICT (id) DO NOTHING;
        RETURN NULL;
      END
      $fn$;
      DROP TRIGGER IF EXISTS queue_waiting_keep_steps ON {{schema}}.queue_waiting;
      CREATE TRIGGER queue_waiting_keep_steps AFTER INSERT ON {{schema}}.queue_waiting
        REFERENCING NEW TABLE AS kept FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.kairos_flow_steps_keep();

      -- A flow item that left the queue: as 0020's, and first, when nothing was logged for it in this transaction
      -- (cancelled or deleted by hand), its step is marked cancelled. Only linked items (flow steps released, items
      -- something waited for) come here: plain items never do.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_item_gone() RETURNS trigger LANGUAGE plpgsql
      SET enable_seqscan = off AS $fn$
      DECLARE
        v_waiters bigint[];
        v_ready bigint[];
        v_status text;
      BEGIN
        -- (created_at is the transaction's start: the same for a row a subtransaction of it wrote.)
        SELECT p.status INTO v_status FROM {{schema}}.processed_items p
          WHERE p.queue_item_id = OLD.id AND (p.xmin = pg_current_xact_id()::xid OR p.created_at = now())
          ORDER BY p.id DESC LIMIT 1;
        IF v_status IS NULL THEN
          UPDATE {{schema}}.flow_steps SET cancelled_at = now() WHERE id = OLD.id;
        END IF;
        SELECT array_agg(w.id ORDER BY w.id) INTO v_waiters FROM {{schema}}.queue_waiting w
          WHERE w.after @> ARRAY[OLD.id];
        IF v_waiters IS NULL THEN
          RETURN NULL;
        END IF;
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

      -- Cancels a waiting item as 0020's, its step marked cancelled.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_flow_cancel(p_id bigint) RETURNS boolean LANGUAGE plpgsql
      SET enable_seqscan = off AS $fn$
      DECLARE
        v_waiters bigint[];
      BEGIN
        DELETE FROM {{schema}}.queue_waiting WHERE id = p_id;
        IF NOT FOUND THEN
          RETURN false;
        END IF;
        UPDATE {{schema}}.flow_steps SET cancelled_at = now() WHERE id = p_id;
        SELECT array_agg(w.id ORDER BY w.id) INTO v_waiters FROM {{schema}}.queue_waiting w WHERE w.after @> ARRAY[p_id];
        IF v_waiters IS NOT NULL THEN
          PERFORM {{schema}}.kairos_flow_doom(v_waiters, p_id, 'was cancelled');
        END IF;
        RETURN true;
      END
      $fn$;

      -- 0008's prune of the log, and then the flow steps that retention has reached: created no later than the cut
      -- (older_than, or the newest log row keep_last lets go), with nothing of their item left in the queue or the
      -- log, and no step kept that waited for them (a step holds the links to what it waited for: a flow goes from its
      -- last steps back, so what is kept of it stays whole). Pass after pass, at most batch steps in all.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_prune_processed(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        reach timestamptz := older_than;
        budget int := batch;
        n int;
        steps int;
      BEGIN
        IF keep_last IS NOT NULL THEN
          SELECT id, created_at INTO keep_from, reach FROM {{schema}}.processed_items
            ORDER BY id DESC OFFSET greatest(keep_last, 0) LIMIT 1;
          -- No more than keep_last rows: none is beyond them.
          IF keep_from IS NULL THEN RETURN 0; END IF;
          reach := least(reach, older_than);
        END IF;
        PERFORM set_config('kairos.pruning', 'on', true);
        DELETE FROM {{schema}}.processed_items WHERE id IN (
          SELECT id FROM {{schema}}.processed_items
          WHERE (older_than IS NULL OR created_at < older_than)
            AND (keep_from IS NULL OR id <= keep_from)
          ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM set_config('kairos.pruning', 'off', true);
        WHILE reach IS NOT NULL AND budget > 0 LOOP
          DELETE FROM {{schema}}.flow_steps WHERE id IN (
            SELECT s.id FROM {{schema}}.flow_steps s
            WHERE s.created_at <= reach
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.processed_items p WHERE p.queue_item_id = s.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = s.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.queue_waiting w WHERE w.id = s.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.flow_steps x WHERE x.after @> ARRAY[s.id])
            ORDER BY s.created_at, s.id LIMIT budget FOR UPDATE SKIP LOCKED);
          GET DIAGNOSTICS steps = ROW_COUNT;
          EXIT WHEN steps = 0;
          budget := budget - steps;
        END LOOP;
        RETURN n;
      END
      $fn$;
      -- As 0018: it runs as the schema's owner (CREATE OR REPLACE reset that).
      ALTER FUNCTION {{schema}}.kairos_prune_processed(timestamptz, bigint, integer)
        SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
