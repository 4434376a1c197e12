ALTER TABLE {{schema}}.queue_leases DROP CONSTRAINT IF EXISTS queue_leases_item_id_fkey;
DROP INDEX IF EXISTS {{schema}}.queue_leases_owner;
DELETE FROM {{schema}}.queue_leases l WHERE NOT EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = l.item_id);

      CREATE FUNCTION {{schema}}.kairos_claim(
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
            SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq FROM {{schema}}.queue_items i
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
              SELECT 1 FROM {{schema}}.queue_items b
              WHERE b.task_type = t.task_type AND b.status = 'processing' AND b.thread = 0
            ) AND pg_try_advisory_xact_lock(hashtext('kairos.seq.{{schema_text}}.' || t.task_type))
          ) t
          CROSS JOIN LATERAL (
            SELECT i.id, i.task_type, i.payload, i.status, i.priority, i.max_runs, i.thread, i.runs_done, i.runs_started, i.run_after, i.created_at, i.updated_at, i.in_flight, i.seq FROM {{schema}}.queue_items i
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
          p.runs_started, p.run_after, p.created_at, p.updated_at, p.in_flight, p.seq, l.id, l.token, l.attempt
        FROM leased l JOIN planned p ON p.id = l.item_id
        ORDER BY p.priority DESC, p.seq, l.id;
      END
      $fn$;

      CREATE FUNCTION {{schema}}.kairos_record_once(
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
          DELETE FROM {{schema}}.queue_leases q USING input x WHERE q.id = x.lease_id AND q.token = x.token
            AND EXISTS (SELECT 1 FROM {{schema}}.queue_items i WHERE i.id = q.item_id)
          RETURNING q.id, q.item_id
        ), log AS (
          INSERT INTO {{schema}}.processed_items
            (queue_item_id, task_type, payload, status, error_msg, started_at, finished_at, duration_ms)
          SELECT l.item_id, x.task_type, x.payload, x.status, x.error_msg, x.started_at, x.finished_at, x.duration_ms
          FROM l JOIN input x ON x.lease_id = l.id
        ), gone AS (
          DELETE FROM {{schema}}.queue_items i USING l WHERE i.id = l.item_id AND i.max_runs <= 1 AND i.in_flight <= 1
        ), kept AS (
          UPDATE {{schema}}.queue_items i SET
            in_flight = greatest(0, i.in_flight - 1),
            max_runs = CASE WHEN i.max_runs = -1 THEN -1 ELSE greatest(0, i.max_runs - 1) END,
            runs_done = i.runs_done + 1,
            status = CASE WHEN i.in_flight - 1 > 0 THEN 'processing' ELSE 'pending' END,
            updated_at = now()
          FROM l WHERE i.id = l.item_id AND NOT (i.max_runs <= 1 AND i.in_flight <= 1)
        )
        SELECT l.id FROM l;
      END
      $fn$;
