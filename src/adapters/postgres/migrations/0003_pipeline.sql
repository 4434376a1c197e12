CREATE SEQUENCE {{schema}}.queue_items_seq;
ALTER TABLE {{schema}}.queue_items
      ADD COLUMN seq bigint,
      ADD COLUMN run_after timestamptz,
      ADD COLUMN runs_started int NOT NULL DEFAULT 0;
UPDATE {{schema}}.queue_items SET seq = id, runs_started = runs_done + in_flight;
SELECT setval('{{schema_text}}.queue_items_seq'::regclass, greatest(1, (SELECT max(id) FROM {{schema}}.queue_items)));
ALTER TABLE {{schema}}.queue_items
      ALTER COLUMN seq SET DEFAULT nextval('{{schema_text}}.queue_items_seq'::regclass),
      ALTER COLUMN seq SET NOT NULL;
ALTER TABLE {{schema}}.queue_leases ADD COLUMN attempt int NOT NULL DEFAULT 1;

      CREATE OR REPLACE FUNCTION {{schema}}.kairos_queue_items_normalize() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
      $fn$;
DROP INDEX {{schema}}.queue_items_claimable;

      CREATE INDEX queue_items_claimable ON {{schema}}.queue_items (task_type, thread, priority DESC, seq)
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs));

      CREATE FUNCTION {{schema}}.kairos_scheduler_meta_paused() RETURNS trigger LANGUAGE plpgsql AS $fn$
      DECLARE v text := lower(trim(NEW.value));
      BEGIN
        IF v IN ('true', '1', 'yes', 'on', 'red') THEN v := 'red';
        ELSIF v IN ('false', '0', 'no', 'off', 'green') THEN v := 'green';
        ELSE RAISE EXCEPTION 'scheduler.paused must be true or false (got %)', NEW.value USING ERRCODE = 'check_violation';
        END IF;
        INSERT INTO {{schema}}.scheduler_meta (key, value) VALUES ('semaphore', v)
          ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
        RETURN NULL;
      END
      $fn$;

      INSERT INTO {{schema}}.scheduler_meta (key, value)
      SELECT 'semaphore', CASE WHEN lower(trim(value)) IN ('true', '1', 'yes', 'on', 'red') THEN 'red' ELSE 'green' END
      FROM {{schema}}.scheduler_meta WHERE key = 'scheduler.paused'
      ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value;
DELETE FROM {{schema}}.scheduler_meta WHERE key = 'scheduler.paused';

      CREATE TRIGGER scheduler_meta_paused BEFORE INSERT OR UPDATE ON {{schema}}.scheduler_meta
      FOR EACH ROW WHEN (NEW.key = 'scheduler.paused') EXECUTE FUNCTION {{schema}}.kairos_scheduler_meta_paused();

      CREATE FUNCTION {{schema}}.kairos_scheduler_meta_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_notify('{{channel}}', 'settings');
        RETURN NULL;
      END
      $fn$;

      CREATE TRIGGER scheduler_meta_notify AFTER INSERT OR UPDATE OR DELETE ON {{schema}}.scheduler_meta
      FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.kairos_scheduler_meta_notify();
ALTER TABLE {{schema}}.scheduler_workers
      ADD COLUMN live_until timestamptz NOT NULL DEFAULT now() + interval '2 minutes';
UPDATE {{schema}}.scheduler_workers SET live_until = heartbeat_at + interval '2 minutes';
