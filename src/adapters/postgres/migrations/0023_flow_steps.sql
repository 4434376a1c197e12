
      -- A flow's steps outlive the queue (NOTES.md, 0023): each item written to queue_waiting (every flow step, every
      -- item enqueued with after) leaves a row here, with its step key and the ids it waited for, so that the flow
      -- can be drawn whole once its steps were released, ran, failed, were cancelled or not run. Items that wait for
      -- nothing never come here: plain enqueues write nothing more. Retention removes a row with its item's log.
      CREATE TABLE IF NOT EXISTS {{schema}}.flow_steps (
        id bigint PRIMARY KEY,
        task_type text NOT NULL,
        step_key text,
        after bigint[] NOT NULL,
        created_at timestamptz NOT NULL
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

      -- 0008's prune of the log, and then the flow steps that retention has reached: older than the log rows it
      -- prunes (by age, or below the newest keep_last), and with nothing of their item left in the queue or the log.
      -- A step cancelled before it ever ran has no log row: it goes by age alone.
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_prune_processed(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        reach timestamptz := older_than;
        n int;
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
        IF reach IS NOT NULL THEN
          DELETE FROM {{schema}}.flow_steps WHERE id IN (
            SELECT s.id FROM {{schema}}.flow_steps s
            WHERE s.created_at <= reach
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.processed_items p WHERE p.queue_item_id = s.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = s.id)
              AND NOT EXISTS (SELECT 1 FROM {{schema}}.queue_waiting w WHERE w.id = s.id)
            ORDER BY s.created_at, s.id LIMIT batch FOR UPDATE SKIP LOCKED);
        END IF;
        RETURN n;
      END
      $fn$;
      -- As 0018: it runs as the schema's owner (CREATE OR REPLACE reset that).
      ALTER FUNCTION {{schema}}.kairos_prune_processed(timestamptz, bigint, integer)
        SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
