
      CREATE OR REPLACE FUNCTION {{schema}}.kairos_processed_items_insert_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        IF TG_OP = 'DELETE' AND current_setting('kairos.pruning', true) = 'on' THEN
          RETURN OLD;
        END IF;
        RAISE EXCEPTION 'processed_items is insert-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
      END
      $fn$;
CREATE INDEX processed_items_created ON {{schema}}.processed_items (created_at, id);
CREATE INDEX job_runs_finished ON {{schema}}.job_runs (finished_at, id)
      WHERE status IN ('success', 'failed', 'skipped');

      CREATE FUNCTION {{schema}}.kairos_prune_processed(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        n int;
      BEGIN
        IF keep_last IS NOT NULL THEN
          SELECT id INTO keep_from FROM {{schema}}.processed_items ORDER BY id DESC OFFSET greatest(keep_last, 0) LIMIT 1;
          -- No more than keep_last rows: none is beyond them.
          IF keep_from IS NULL THEN RETURN 0; END IF;
        END IF;
        PERFORM set_config('kairos.pruning', 'on', true);
        DELETE FROM {{schema}}.processed_items WHERE id IN (
          SELECT id FROM {{schema}}.processed_items
          WHERE (older_than IS NULL OR created_at < older_than)
            AND (keep_from IS NULL OR id <= keep_from)
          ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        PERFORM set_config('kairos.pruning', 'off', true);
        RETURN n;
      END
      $fn$;

      CREATE FUNCTION {{schema}}.kairos_prune_runs(older_than timestamptz, keep_last bigint, batch int)
      RETURNS int LANGUAGE plpgsql AS $fn$
      DECLARE
        keep_from bigint;
        n int;
      BEGIN
        IF keep_last IS NOT NULL THEN
          SELECT id INTO keep_from FROM {{schema}}.job_runs WHERE status IN ('success', 'failed', 'skipped')
            ORDER BY id DESC OFFSET greatest(keep_last, 0) LIMIT 1;
          IF keep_from IS NULL THEN RETURN 0; END IF;
        END IF;
        -- Finished runs only: a pending or running run (and the slot it stands for) is never pruned.
        DELETE FROM {{schema}}.job_runs WHERE id IN (
          SELECT id FROM {{schema}}.job_runs
          WHERE status IN ('success', 'failed', 'skipped')
            AND (older_than IS NULL OR finished_at < older_than)
            AND (keep_from IS NULL OR id <= keep_from)
          ORDER BY id LIMIT batch FOR UPDATE SKIP LOCKED);
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
      END
      $fn$;
