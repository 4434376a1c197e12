
      CREATE FUNCTION {{schema}}.kairos_record_and_claim_next(
        p_lease_id bigint, p_token text, p_started timestamptz, p_finished timestamptz, p_duration int,
        p_type text, p_owner text, p_now timestamptz, p_lease_until timestamptz, p_repeat_after timestamptz
      ) RETURNS TABLE (
        recorded bigint, id bigint, task_type text, payload text, status text, priority int, max_runs int,
        thread int, runs_done int, runs_started int, run_after timestamptz, created_at timestamptz,
        updated_at timestamptz, in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
      ) LANGUAGE plpgsql SET jit = off AS $fn$
      #variable_conflict use_column
      DECLARE
        v_recorded bigint;
        c1 {{schema}}.queue_items%ROWTYPE;
        c0 {{schema}}.queue_items%ROWTYPE;
        c {{schema}}.queue_items%ROWTYPE;
        has1 boolean;
        has0 boolean := false;
        v_lease bigint;
        v_token text;
      BEGIN
        -- kairos_record_once for one success, its retry step left out. The lease goes first (fenced by its token),
        -- then the item: deleted after its last run, else updated as a finished run, each condition checked again on
        -- the row's latest version, so an item changed meanwhile (by SQL, or by another instance taking back its
        -- lease) is never left in flight without a lease.
        WITH l AS (
          DELETE FROM {{schema}}.queue_leases q WHERE q.id = p_lease_id AND q.token = p_token
            AND EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id
        ), log AS (
          INSERT INTO {{schema}}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT i.id, i.task_type, i.payload, 'ok', '', p_started, p_finished, p_duration
          FROM l JOIN {{schema}}.queue_items i ON i.id = l.item_id
        ), gone AS (
          DELETE FROM {{schema}}.queue_items i USING l
          WHERE i.id = l.item_id AND i.max_runs <= 1 AND i.in_flight <= 1
        ), kept AS (
          UPDATE {{schema}}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 THEN i.max_runs ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = 0,
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            updated_at = now()
          FROM l WHERE i.id = l.item_id AND NOT (i.max_runs <= 1 AND i.in_flight <= 1)
        )
        SELECT l.id INTO v_recorded FROM l;
        IF v_recorded IS NOT NULL THEN
          recorded := v_recorded;
          RETURN NEXT;
          recorded := NULL;
        END IF;

        -- Room for another run implies the claimable index's predicate: that index is used.
        SELECT i.* INTO c1 FROM {{schema}}.queue_items i
        WHERE i.task_type = p_type AND i.thread = 1 AND (i.max_runs = -1 OR i.in_flight < i.max_runs)
          AND coalesce(i.run_after, '-infinity'::timestamptz) <= p_now
        ORDER BY i.priority DESC, i.seq LIMIT 1
        FOR UPDATE SKIP LOCKED;
        has1 := FOUND;
        -- The type's slot is looked at before its lock is tried: a busy type's lock is never held for nothing.
        IF NOT EXISTS (
          SELECT 1 FROM {{schema}}.queue_items b WHERE b.task_type = p_type AND b.status = 'processing' AND b.thread = 0
        ) AND pg_try_advisory_xact_lock(hashtext('kairos.seq.{{schema_text}}.' || p_type)) THEN
          SELECT i.* INTO c0 FROM {{schema}}.queue_items i
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
        END IF;

        UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + 1, runs_started = i.runs_started + 1,
          status = 'processing', updated_at = p_now,
          run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
          seq = CASE WHEN i.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) ELSE i.seq END
        WHERE i.id = c.id;
        INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        VALUES (c.id, gen_random_uuid()::text, p_owner, p_now, p_lease_until, c.runs_started + 1)
        RETURNING q.id, q.token INTO v_lease, v_token;
        id := c.id; task_type := c.task_type; payload := c.payload; status := c.status; priority := c.priority;
        max_runs := c.max_runs; thread := c.thread; runs_done := c.runs_done; runs_started := c.runs_started;
        run_after := c.run_after; created_at := c.created_at; updated_at := c.updated_at; in_flight := c.in_flight;
        seq := c.seq; unique_key := c.unique_key; lease_id := v_lease; token := v_token;
        attempt := c.runs_started + 1;
        RETURN NEXT;
      END
      $fn$;
