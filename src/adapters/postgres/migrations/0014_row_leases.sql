ALTER TABLE {{schema}}.queue_items ADD COLUMN lease_token text, ADD COLUMN lease_owner text,
      ADD COLUMN lease_until timestamptz;
CREATE INDEX queue_items_leased ON {{schema}}.queue_items (lease_until) WHERE lease_token IS NOT NULL;

    CREATE FUNCTION {{schema}}.kairos_claim(
      p_types text[], p_limit int, p_owner text, p_now timestamptz, p_lease_until timestamptz,
      p_repeat_after timestamptz,
      p_row_leases boolean
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
          seq = CASE WHEN i.max_runs = -1 THEN nextval('{{schema_text}}.queue_items_seq'::regclass) ELSE i.seq END,
          lease_token = CASE WHEN p_row_leases AND i.thread = 1 AND i.max_runs = 1 THEN to_hex((random() * 4503599627370496)::bigint) ELSE i.lease_token END,
          lease_owner = CASE WHEN p_row_leases AND i.thread = 1 AND i.max_runs = 1 THEN p_owner ELSE i.lease_owner END,
          lease_until = CASE WHEN p_row_leases AND i.thread = 1 AND i.max_runs = 1 THEN p_lease_until ELSE i.lease_until END
        FROM unnest(ARRAY(SELECT pl.id FROM planned pl), ARRAY(SELECT pl.n FROM planned pl)) AS p(id, n) WHERE i.id = p.id
        RETURNING i.id, i.lease_token, i.runs_started, p_row_leases AND i.thread = 1 AND i.max_runs = 1 AS row_leased
      ), leased AS (
        INSERT INTO {{schema}}.queue_leases AS q (item_id, token, owner, started_at, lease_until, attempt)
        SELECT p.id, to_hex((random() * 4503599627370496)::bigint), p_owner, p_now, p_lease_until, p.runs_started + g.k
        FROM planned p CROSS JOIN LATERAL generate_series(1, p.n) AS g(k)
        WHERE NOT (p_row_leases AND p.thread = 1 AND p.max_runs = 1)
        RETURNING q.id, q.item_id, q.token, q.attempt
      )
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, l.id, l.token,
        l.attempt
      FROM leased l JOIN planned p ON p.id = l.item_id
      UNION ALL
      SELECT p.id, p.task_type, p.payload, p.status, p.priority, p.max_runs, p.thread, p.runs_done,
        p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, p.unique_key, -u.id, u.lease_token,
        u.runs_started
      FROM updated u JOIN planned p ON p.id = u.id WHERE u.row_leased
      ORDER BY 5 DESC, 14, 16;
    END
    $fn$;

      CREATE FUNCTION {{schema}}.kairos_record_row_leases(
        p_lease_ids bigint[], p_tokens text[], p_statuses text[], p_errors text[], p_started timestamptz[],
        p_finished timestamptz[], p_durations int[], p_attempts int[], p_backoff_ms bigint[], p_exponential boolean[],
        p_max_backoff_ms bigint[]
      ) RETURNS SETOF bigint LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET jit = off AS $fn$
      BEGIN
        RETURN QUERY
        WITH input AS (
          SELECT * FROM unnest(
            p_lease_ids, p_tokens, p_statuses, p_errors, p_started, p_finished, p_durations, p_attempts, p_backoff_ms,
            p_exponential, p_max_backoff_ms
          ) AS x(lease_id, token, status, error_msg, started_at, finished_at, duration_ms, attempts, backoff_ms,
            exponential, max_backoff_ms)
        ), r AS (
          -- Failures with an attempt left, and when they run again. Only failures are looked at.
          SELECT i.id AS item_id, x.finished_at + {{schema}}.kairos_retry_delay_ms(e.backoff_ms, e.exponential,
            e.max_backoff_ms, i.failures) * interval '1 millisecond' AS retry_at
          FROM input x JOIN {{schema}}.queue_items i ON i.id = -x.lease_id AND i.lease_token = x.token
          CROSS JOIN LATERAL {{schema}}.kairos_retry_policy(i.retry_attempts, i.retry_backoff_ms, i.retry_exponential,
            i.retry_max_backoff_ms, x.attempts, x.backoff_ms, x.exponential, x.max_backoff_ms) AS e
          WHERE x.status = 'error' AND i.failures + 1 < e.attempts
        ), gone AS (
          DELETE FROM {{schema}}.queue_items i USING input x
          WHERE i.id = -x.lease_id AND i.lease_token = x.token AND i.max_runs <= 1 AND i.in_flight <= 1
            AND NOT EXISTS (SELECT 1 FROM r WHERE r.item_id = i.id)
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), kept AS (
          UPDATE {{schema}}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 OR r.item_id IS NOT NULL THEN i.max_runs
              ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            failures = CASE WHEN r.item_id IS NOT NULL THEN i.failures + 1 ELSE 0 END,
            run_after = coalesce(r.retry_at, i.run_after),
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            lease_token = NULL, lease_owner = NULL, lease_until = NULL,
            updated_at = now()
          FROM input x LEFT JOIN r ON r.item_id = -x.lease_id
          WHERE i.id = -x.lease_id AND i.lease_token = x.token
            AND (r.item_id IS NOT NULL OR NOT (i.max_runs <= 1 AND i.in_flight <= 1))
          RETURNING x.lease_id, i.id AS item_id, i.task_type, i.payload, x.status, x.error_msg, x.started_at,
            x.finished_at, x.duration_ms
        ), l AS (
          SELECT * FROM gone UNION ALL SELECT * FROM kept
        ), log AS (
          INSERT INTO {{schema}}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, l.task_type, l.payload, l.status, l.error_msg, l.started_at, l.finished_at, l.duration_ms
          FROM l
        )
        SELECT l.lease_id FROM l;
      END
      $fn$;
