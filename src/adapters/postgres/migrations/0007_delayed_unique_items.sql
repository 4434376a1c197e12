ALTER TABLE {{schema}}.queue_items ADD COLUMN unique_key text;
CREATE UNIQUE INDEX queue_items_unique_key ON {{schema}}.queue_items (unique_key) WHERE unique_key IS NOT NULL;
DROP INDEX {{schema}}.queue_items_claimable;

      CREATE INDEX queue_items_claimable ON {{schema}}.queue_items
        (task_type, thread, priority DESC, seq, (coalesce(run_after, '-infinity'::timestamptz)))
      WHERE in_flight = 0 OR (thread = 1 AND (max_runs = -1 OR in_flight < max_runs));
CREATE INDEX queue_items_run_after ON {{schema}}.queue_items (task_type, run_after) WHERE run_after IS NOT NULL;
DROP FUNCTION {{schema}}.kairos_claim(text[], int, text, timestamptz, timestamptz, timestamptz);

    CREATE FUNCTION {{schema}}.kairos_claim(
      p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
      p_repeat_after timestamptz
    ) RETURNS TABLE (
      id bigint, task_type text, payload text, status text, priority int, max_runs int, thread int,
      runs_done int, runs_started int, run_after timestamptz, created_at timestamptz, updated_at timestamptz,
      in_flight int, seq bigint, unique_key text, lease_id bigint, token text, attempt int
    ) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
    #variable_conflict use_column
    BEGIN
      RETURN QUERY
      WITH cand AS (
        SELECT c.* FROM unnest(p_types) AS t(task_type)
        CROSS JOIN LATERAL (
          SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq, i.unique_key FROM {{schema}}.queue_items i
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
            SELECT 1 FROM {{schema}}.queue_items b
            WHERE b.task_type = t.task_type AND b.status = 'processing' AND b.thread = 0
          ) AND pg_try_advisory_xact_lock(hashtext('kairos.seq.{{schema_text}}.' || t.task_type))
        ) t
        CROSS JOIN LATERAL (
          SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq, i.unique_key FROM {{schema}}.queue_items i
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
        UPDATE {{schema}}.queue_items i SET in_flight = i.in_flight + p.n, runs_started = i.runs_started + p.n,
          status = 'processing', updated_at = p_now,
          run_after = CASE WHEN i.max_runs = -1 THEN p_repeat_after ELSE i.run_after END,
          seq = CASE WHEN i.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) ELSE i.seq END
        FROM planned p WHERE i.id = p.id
      ), leased AS (
        INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        SELECT p.id, gen_random_uuid()::text, p_owner, p_now, p_lease_until, p.runs_started + g.k
        FROM planned p CROSS JOIN LATERAL generate_series(1, p.n) AS g(k)
        RETURNING q.id, q.item_id, q.token, q.attempt
      )
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, l.id, l.token,
        l.attempt
      FROM leased l JOIN planned p ON p.id = l.item_id
      ORDER BY p.priority DESC, p.seq, l.id;
    END
    $fn$;
