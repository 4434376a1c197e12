
      CREATE TABLE {{schema}}.queue_items (
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
      );

      CREATE FUNCTION {{schema}}.kairos_queue_items_normalize() RETURNS trigger LANGUAGE plpgsql AS $fn$
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
      $fn$;

      CREATE TRIGGER queue_items_normalize BEFORE INSERT ON {{schema}}.queue_items
      FOR EACH ROW EXECUTE FUNCTION {{schema}}.kairos_queue_items_normalize();

      CREATE FUNCTION {{schema}}.kairos_queue_items_notify() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        PERFORM pg_notify('{{channel}}', 'queue_items');
        RETURN NULL;
      END
      $fn$;

      CREATE TRIGGER queue_items_notify AFTER INSERT ON {{schema}}.queue_items
      FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.kairos_queue_items_notify();

      CREATE INDEX queue_items_claimable ON {{schema}}.queue_items (task_type, thread, priority DESC, id)
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs));

      CREATE UNIQUE INDEX queue_items_one_sequential ON {{schema}}.queue_items (task_type)
      WHERE status = 'processing' AND thread = 0;

      CREATE TABLE {{schema}}.queue_leases (
        id          bigserial PRIMARY KEY,
        item_id     bigint NOT NULL REFERENCES {{schema}}.queue_items (id) ON DELETE CASCADE,
        token       text NOT NULL,
        owner       text NOT NULL,
        started_at  timestamptz NOT NULL,
        lease_until timestamptz NOT NULL
      );
CREATE INDEX queue_leases_item ON {{schema}}.queue_leases (item_id);
CREATE INDEX queue_leases_until ON {{schema}}.queue_leases (lease_until);
CREATE INDEX queue_leases_owner ON {{schema}}.queue_leases (owner);

      CREATE TABLE {{schema}}.processed_items (
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
      );
CREATE INDEX processed_items_item ON {{schema}}.processed_items (queue_item_id);

      CREATE FUNCTION {{schema}}.kairos_processed_items_insert_only() RETURNS trigger LANGUAGE plpgsql AS $fn$
      BEGIN
        RAISE EXCEPTION 'processed_items is insert-only: % refused', TG_OP USING ERRCODE = 'insufficient_privilege';
      END
      $fn$;

      CREATE TRIGGER processed_items_insert_only BEFORE UPDATE OR DELETE ON {{schema}}.processed_items
      FOR EACH ROW EXECUTE FUNCTION {{schema}}.kairos_processed_items_insert_only();

      CREATE TABLE {{schema}}.scheduler_workers (
        id           text PRIMARY KEY,
        task_types   text[] NOT NULL DEFAULT '{}',
        started_at   timestamptz NOT NULL DEFAULT now(),
        heartbeat_at timestamptz NOT NULL DEFAULT now()
      );
